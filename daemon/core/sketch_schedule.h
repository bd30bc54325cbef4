// Sketch only when it is used (DESIGN §3): which windows and steps the
// ranks sketch. Two plan values decide it, both agreed like the rest of
// the plan, so every rank of a job sketches the same windows and steps
// (shm::SketchWindowDue, shm::SketchStepDue):
//  * the plan's sketch stride s: a window's rows are sampled on every s-th
//    step only (sketch_stride; auto: about kAutoSketchSteps steps per
//    window);
//  * each layer's sketch period P: a candidate is sketched in every window
//    while its factors are on probation (not yet on the GIFT path), but a
//    GIFT-path layer whose factor subspace holds from one refresh to the
//    next is refreshed, and so sketched, in every P-th window only. P grows
//    by one per steady refresh up to the largest period that keeps its
//    factor younger than staleness_limit, and falls back to 1 when the
//    subspace moved, the gain decayed (early refresh) or the layer left
//    the GIFT path.
//
//   SketchSchedule& s = layer.sketch;
//   s.NoteFactor(version, factors.subspace_kept());  // factor_store.h
//   if (s.Decide(candidate, on_gift_path, refresh_seq,
//                MaxSketchPeriod(0, 200, 50)))
//     /* the plan changed */;
//
// Thread safety: not thread-safe; guarded by the daemon's mutex.
#ifndef GIFT_DAEMON_CORE_SKETCH_SCHEDULE_H_
#define GIFT_DAEMON_CORE_SKETCH_SCHEDULE_H_

#include <cstdint>
#include <limits>
#include <string>

#include "shm/protocol.h"

namespace gift::daemon {

// Sketch steps per window the automatic stride aims for.
inline constexpr int kAutoSketchSteps = 16;
// A refresh is steady when the previous factor's basis holds at least this
// share of the new factor's energy (SubspaceKept).
inline constexpr double kSteadySubspace = 0.98;
// A refresh moved the subspace when the previous basis holds less than this
// (or cannot be compared): the period falls back to 1. Between the two the
// period stays, so a layer whose SubspaceKept hovers around 0.98 does not
// flap between periods (each change is a plan epoch: at K = 4 in the main
// job's test that was several epochs a second).
inline constexpr double kMovedSubspace = 0.95;

// The plan's stride for refresh interval k: `option` (>= 1) at most k, or
// with 0 (auto) max(1, k / kAutoSketchSteps).
int SketchStride(int option, int k);
// The longest sketch period: `option` (>= 1), or with 0 (auto) the most
// windows that keep a factor younger than the staleness limit while its
// successor is sketched and built, with a margin of max(k,
// staleness_limit / 4) steps for the build: max(1, (staleness_limit −
// margin) / k).
int MaxSketchPeriod(int option, int64_t staleness_limit, int k);

class SketchSchedule {
 public:
  int32_t period() const { return period_; }
  // Why the layer is sketched as it is, and in which windows (ListLayers'
  // sketch_reason).
  std::string reason() const;

  // Factor `version` was installed; `kept`: its SubspaceKept against the
  // one before (FactorStore::subspace_kept).
  void NoteFactor(int64_t version, double kept) {
    kept_ = kept;
    kept_version_ = version;
  }
  // The leader's decision for the next plan; true when the period changed.
  // on_gift_path: selected with an accepted factor; refresh_seq: the
  // layer's (a bump since the last call asks for a window now: an early
  // refresh, new settings, TriggerRefresh).
  bool Decide(bool candidate, bool on_gift_path, int64_t refresh_seq,
              int max_period);
  // A follower takes the leader's period (below 1: 1).
  void Follow(bool candidate, int32_t period);

 private:
  int32_t period_ = 1;
  bool candidate_ = false;
  bool on_path_ = false;  // on the GIFT path at the last Decide
  std::string why_;       // the cause of the period, for reason()
  double kept_ = std::numeric_limits<double>::quiet_NaN();
  int64_t kept_version_ = -1;
  int64_t judged_version_ = -1;  // the newest factor the period followed
  int64_t refresh_seq_ = 0;      // the layer's refresh_seq last seen
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_SKETCH_SCHEDULE_H_
