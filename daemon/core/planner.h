// The job's plan (DESIGN §2, §4): the plan epoch, the refresh interval K,
// the audit interval, the default rank r, the layer selector and each
// layer's plan state (candidate, selected, settings, refresh_seq, score).
// On the leader (or without peers) the selector's decisions change the
// plan; a follower applies the leader's plans and keeps the newest one
// (JoinState sends it back). The epoch rules: epochs only increase; a
// plan older than the one held is ignored unless a newer leader term sent
// it; a (re-)attaching rank, a joining or reporting follower and a newly
// elected leader continue above every epoch the job has seen.
//
// The Planner only decides and keeps books: publishing the plan to the
// ranks (and the peers), logging and metrics are the caller's
// (PlanPublisher::NewEpoch, PublishToAll).
//
//   Planner p({.refresh_interval = 25, .audit_interval = 100, .rank = 32});
//   ASSERT_OK(p.selector().AddLayer({"fc1", 16, 24}));
//   Planner::Selection s = p.ApplySelection(layers);
//   if (s.changed) { p.NextEpoch(); /* publish */ }
//
// Thread safety: not thread-safe; the daemon holds its mutex around every
// use.
#ifndef GIFT_DAEMON_CORE_PLANNER_H_
#define GIFT_DAEMON_CORE_PLANNER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/sketch_schedule.h"
#include "daemon/selector.h"
#include "gift/v1/peer.pb.h"
#include "gift/v1/types.pb.h"

namespace gift::daemon {

// One layer's part of the plan (JobLayer extends it).
struct PlanLayer {
  std::string name;
  v1::LayerSettings settings;  // effective (pin, transform, r, β, format)
  bool candidate = false, selected = false;
  int64_t refresh_seq = 0;
  // The factor version the GIFT path may use (LayerScore::accepted_version;
  // -1: none). Published beside the plan, not a new epoch (but carried to
  // the other nodes by one).
  int64_t accepted_version = -1;
  // The newest version judged to gain (LayerScore::proven_version), as of
  // the last plan: a leader rebuilt from this plan continues with it.
  int64_t proven_version = -1;
  LayerScore score;  // the selector's last decision
  // Which windows of the layer the ranks sketch (the leader decides, the
  // plan carries its period).
  SketchSchedule sketch;
};

struct PlannerOptions {
  int refresh_interval = 25;  // K
  int audit_interval = 0;
  int rank = 32;  // r of the layers without a rank of their own
  SelectorPolicy selection;
  double beta = 1.0;          // β of low-rank layers without one of their own
  bool peered = false;        // a member of a multi-node job
  int sketch_stride = 0;      // DaemonConfig::sketch_stride (0: auto)
  int max_sketch_period = 0;  // DaemonConfig::max_sketch_period (0: auto)
  int64_t staleness_limit = 200;
};

class Planner {
 public:
  explicit Planner(const PlannerOptions& options);

  // ---- the plan
  int64_t epoch() const { return epoch_; }
  // The next epoch (every plan change); returns it.
  int64_t NextEpoch() { return ++epoch_; }
  // Sets the epoch (a follower publishes 0 until the leader's first plan).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // Raises the epoch to at least `epoch`.
  void RaiseEpoch(int64_t epoch) { epoch_ = std::max(epoch_, epoch); }
  int refresh_interval() const { return refresh_interval_; }
  void set_refresh_interval(int k) { refresh_interval_ = k; }
  // The plan's sketch stride for the current K (sketch_schedule.h).
  int sketch_stride() const {
    return SketchStride(sketch_stride_, refresh_interval_);
  }
  int audit_interval() const { return audit_interval_; }
  void set_audit_interval(int steps) { audit_interval_ = steps; }
  int rank() const { return rank_; }
  // A new default rank: the layers without a rank of their own refresh
  // (refresh_seq) with it.
  void SetRank(int rank, const std::vector<PlanLayer*>& layers);
  // The rank a layer's factors get (before its slot cap): its own or r.
  int RankOf(const v1::LayerSettings& s) const {
    return s.rank() > 0 ? s.rank() : rank_;
  }

  LayerSelector& selector() { return selector_; }
  const LayerSelector& selector() const { return selector_; }
  // A new job's layers follow: an empty selector with the same policy.
  void ResetSelector() { selector_ = LayerSelector(selector_.policy()); }

  // ---- leader (or without peers)
  struct Selection {
    bool changed = false;  // the plan changed: a new epoch is due
    // What moved ("fc1 selected", "fc2 early refresh (gain decayed)", a
    // β change with peers): the new epoch's reason.
    std::vector<std::string> moves;
    // One line per β auto change (for the log), in layer order.
    std::vector<std::string> beta_changes;
    // An accepted factor version changed (publish it; with peers `changed`
    // is set too, so that the other nodes get it with the next epoch).
    bool accepted_changed = false;
  };
  // The selector's decision into the layers: scores, candidate and
  // selected, β auto (the β of a layer's next factor, from the probes' β
  // grid; a plan change only with peers, whose owners need it) and early
  // refresh (refresh_seq). Does not change the epoch.
  Selection ApplySelection(const std::vector<PlanLayer*>& layers);
  // The selector's view of the layers' settings (pin, transform, rank).
  std::map<std::string, SelectorSettings> SelectorSettingsByLayer(
      const std::vector<const PlanLayer*>& layers) const;

  // The plan a leader broadcasts: epoch, K, audit interval, r, world size
  // and the layers as held (members, leader instance and term are the
  // caller's).
  v1::PeerPlan BuildPlan(const std::string& job_id, int world_size,
                         const std::vector<const PlanLayer*>& layers) const;

  // A (re-)attaching rank holds `epoch` of an earlier giftd: continue above
  // it. Returns whether the epoch went up past the rank's (the whole node
  // needs the plan again).
  bool ContinueAbove(int64_t epoch);
  // A joining follower's ranks hold `epoch` (max of its ranks' and its
  // plan's): true when the next epoch must go above it (the epoch is then
  // `epoch`; NextEpoch goes above).
  bool JoinerHolds(int64_t epoch);
  // A follower's telemetry reports its ranks at `epoch`: the same, for an
  // epoch above this one.
  bool ReporterHolds(int64_t epoch);
  // A joining follower's plan at or above this epoch (this leader
  // restarted): applied, and its selection resumed. OK when older; the
  // selector's error otherwise (the plan stays applied).
  absl::Status TakeOverFollowerPlan(const v1::PeerPlan& plan, int* world_size,
                                    const std::vector<PlanLayer*>& layers);
  // Elected leader: continue above every epoch the job has seen (1, the
  // ranks' floor, the plan in use) and resume the selection in use. The
  // selector's error (nothing else changes) when it fails.
  absl::Status TakeLead(const std::vector<PlanLayer*>& layers);

  // ---- follower
  // Holds the leader's `plan` unless it is a late or repeated one (an
  // epoch not above the held plan's within the same term; a newer term's
  // leader may repeat an epoch of the deposed one's). Returns whether it is
  // held (then ApplyPlan it).
  bool HoldLeaderPlan(const v1::PeerPlan& plan);
  // The plan's epoch, K, audit interval (when valid), r, world size (when
  // *world_size is still 0) and layer flags and settings (by name; a layer
  // without a format in the plan keeps its own). REQUIRES: the plan's
  // formats were checked (CheckPlanFormats).
  void ApplyPlan(const v1::PeerPlan& plan, int* world_size,
                 const std::vector<PlanLayer*>& layers);
  // ApplyPlan of the held plan, if any (a follower's layers arrived).
  void ApplyHeldPlan(int* world_size, const std::vector<PlanLayer*>& layers);
  bool have_plan() const { return have_plan_; }
  const v1::PeerPlan& last_plan() const { return last_plan_; }
  // A local rank registered holding `epoch` (the leader learns this floor
  // from the next report and JoinState).
  void NoteRankEpoch(int64_t epoch) {
    rank_epoch_floor_ = std::max(rank_epoch_floor_, epoch);
  }
  // The newest epoch this node or its ranks hold (reports and JoinState).
  int64_t HeldEpoch() const { return std::max(epoch_, rank_epoch_floor_); }

 private:
  // Resumes the selection of `layers` that are selected, with the versions
  // of the plan in use.
  absl::Status ResumeSelection(const std::vector<PlanLayer*>& layers);

  const double beta_;
  const bool peered_;
  int64_t epoch_ = 1;
  int refresh_interval_;
  // The config's sketch stride, or on a follower the leader's.
  int sketch_stride_;
  const int max_sketch_period_;
  const int64_t staleness_limit_;
  int audit_interval_;
  int rank_;
  LayerSelector selector_;
  // Follower: the newest leader plan held.
  v1::PeerPlan last_plan_;
  bool have_plan_ = false;
  // Follower: the newest epoch a local rank held when it registered.
  int64_t rank_epoch_floor_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_PLANNER_H_
