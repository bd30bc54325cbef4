// The layer selector of giftd (DESIGN §2, §6): which layers get factors
// (candidates) and which take the GIFT path (selected), from live telemetry.
//
// Input, per layer and per observation (the daemon calls Observe about every
// 100 ms with what its local ranks reported since the last call, summed over
// the ranks): steps advanced, quantized elements, FP8 boundary hits, and the
// probe results (sums of the local Euclidean and GIFT round-trip RelL2 over
// probe steps). The selector keeps a window of the last `window_steps` steps
// per layer and derives
//   vulnerability = Σ(upper + lower) / Σ n        over the window,
//   gain          = 1 − Σ gift_rel_l2 / Σ euclid  over the window's probes
//                   (NaN while the window holds no probe).
//
// Decide() then applies, in order:
//  1. pins: PIN_OUT layers are never candidates; PIN_IN layers always are,
//     and are selected whatever their gain;
//  2. the policy on vulnerability (top-k / elbow / threshold), with
//     hysteresis: a current candidate stays while its score is above the cut
//     times (1 − hysteresis); a newcomer enters only above the cut times
//     (1 + hysteresis) (top-k: it must beat the weakest member by that
//     factor);
//  3. the measured-gain guard: a candidate is selected once its gain is
//     >= min_gain and stays selected until its gain drops below
//     min_gain · (1 − hysteresis); without a measured gain it is not
//     selected (it still gets factors, so probes can measure it);
//  4. the budget (max_layers, max_extra_flops per step: 4·d_out·d_in·r for
//     low-rank, 2·d_out·d_in² for full) in order of vulnerability; pinned
//     layers count against it first;
//  5. early refresh: a selected layer whose gain fell below half of the best
//     gain measured since its current factor version (and below the guard's
//     entry level) is listed once per factor version.
// The decision changes (and the daemon emits a new plan epoch) only when the
// candidate or selected set changes.
//
//   LayerSelector selector(SelectorPolicy{});
//   selector.AddLayer({"blocks.0.mlp.fc2", 64, 128});
//   selector.Observe("blocks.0.mlp.fc2", sample);
//   SelectionDecision d = selector.Decide(settings_by_layer);
//
// Thread safety: not thread-safe; the daemon serialises calls.
#ifndef GIFT_DAEMON_SELECTOR_H_
#define GIFT_DAEMON_SELECTOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::daemon {

enum class SelectionKind { kTopK, kElbow, kThreshold };
enum class PinState { kAuto, kIn, kOut };

const char* SelectionKindName(SelectionKind kind);  // "top-k", "elbow", ...
absl::StatusOr<SelectionKind> ParseSelectionKind(const std::string& name);

// Largest top_k, window_steps and max_layers (a window keeps one sample
// per poll and layer, so its length is bounded too).
inline constexpr int kMaxSelectionCount = 1000000;

struct SelectorPolicy {
  // Default: top-k.
  SelectionKind kind = SelectionKind::kTopK;
  // top-k: k. Default: 8. REQUIRES: [1, kMaxSelectionCount].
  int top_k = 8;
  // threshold: minimum vulnerability. Default: 0.01. REQUIRES: [0, 1].
  double threshold = 0.01;
  // Relative margin to enter/leave. Default: 0.1. REQUIRES: [0, 1).
  double hysteresis = 0.1;
  // Score window in steps. Default: 50. REQUIRES: [1, kMaxSelectionCount].
  int window_steps = 50;
  // Budget: at most this many selected layers; 0 = unlimited. Default: 0.
  // REQUIRES: [0, kMaxSelectionCount].
  int max_layers = 0;
  // Budget: extra whitening flops per step; 0 = unlimited. Default: 0.
  // REQUIRES: >= 0.
  double max_extra_flops = 0;
  // Measured-gain guard. Default: 0.05. REQUIRES: [0, 1).
  double min_gain = 0.05;

  // INVALID_ARGUMENT naming the first bad field.
  absl::Status Validate() const;
};

struct SelectorLayer {
  std::string name;
  int64_t d_out = 0;
  int64_t d_in = 0;
};

// Per-layer settings that matter to the selector.
struct SelectorSettings {
  PinState pin = PinState::kAuto;
  bool full = false;  // transform `full` (flops 2·d_out·d_in²)
  int rank = 32;      // r (flops 4·d_out·d_in·r)
};

// What happened on one layer since the last Observe (summed over ranks).
struct SelectorSample {
  int64_t steps = 0;  // steps advanced (max over the ranks)
  int64_t n = 0;
  int64_t upper = 0;
  int64_t lower = 0;
  int64_t probes = 0;
  double probe_euclid_sum = 0;
  double probe_gift_sum = 0;
  int64_t factor_version = -1;  // newest version the daemon published
  // Audit steps (libgift's every-audit_interval FP32 allreduce of the same
  // local gradients beside the quantized one), summed over the ranks' audits
  // in this sample: how many, and the sum of the audited per-step RelL2 of
  // the gradient actually applied against the FP32 average, split by the
  // path the layer took on that step. Every rank of a job audits the same
  // steps and computes the same figures.
  int64_t audits_gift = 0;
  double audit_gift_rel_l2_sum = 0;
  int64_t audits_euclid = 0;
  double audit_euclid_rel_l2_sum = 0;
};

struct LayerScore {
  double vulnerability = 0;  // 0 with no data
  double gain = 0;           // NaN while unmeasured
  bool candidate = false;
  bool selected = false;
  std::string reason;  // e.g. "selected: gain 0.31 >= 0.05"
};

struct SelectionDecision {
  std::vector<std::string> candidates;  // in layer order
  std::vector<std::string> selected;    // in layer order
  std::vector<std::string> early_refresh;
  bool changed = false;  // candidates or selected differ from the last call
  std::map<std::string, LayerScore> scores;
};

class LayerSelector {
 public:
  explicit LayerSelector(SelectorPolicy policy);

  // INVALID_ARGUMENT for a duplicate or empty name or a bad shape.
  absl::Status AddLayer(const SelectorLayer& layer);
  bool HasLayer(const std::string& name) const;
  // INVALID_ARGUMENT (state unchanged) when the policy is invalid. A new
  // window length applies to the samples already held.
  absl::Status SetPolicy(const SelectorPolicy& policy);
  const SelectorPolicy& policy() const { return policy_; }

  // NOT_FOUND for an unknown layer. Negative counts: INVALID_ARGUMENT.
  absl::Status Observe(const std::string& layer, const SelectorSample& s);

  // A job resumed from a checkpoint had `selected` on the GIFT path (and
  // holds their factors): keep them selected (candidates, so they get new
  // factors) until their window holds telemetry, then until a gain is
  // measured; from then on the usual rules decide, with `selected` as the
  // hysteresis memory. Pins and the budget still apply. NOT_FOUND (state
  // unchanged) for an unknown layer.
  absl::Status Resume(const std::vector<std::string>& selected);

  // settings: by layer name; a missing layer has the defaults.
  SelectionDecision Decide(
      const std::map<std::string, SelectorSettings>& settings);

 private:
  struct Window;  // per-layer ring of samples (selector.cc)
  struct State;

  SelectorPolicy policy_;
  std::vector<SelectorLayer> layers_;
  std::map<std::string, std::shared_ptr<State>> state_;
  std::vector<std::string> last_candidates_;
  std::vector<std::string> last_selected_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_SELECTOR_H_
