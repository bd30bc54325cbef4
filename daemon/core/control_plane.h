// giftd's Control service logic (DESIGN §6): status, layers, run-time
// settings. Every request is validated before anything changes; a change
// is applied to the plan (the Planner, the layers' settings) and published
// as a new epoch (PlanPublisher). A follower forwards these requests to the
// leader instead (the daemon routes them; PeerCoordinator::Forward), whose
// next plan carries the change back.
//
//   ControlPlane control({core, started, &plans, &factors, &registrar});
//   ASSIGN_OR_RETURN(v1::SetRankResponse out, control.SetRank(request));
//   v1::GetStatusResponse status = control.Status();
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_CONTROL_PLANE_H_
#define GIFT_DAEMON_CORE_CONTROL_PLANE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/plan_publisher.h"
#include "daemon/core/planner.h"
#include "daemon/core/registrar.h"
#include "daemon/core/session_table.h"
#include "gift/v1/control.pb.h"

namespace gift::daemon {

inline constexpr char kGiftVersion[] = "0.1.0";

class ControlPlane {
 public:
  // What it reads and writes: the core's shared state (core_state.h) and the
  // components it calls; every pointer must outlive it.
  struct Parts : CoreState {
    absl::Time started;
    PlanPublisher* plans;
    const FactorPipeline* factors;
    const Registrar* registrar;
  };
  explicit ControlPlane(Parts parts) : p_(parts) {}

  // The node's status without the peers' part (the caller adds it outside
  // its lock: PeerCoordinator::Status).
  v1::GetStatusResponse Status() const;
  v1::ListLayersResponse Layers() const;

  absl::StatusOr<v1::SetLayerPolicyResponse> SetLayerPolicy(
      const v1::SetLayerPolicyRequest& r);
  absl::StatusOr<v1::SetRefreshIntervalResponse> SetRefreshInterval(
      const v1::SetRefreshIntervalRequest& r);
  absl::StatusOr<v1::SetAuditIntervalResponse> SetAuditInterval(
      const v1::SetAuditIntervalRequest& r);
  absl::StatusOr<v1::SetRankResponse> SetRank(const v1::SetRankRequest& r);
  absl::StatusOr<v1::SetSelectionPolicyResponse> SetSelectionPolicy(
      const v1::SetSelectionPolicyRequest& r);
  absl::StatusOr<v1::TriggerRefreshResponse> TriggerRefresh(
      const v1::TriggerRefreshRequest& r);

 private:
  v1::LayerStatus LayerStatusOf(const JobLayer& l) const;
  // INVALID_ARGUMENT (naming the bound) for settings layer `l` cannot take.
  absl::Status ValidateLayerSettings(const JobLayer& l,
                                     const v1::LayerSettings& s) const;

  const Parts p_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_CONTROL_PLANE_H_
