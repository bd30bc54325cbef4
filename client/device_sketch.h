// Activation sketches in device memory for a GiftdConnection whose
// activations live on the GPU (DESIGN §2, §5): the open window's
// accumulators stay on the device and nothing on the per-step path waits
// on the host.
//
// Per declared layer the sketcher keeps Y (d × k, row-major, the layout of
// the shared sketch buffer), Σ‖a‖² (double) and the row count (int64) and,
// for `full` layers, A (d × d) with its own trace and count. It adds sampled
// activation rows with the kernels' cuBLAS sketch (kernels/sketch.h:
// cuda::SketchAccumulate, cuda::SecondMomentAccumulate, which also add the
// trace and the count on the device) on one private non-blocking stream,
// the sketch stream:
//  * Add records an event on the stream that produced the rows and makes
//    the sketch stream wait for it, gathers strided rows device to device
//    (cudaMemcpy2DAsync; none when the stride is 1), and queues the GEMMs.
//    It never synchronises, never allocates and queues nothing on the
//    legacy default stream (but the event, when that is the producer), so
//    it may run inside a CUDA graph capture of the producer stream: the
//    sketch is then captured too (only then does the producer stream wait
//    for the sketch stream at the end of the call, so that the capture is
//    joined) and each replay adds the captured rows again. Replays run
//    outside the sketch stream: the caller orders them after the window's
//    Open and before its Close (events both ways).
//  * Open (window start) zeroes the accumulators with cudaMemsetAsync and
//    uploads Ω (from pageable memory: the driver may wait for the sketch
//    stream while staging it); it allocates only when a layer needs more
//    room than it had (its first window, a larger sketch_rows, the first
//    `full` window).
//    Buffers only grow; replaced ones are freed only by the destructor, so
//    a captured graph never points at freed memory while the sketcher lives.
//  * Close (window end) copies the accumulators into the layer's shared
//    region on the sketch stream: device to device into a CUDA IPC region,
//    then Region::SignalWrites (the interprocess event giftd's Region::Read
//    waits on); into a host POSIX region (giftd's fallback when it cannot
//    use the GPU) device to host, then a synchronise of the sketch stream:
//    a host wait at a window end, off the training thread. (The other
//    waits: Quiesce before a region is unmapped, and Ω's staging in Open.)
//
//   ASSIGN_OR_RETURN(auto sk, DeviceSketcher::Create(/*device=*/0, layers));
//   RETURN_IF_ERROR(sk->Open(j, d, omega, /*full=*/false, /*max_rows=*/512));
//   RETURN_IF_ERROR(sk->Add(j, rows, n, stride, producer_stream));  // steps
//   RETURN_IF_ERROR(sk->Close(j, region, layout.sketch[b], nullptr, nullptr));
//
// The caller keeps the rows alive until the sketch stream has read them
// (PyTorch: tensor.record_stream on stream()).
//
// Thread safety: not thread-safe. GiftdConnection serialises every call
// with its mutex (Add from the training thread, Open/Close from the thread
// that runs AfterStep); stream() may be read from any thread.
#ifndef GIFT_CLIENT_DEVICE_SKETCH_H_
#define GIFT_CLIENT_DEVICE_SKETCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shm/layout.h"
#include "shm/region.h"

namespace gift::client {

class DeviceSketcher {
 public:
  // A sketcher for `layers` layers on CUDA device `device`: the sketch
  // stream, its cuBLAS handle (with its own workspace, so cuBLAS allocates
  // nothing later) and the events. FAILED_PRECONDITION in a build without
  // CUDA or without that device.
  static absl::StatusOr<std::unique_ptr<DeviceSketcher>> Create(int device,
                                                                int layers);
  virtual ~DeviceSketcher() = default;

  // The sketch stream (a cudaStream_t).
  virtual void* stream() const = 0;

  // Starts a window of `layer`: Ω (host, d × k row-major; k =
  // omega.size() / d) is uploaded and the accumulators zeroed, both queued
  // on the sketch stream. max_rows: the rows one Add is expected to bring
  // (more are sketched in chunks). INVALID_ARGUMENT for bad sizes.
  // REQUIRES: 0 <= layer < layers, d > 0, max_rows > 0.
  virtual absl::Status Open(int layer, int64_t d,
                            const std::vector<float>& omega, bool full,
                            int64_t max_rows) = 0;

  // Adds rows 0, stride, 2·stride, … (n of them, each d floats, in device
  // memory) to the layer's open window, ordered after the work queued so
  // far on `producer` (a cudaStream_t; nullptr = the legacy default
  // stream). INVALID_ARGUMENT when `rows` is not device memory or the layer
  // was never opened. REQUIRES: n >= 0, stride >= 1.
  virtual absl::Status Add(int layer, const float* rows, int64_t n,
                           int64_t stride, void* producer) = 0;

  // Copies the window's Y, trace and count into `data` at `sketch` and,
  // when `full` is not null, A and its trace and count into `full` at
  // `acc` (see the file comment for the two kinds of region). OUT_OF_RANGE
  // when the layout does not fit the region.
  virtual absl::Status Close(int layer, shm::Region* data,
                             const shm::LayerRegionLayout::Sketch& sketch,
                             shm::Region* full,
                             const shm::FullRegionLayout::Acc* acc) = 0;

  // Waits until the copies of the last Close are done (not for later
  // sketches), before a region they write into is unmapped.
  virtual absl::Status Quiesce() = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_DEVICE_SKETCH_H_
