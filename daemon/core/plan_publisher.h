// Publishing the job's plan (DESIGN §2, §4): the Planner decides, the
// publisher tells. A new epoch (a selection change, an operator's setting,
// a joining follower) creates the full-transform regions the plan needs,
// writes the plan into every local rank's control block, and on the leader
// broadcasts it to the followers with the members, this leader's instance
// and term; the plan gauges follow. A newly registered rank gets the plan
// alone (PublishTo).
//
//   PlanPublisher plans(core);  // core: core_state.h
//   plans.ApplySelection();           // a changed selection: a new epoch
//   plans.NewEpoch("refresh interval K = 20");
//   link->SetPlan(plans.Plan());
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_PLAN_PUBLISHER_H_
#define GIFT_DAEMON_CORE_PLAN_PUBLISHER_H_

#include <string>

#include "absl/status/status.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/planner.h"
#include "daemon/core/session_table.h"
#include "daemon/metrics/daemon_metrics.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

class PlanPublisher {
 public:
  // What it reads and writes: the core's shared state (core_state.h); every
  // pointer must outlive it.
  using Parts = CoreState;
  explicit PlanPublisher(Parts parts) : p_(parts) {}

  // The plan into one rank's control block.
  void PublishTo(RankSession& s);
  // Into every local rank's, to the followers (leader) and the gauges.
  void PublishToAll();
  // The next epoch (logged with `why`), with the full regions it needs,
  // published.
  void NewEpoch(const std::string& why);
  // Every local rank gets a full region of each full-transform layer.
  absl::Status EnsureFullRegions();
  // Applies the selector's decision (Planner::ApplySelection); with
  // `publish`, a change is a new epoch. Returns whether anything changed.
  bool ApplySelection(bool publish = true);
  // The Planner's plan with the members, this leader's instance and term.
  v1::PeerPlan Plan() const;

 private:
  const Parts p_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_PLAN_PUBLISHER_H_
