// Local ranks coming and going (DESIGN §5): Register (the checks and limits
// first, then the job's adoption, the session's shared memory, the epochs
// and factor versions of a re-attaching rank, the newest factors and the
// plan), Heartbeat, Deregister, and the reaping of ranks whose process is
// gone or whose heartbeat stopped. Without peers the first rank's job
// becomes the node's; a member of a multi-node job serves config.job_id
// and keeps its layers while local ranks come and go.
//
//   Registrar reg({core, &plans, &factors, &store});  // core: core_state.h
//   ASSIGN_OR_RETURN(v1::RegisterResponse out, reg.Register(request));
//   reg.ReapDead();   // every poll
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_REGISTRAR_H_
#define GIFT_DAEMON_CORE_REGISTRAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/kv_store.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/plan_publisher.h"
#include "daemon/core/planner.h"
#include "daemon/core/session_table.h"
#include "daemon/metrics/daemon_metrics.h"
#include "gift/v1/agent.pb.h"

namespace gift::daemon {

class Registrar {
 public:
  // What it reads and writes: the core's shared state (core_state.h) and the
  // components it calls; every pointer must outlive it.
  struct Parts : CoreState {
    PlanPublisher* plans;
    FactorPipeline* factors;
    KvStore* store;
  };
  explicit Registrar(Parts parts) : p_(parts) {}

  // A rank (again): checked against the job and the limits before anything
  // is dropped or allocated; a live rank of the same number is refused, a
  // dead one replaced.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& r);
  // REQUIRES: the step already checked (CheckCount).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& r);
  absl::Status Deregister(const v1::DeregisterRequest& r);

  // The job's layers from a rank's or a follower's list: the layout, the
  // selector's layers, the rendezvous store's job and the per-layer series;
  // `format` the job's default wire format (REQUIRES: valid()).
  absl::Status AdoptLayers(const std::string& job_id, int world_size,
                           const LayerShapes& layers,
                           kernels::WireFormat format);

  // Drops a session (its series, its shared memory) and logs `why`.
  void DropSession(const std::string& id, const std::string& why);
  // DropSession, counted as a reap.
  void Reap(const std::string& id, const std::string& why);
  // Reaps the ranks whose process is gone or whose heartbeat stopped.
  void ReapDead();
  // Every session (giftd stopping).
  void DropAll(const std::string& why);
  int64_t reaped_total() const { return reaped_total_; }

 private:
  absl::Status CheckRegister(const v1::RegisterRequest& r) const;
  // Room on this node for one more session of r's process (`replaced`: a
  // session it replaces) and for its shared memory: RESOURCE_EXHAUSTED
  // naming the limit.
  absl::Status CheckCapacity(const v1::RegisterRequest& r,
                             const std::string& replaced) const;
  // A multi-node job's first local rank: the layers with the leader's
  // format once a follower holds it, else the rank's ask (or the config's);
  // on the leader a new epoch tells every node.
  absl::Status AdoptJob(const v1::RegisterRequest& r);
  // A follower holds a plan of a leader with a job: the job's format is the
  // leader's (JobLayout::TakeFormat took it), not a local rank's ask.
  bool LeaderDecidedFormat() const;
  // Register's epoch and version bookkeeping for a (re-)attaching rank;
  // returns whether the whole node needs the plan again.
  absl::StatusOr<bool> ContinueAbove(const v1::RegisterRequest& r);
  // Device ranks get CUDA IPC data regions (on the GPU named by the rank's
  // PCI bus id), or host ones when this giftd cannot use that GPU.
  absl::StatusOr<std::unique_ptr<RankSession>> CreateSession(
      const v1::RegisterRequest& r, SessionSpec spec);
  // The new session's spec (ids, rank, memory, the job's layers).
  SessionSpec SpecOf(const v1::RegisterRequest& r);
  // The new session's Ω₀ and the newest factors; the plan (to every rank
  // when `raise`).
  absl::Status Attach(RankSession& session, bool raise);

  const Parts p_;
  int64_t reaped_total_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_REGISTRAR_H_
