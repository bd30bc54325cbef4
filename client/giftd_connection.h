// GiftdConnection (the public gift::DaemonAttachment wraps one): a rank's
// attachment to its node's giftd (DESIGN §4, §5): registers over
// the daemon's unix-socket Agent service, maps the shared memory the daemon
// made for it, heartbeats, writes activation sketches and telemetry, and
// feeds the daemon's plans and factors into the rank's AllReduceEngine.
//
// It never stops training:
//  * the daemon absent at start: the rank runs Euclidean FP8 (its own
//    bucket plan) and a background thread keeps trying to register;
//  * the daemon dies: the rank keeps the last plans and factors; a layer
//    whose factor is older than the plan's staleness limit (steps since its
//    sketch window closed) is dropped, so it goes Euclidean on every rank
//    (the per-step agreement sees a rank without it);
//  * a restarted daemon: the rank re-registers, telling it the epochs and
//    versions it holds so that the new daemon continues above them.
//
// Per training step:
//   // forward/backward: for each layer the daemon wants sketched (device
//   // activations: with the stream that produced them)
//   if (att->WantsSketch(name)) {
//     RETURN_IF_ERROR(att->Sketch(name, a, rows, producer_stream));
//   }
//   RETURN_IF_ERROR(att->BeforeStep(allreduce.get(), &factors));
//   RETURN_IF_ERROR(allreduce->Run(bucket, factors, &t));  // timed
//   RETURN_IF_ERROR(att->AfterStep(*allreduce, t, seconds));
//
// Device activations (options.device_memory) are sketched on the GPU, on
// the attachment's own stream (sketch_stream()), into accumulators in
// device memory; no call of the training step waits for the GPU. A window
// close (in AfterStep) copies them into the rank's CUDA IPC sketch buffer
// on that stream and records the interprocess event giftd waits on; only
// when giftd serves host shared memory instead (it could not use the GPU)
// does AfterStep wait for the sketch stream, at window ends.
//
// Sketch windows follow the agreed plan, so every rank closes them in the
// same step: a window ends after step s when (s + 1) % K == 0 for the K of
// the epoch the step agreed on, or when that epoch carries a higher refresh
// request for the layer than the window began with.
//
// Thread safety: Sketch, BeforeStep and AfterStep are serialised by one
// mutex, so AfterStep may run on another thread than Sketch (a
// communication thread); the caller orders them (a step's Sketch calls
// before its AfterStep). A private thread does registration and
// heartbeats. The accessors are thread-safe.
#ifndef GIFT_CLIENT_GIFTD_CONNECTION_H_
#define GIFT_CLIENT_GIFTD_CONNECTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/allreduce_engine.h"
#include "client/epoch_plan.h"
#include "client/telemetry.h"
#include "client/versioned_factors.h"
#include "kernels/wire_format.h"

namespace gift::client {

struct ConnectionOptions {
  // The daemon's Agent socket. Default: $GIFT_AGENT_SOCKET, else
  // /tmp/gift/agent.sock.
  std::string agent_socket;
  // REQUIRES: not empty; the same on every rank of the job.
  std::string job_id;
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // Default: 0.
  int local_rank = 0;
  // Gradients and activations in device memory (NCCL ranks): giftd is
  // asked for CUDA IPC data regions and sketches run on the GPU.
  // REQUIRES: a build with CUDA and the device `device` (Create fails with
  // FAILED_PRECONDITION otherwise). Default: false.
  bool device_memory = false;
  // CUDA device (device_memory). Default: 0.
  int device = 0;
  // Between attach attempts while detached. Default: 1 s. REQUIRES: > 0.
  absl::Duration retry_interval = absl::Seconds(1);
  // Bound of each Agent call. Default: 2 s. REQUIRES: > 0.
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Staleness limit used before the first plan arrives (steps).
  // Default: 200. REQUIRES: >= 1.
  int64_t staleness_limit = 200;
  // The job's default wire format asked of giftd (gift.init(format=...)):
  // the rank that starts the job sets it, a rank asking another than the
  // job's is refused (it stays detached, stats().last_error says why).
  // Default: unset (the daemon config's `format`). REQUIRES: valid().
  std::optional<kernels::WireFormat> format;

  // A rank resumed from a checkpoint: what it restored into its allreduce,
  // so the daemon continues above these epochs and versions and keeps the
  // GIFT layers selected. Default: nothing (a fresh job).
  struct Resume {
    int64_t plan_epoch = 0;  // newest plan epoch held
    int64_t step = 0;        // steps completed (the allreduce's step)
    // Newest factor version held, by layer; their staleness counts from
    // `step` (the checkpoint does not keep the windows' end steps).
    std::map<std::string, int64_t> factor_versions;
    // Layers on the GIFT path in the epoch in use.
    std::vector<std::string> gift_layers;
  };
  Resume resume;
};

struct ConnectionStats {
  bool attached = false;
  int64_t attaches = 0;  // successful registrations
  int64_t detaches = 0;  // daemon lost
  // Beats that asked the daemon over RPC: the first, and those after which
  // the daemon had not polled the control block (a daemon that polls
  // gets the beats there, DESIGN §5).
  int64_t heartbeat_rpcs = 0;
  int64_t plans_applied = 0;  // epochs handed to AddPlan
  int64_t factors_received = 0;
  int64_t stale_drops = 0;  // layers dropped for staleness
  int64_t windows_closed = 0;
  int64_t windows_skipped = 0;          // buffer not yet consumed by the daemon
  int64_t last_epoch_switch_step = -1;  // step the current epoch began
  int64_t current_epoch = 0;
  int64_t current_refresh_interval = 0;
  std::string daemon_instance;
  std::string last_error;
};

class GiftdConnection {
 public:
  // Never fails because of the daemon: INVALID_ARGUMENT only for bad
  // options (FAILED_PRECONDITION: device_memory without a usable CUDA
  // device); a plan without 2-D layers is fine (nothing to declare). The
  // 2-D layers of `base` are declared to the daemon; `base` is the plan the
  // rank runs while detached, and the layout of every later epoch.
  static absl::StatusOr<std::unique_ptr<GiftdConnection>> Create(
      const ConnectionOptions& options, const EpochPlan& base);
  ~GiftdConnection();  // deregisters (best effort) and stops the thread

  // Is `layer` a candidate whose activations the daemon wants this step?
  bool WantsSketch(const std::string& layer) const;
  // Adds a sample of the rows × d_in activations (row-major) to the
  // layer's open window: n = min(rows, the plan's sketch_rows) rows, every
  // (rows / n)-th from row 0. No-op when not wanted. INVALID_ARGUMENT for an
  // unknown layer or bad sizes.
  //
  // Host activations (device_memory false; producer_stream is ignored):
  // sketched before the call returns. Cost: the copy of n rows and one
  // n × d_in × (r + p) GEMM pair on the calling thread.
  //
  // Device activations (device_memory): producer_stream is the
  // cudaStream_t that produced them (nullptr = the legacy default stream).
  // The sketch (one D2D gather of the n rows when rows > n, the GEMM pair,
  // the trace and count, and for `full` layers A += aᵀa) is queued on
  // sketch_stream() behind an event recorded on producer_stream, and the
  // call returns without waiting for the GPU: it never synchronises,
  // allocates device memory, or queues anything on the legacy default
  // stream but that event when producer_stream is it. Nothing needs
  // synchronising first.
  // REQUIRES: the activations stay allocated and unchanged until
  // sketch_stream() has read them. With PyTorch's caching allocator:
  //   x.record_stream(torch.cuda.ExternalStream(att.sketch_stream()))
  // before x may be freed (it is not reused until the sketch stream passed
  // this point). INVALID_ARGUMENT for pointers that are not memory of
  // options.device.
  // Under CUDA graph capture of producer_stream the sketch is captured too
  // (the producer stream then waits for the sketch stream at the end of
  // the call, so that the capture is joined); each replay adds those rows
  // to the layer's device accumulators again. A replay is not ordered with
  // sketch_stream() by itself: make the replay stream wait for
  // sketch_stream() before it (a window open zeroes there) and
  // sketch_stream() wait for the replay stream after it (a window close
  // copies there), with events. AfterStep must not run while such a
  // capture is open.
  absl::Status Sketch(const std::string& layer, const float* activations,
                      int64_t rows, void* producer_stream = nullptr);
  // The cudaStream_t the device sketches and window closes run on
  // (device_memory); nullptr on the host path. The same for the
  // attachment's lifetime. Nothing in the library makes a training stream
  // wait for it.
  void* sketch_stream() const;
  // Applies a newer plan epoch (allreduce->AddPlan) and copies new factors
  // into `factors`; drops stale ones.
  absl::Status BeforeStep(AllReduceEngine* allreduce,
                          VersionedFactors* factors);
  // Publishes the step's telemetry, closes/opens sketch windows per the
  // agreed epoch. collective_seconds: the Run's wall time. Device path: a
  // close queues device copies on sketch_stream() (and, into host shared
  // memory, waits for them); an open zeroes the device accumulators with
  // cudaMemsetAsync (allocating on a layer's first window only).
  absl::Status AfterStep(const AllReduceEngine& allreduce,
                         const StepTelemetry& telemetry,
                         double collective_seconds);

  ConnectionStats stats() const;

 private:
  struct Impl;
  explicit GiftdConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_GIFTD_CONNECTION_H_
