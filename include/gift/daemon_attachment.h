// gift::DaemonAttachment: a rank's attachment to its node's giftd. It
// registers over the daemon's Agent unix socket, maps the shared memory the
// daemon made for the rank, heartbeats, takes activation sketches, and
// (attached to a QuantizedAllReduce) feeds the daemon's plans and factors
// into every step and the step's telemetry back to the daemon.
//
//   gift::AttachmentOptions o;
//   o.job_id = "job42";
//   o.rank = rank;
//   o.world_size = world_size;
//   std::shared_ptr<gift::DaemonAttachment> att;
//   gift::Status s = gift::DaemonAttachment::Create(o, plan, &att);
//   s = allreduce->Attach(att);
//   // forward pass, per 2-D layer the daemon wants:
//   if (att->WantsSketch("fc2")) s = att->Sketch("fc2", x, rows * d_in, rows);
//   s = allreduce->Step(bucket, n);
//
// It never stops training: with the daemon absent at start the rank runs
// Euclidean FP8 (the base plan) while a background thread keeps trying to
// register; when the daemon dies the rank keeps the last plans and factors
// (stale factors are dropped on every rank alike); a restarted daemon is
// re-registered with.
//
// Thread safety: Sketch and the allreduce's steps are serialised inside the
// attachment, so Sketch may run on the training thread while steps run on a
// communication thread (the caller orders a step's Sketch calls before the
// step). The accessors are thread-safe.
#ifndef GIFT_DAEMON_ATTACHMENT_H_
#define GIFT_DAEMON_ATTACHMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gift/bucket_plan.h"
#include "gift/export.h"
#include "gift/status.h"

namespace gift {

struct AttachmentOptions {
  // giftd's Agent socket. Default: "" = $GIFT_AGENT_SOCKET, else
  // /tmp/gift/agent.sock.
  std::string agent_socket;
  // REQUIRES: not empty; the same on every rank of the job.
  std::string job_id;
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // The rank's index on its node. Default: 0.
  int local_rank = 0;
  // Gradients and activations in device memory (NCCL ranks): CUDA IPC
  // shared memory and sketches on the GPU `device`. REQUIRES: a libgift
  // built with CUDA and that device (FAILED_PRECONDITION otherwise).
  // Default: false.
  bool device_memory = false;
  int device = 0;
  // Between attach attempts while detached. Default: 1 s. REQUIRES: > 0.
  double retry_interval_seconds = 1;
  // Bound of each call to the daemon. Default: 2 s. REQUIRES: > 0.
  double rpc_timeout_seconds = 2;
  // Steps a factor stays usable before the first plan says otherwise.
  // Default: 200. REQUIRES: >= 1.
  int64_t staleness_limit = 200;
};

struct AttachmentStats {
  bool attached = false;
  int64_t attaches = 0;  // successful registrations
  int64_t detaches = 0;  // daemon lost
  int64_t plans_applied = 0;
  int64_t factors_received = 0;
  int64_t stale_drops = 0;
  int64_t windows_closed = 0;
  int64_t windows_skipped = 0;
  int64_t current_epoch = 0;
  int64_t current_refresh_interval = 0;
  std::string daemon_instance;
  std::string last_error;
};

class GIFT_EXPORT DaemonAttachment {
 public:
  // Never fails because of the daemon (absent is fine): INVALID_ARGUMENT
  // for bad options or an invalid plan; FAILED_PRECONDITION for
  // device_memory without a usable CUDA device. The 2-D layers of `base`
  // are declared to the daemon; `base` is the plan used while detached.
  // REQUIRES: out not null.
  static Status Create(const AttachmentOptions& options, const BucketPlan& base,
                       std::shared_ptr<DaemonAttachment>* out);

  ~DaemonAttachment();  // deregisters (best effort)
  DaemonAttachment(const DaemonAttachment&) = delete;
  DaemonAttachment& operator=(const DaemonAttachment&) = delete;

  // Does the daemon want this layer's activations this step?
  bool WantsSketch(const std::string& layer) const;
  // Adds rows x d_in activations (row-major, `count` = rows * d_in floats,
  // d_in of the layer in the base plan) to the layer's open window. No-op
  // when not wanted. INVALID_ARGUMENT for an unknown or 1-D layer, a null
  // pointer, rows < 1 or a count that is not rows * d_in. Host memory
  // unless device_memory; then producer_stream is the cudaStream_t that
  // produced them (nullptr = the legacy default stream) and the call does
  // not wait for the GPU: the activations must stay allocated until
  // sketch_stream() has read them.
  Status Sketch(const std::string& layer, const float* activations,
                size_t count, int64_t rows, void* producer_stream = nullptr);
  // The cudaStream_t of the device sketches, or nullptr on the host path.
  void* sketch_stream() const;

  const BucketPlan& base_plan() const;
  AttachmentStats stats() const;

 private:
  friend class QuantizedAllReduce;
  struct Rep;
  explicit DaemonAttachment(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace gift

#endif  // GIFT_DAEMON_ATTACHMENT_H_
