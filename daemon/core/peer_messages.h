// What this daemon answers its job's other daemons (DESIGN §4; the
// PeerHandler side of the daemon, after its routing and locking): a
// follower's join (the leader checks and may adopt its layers, continues
// above its epochs and versions, answers with the plan), a follower's
// telemetry report, the leader's plan (a follower holds and publishes it),
// a change of the members (a new epoch tells every member the layers' new
// owners) and this daemon's own join state. Every plan and factor carries
// the leader's term; one of an older term is refused and counted
// (CheckTerm). The leader decides the job's wire format: its plan carries
// it and each layer's; a follower checks a peer's formats before anything
// changes (JobLayout::CheckPlanFormats), and takes them.
//
//   PeerMessages peer({core, &plans, &telemetry, &registrar, &gauges});
//   ASSIGN_OR_RETURN(v1::PeerPlan plan, peer.Join(request));
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_PEER_MESSAGES_H_
#define GIFT_DAEMON_CORE_PEER_MESSAGES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/gauges.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/plan_publisher.h"
#include "daemon/core/planner.h"
#include "daemon/core/registrar.h"
#include "daemon/core/telemetry.h"
#include "daemon/metrics/daemon_metrics.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

// FAILED_PRECONDITION for a join of another shared-memory layout version.
absl::Status CheckJoinLayout(const v1::JoinRequest& r);

class PeerMessages {
 public:
  // What it reads and writes: the core's shared state (core_state.h) and the
  // components it calls; every pointer must outlive it.
  struct Parts : CoreState {
    PlanPublisher* plans;
    Telemetry* telemetry;
    Registrar* registrar;
    Gauges* gauges;
  };
  explicit PeerMessages(Parts parts) : p_(parts) {}

  // Leader: a follower joins (FAILED_PRECONDITION on a follower, or for a
  // joiner that has seen a newer term). Returns the plan to answer.
  absl::StatusOr<v1::PeerPlan> Join(const v1::JoinRequest& r);
  // Leader: a follower's telemetry (FAILED_PRECONDITION on a follower).
  absl::Status Report(const v1::ReportTelemetryRequest& r);
  // Follower: the leader's plan, held and published unless late.
  // `link`: the link as the message came (read before the caller locked).
  absl::Status Plan(const v1::PeerPlan& plan, PeerLink* link);
  // Leader: the members changed (the layers' owners with them).
  void MembersChanged();
  // What this daemon tells the leader when it joins.
  v1::JoinRequest JoinState() const;
  // PeerCoordinator::Hooks: a new link for election state `s` (elected:
  // resume the plan in use, lead, a new epoch), and elected again.
  void NewLink(const coord::ElectionState& s);
  void LeadsAgain(int64_t term);
  // PeerCoordinator::CheckTerm, a refusal counted in
  // gift_peer_refused_total{kind}.
  absl::Status CheckTerm(int64_t term, const char* kind);

 private:
  const Parts p_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_PEER_MESSAGES_H_
