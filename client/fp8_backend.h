// The memory-specific primitives under the quantized allreduce: a host
// implementation (Gloo, host memory, kernels/*.cc) and a device
// implementation (NCCL, device memory, the kernels' cuda:: variants on the
// communicator's stream), chosen by the communicator's memory_kind() in
// CreateFp8Backend. Fp8Round and AllReduceEngine are written once against
// it, so both paths share the chunking, the wire format, the step structure,
// the residual semantics and the agreement; only the backend's operations
// differ. They come in narrow parts, each its own interface, and a user
// takes the parts it needs:
//   memory()      buffers, zero-fill               fp8_backend_memory.h
//   codec()       FP8 quantize / accumulate round  fp8_backend_codec.h
//   math()        FP32 elementwise, bfloat16       fp8_backend_math.h
//   transforms()  GIFT forward / inverse / switch  fp8_backend_transforms.h
//   probe()       probe.h's round-trip errors      fp8_backend_probe.h
//   compare()     audit comparisons                fp8_backend_compare.h
// The backend itself brackets the steps and carries the control messages.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Fp8Backend> b, CreateFp8Backend(comm));
//   std::unique_ptr<Fp8Buffer> buf = b->memory().NewBuffer();
//   RETURN_IF_ERROR(buf->Resize(n * sizeof(float)));
//   RETURN_IF_ERROR(b->math().Divide(buf->floats(), n, 4.0f));
//
// Pointers passed to a backend are of its memory kind. The device backend
// queues everything on one stream, the communicator's (it sets it with
// SetStream), so kernels and collectives are ordered without extra
// synchronisation; EndRound, the flag and statistics read-back, is its only
// host wait besides the communicator's own.
//
// Bit-identity: the codec and the vector math give the same bits on both
// backends (IEEE single operations, no contraction); the GIFT transforms
// agree to GEMM rounding only.
//
// Thread safety: not thread-safe; one user at a time (the parts too).
#ifndef GIFT_CLIENT_FP8_BACKEND_H_
#define GIFT_CLIENT_FP8_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/fp8_backend_codec.h"
#include "client/fp8_backend_compare.h"
#include "client/fp8_backend_math.h"
#include "client/fp8_backend_memory.h"
#include "client/fp8_backend_probe.h"
#include "client/fp8_backend_transforms.h"
#include "client/transport.h"

namespace gift::client {

class Fp8Backend {
 public:
  virtual ~Fp8Backend() = default;

  // Brackets every step. BeginStep points the communicator at the backend's
  // stream again (several allreduces may share one communicator, each with
  // its own backend); EndStep returns once all queued work is complete.
  virtual absl::Status BeginStep() = 0;
  virtual absl::Status EndStep() = 0;
  // The stream the backend's work is queued on (cudaStream_t), or nullptr
  // on the host.
  virtual void* stream() const { return nullptr; }

  // The communicator for the small control messages built in host memory
  // (plan and option checks, the version agreement): the communicator itself
  // on the host, a staging wrapper over it on the device
  // (staging_transport.h). Owned by the backend.
  virtual Transport* control() = 0;

  // The parts, owned by the backend and living as long as it.
  virtual BackendMemory& memory() = 0;
  virtual Fp8Codec& codec() = 0;
  virtual VectorMath& math() = 0;
  virtual GiftTransforms& transforms() = 0;
  virtual LayerProbe& probe() = 0;
  virtual Comparator& compare() = 0;
};

// The backend for comm->memory_kind(): host, or (CUDA builds) device on the
// current CUDA device, which sets comm's stream to its own. REQUIRES: comm
// not null and outlives the backend.
absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateFp8Backend(Transport* comm);

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_H_
