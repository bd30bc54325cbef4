// The layer selector of giftd (DESIGN §2, §6): which layers get factors
// (candidates) and which take the GIFT path (selected), from live telemetry.
//
// Input, per layer and per observation (the daemon calls Observe about every
// 100 ms with what its local ranks reported since the last call, summed over
// the ranks): steps advanced, quantized elements, boundary hits in the
// layer's wire format (4-bit: tensor-relative, kernels/quantize_fp4.h), the
// probe results (sums of the local Euclidean and GIFT round-trip RelL2 over
// probe steps) and the audit results (RelL2 of the gradient actually
// applied against an FP32 allreduce, by path). The selector keeps a window
// of the last `window_steps` steps per layer and derives
//   vulnerability = Σ(upper + lower) / Σ n        over the window,
//   gain          = 1 − Σ gift_rel_l2 / Σ euclid  over the window's probes
//                   made with the newest published factor version, judged
//                   on >= kProbationProbes probe steps (a layer on
//                   the path) or >= policy.entry_probes (a newcomer)
//                   (SelectorSample::probe_version; NaN while the window
//                   holds none: probes of an older version, or of a sample
//                   whose probes mixed versions, never judge the new one);
// and, per layer, an audit window of its last `audit_window` audits (the
// reports of one audit step reach the selector within kAuditMergeSteps
// steps, maybe over several observations, and make one audit).
// Its clock is the number of steps it has seen (SelectorSample::step).
//
// What the vulnerability means depends on the layer's wire format: upper and
// lower are counted by the quantize kernel of that format, per quantize
// call (a segment of the layer). FP8 (per-tensor scale): elements at ±fmax,
// and non-zero elements that flush to 0 or the smallest subnormal — a
// measure of the tensor's dynamic range, which is what whitening
// compresses. 4-bit (kernels/quantize_fp4.h, "Telemetry"): tensor-relative,
// with the scale of the block that holds the segment's amax a — elements
// that would code to ±6 (nvfp4 |x| > 5a/6) or, non-zero, to ±0 (nvfp4
// |x| <= a/24; mxfp4 |x| <= 2^(⌊log2 a⌋ − 4)): the tensor's heavy tails
// again. Over the 8 committed MLP gradients (2 snapshots × 2 blocks ×
// fc1/fc2; tools/fidelity/hit_score_rank_test.cc) the Spearman correlation
// of this score, summed over the 4 workers' gradients, with GIFT's one-step
// gain at the format is +0.90 nvfp4, +0.86 mxfp4 (+0.79, +0.62 with each
// gradient in 4 segments); the earlier block-relative count (codes relative
// to each element's own block scale, a measure of the range inside blocks)
// gave −0.31, −0.36. The E4M3 count there hits 1–6 elements per gradient and
// ranks the gains only weakly (+0.00 to +0.31). Scores of different formats
// are not on one scale (4-bit 0.26–0.75, E4M3 6e-5–6e-4 on that data), so
// top-k ranks the 4-bit layers (SelectorSettings::four_bit) apart: top_k
// candidates among the others and top_k_4bit among them (0: all, the
// default, as at 4 bits most layers gain). The elbow ranks the 4-bit layers
// first, and the threshold means a different thing per format. Either way the
// probes' measured gain (the guard, with probation) decides whether a candidate
// takes the GIFT path.
//
// Decide() then applies, in order:
//  1. pins: PIN_OUT layers are never candidates; PIN_IN layers always are,
//     and are selected whatever their gain or audit;
//  2. the policy on vulnerability (top-k / elbow / threshold), with
//     hysteresis: a current candidate stays while its score is above the cut
//     times (1 − hysteresis); a newcomer enters only above the cut times
//     (1 + hysteresis) (top-k: it must beat the weakest member by that
//     factor). A *gaining* candidate (selected, gain >= the guard's stay
//     level) holds its place `gain_hold` times as firmly: top-k newcomers
//     must beat gain_hold · (1 + hysteresis) times its score; under elbow
//     and threshold it stays down to cut · (1 − hysteresis) / gain_hold;
//  3. the measured-gain guard with probation: a factor version is judged
//     once the window holds kProbationProbes probes made with it
//     (entry_probes, default 2, for a layer not on the path). A
//     candidate is selected once the newest version is judged with gain
//     >= entry_gain (at least min_gain) on each probe observation (in
//     practice each probe step: the probe reads more gain than the path
//     delivers, and a gain that decays as the factor ages must not enter
//     on its first probe), and that version becomes its accepted version
//     (LayerScore::accepted_version: the one factor every rank may use on
//     the GIFT path; a candidate's newer versions are used by probes
//     only). A selected layer uses its newest version at once, on trial
//     (it is accepted while on probation: held back, the path's factor
//     lagged the probes' by the probation, and its per-step RelL2 ratio was
//     1.08x the probes' in issue 27's demo against 0.98x); once judged, the
//     new version is kept when its gain is >= min_gain · (1 − hysteresis)
//     (the stay level), else the layer leaves the GIFT path (it does not
//     fall back to the older factor: no probe measures that one any more,
//     and it only grows staler), except while the plan pace holds the leave,
//     when it goes back to the newest version judged to gain
//     (LayerState::proven_version). Until a version is judged an unselected
//     candidate is not selected (it still gets factors, so probes can measure
//     it). Pinned-in and resumed layers accept the newest version without
//     probation;
//  4. the audit rule: a selected layer whose mean audited GIFT-path RelL2
//     over its audit window (at least two GIFT audits, or one when
//     audit_window is 1) exceeds its Euclidean reference times
//     (1 + audit_margin) leaves the GIFT path at once. The reference is the
//     mean of the Euclidean-path audits in the same audit window, else the
//     probes' Euclidean RelL2 over the step window times the calibration:
//     the mean ratio of audited to local round-trip Euclidean RelL2 of the
//     layer's own Euclidean audits (its last audit_window), else of every
//     layer that has one, else 1 (the applied gradient's error is larger
//     than a local round trip's: the ring's requantization, error feedback;
//     the probe alone would convict layers that do gain). It stays a candidate
//     but is barred from the GIFT path until (a) audit_window · 2^(n−1)
//     Euclidean-path audits have come since its n-th removal (the evidence
//     has aged out; each repeat doubles the wait) and (b) a factor newer
//     than the one it was removed with is published; it then re-enters only
//     at gain >= that entry level · (1 + hysteresis) on each probe step.
//     Pinned-in layers stay; their reason says the audit objects;
//  5. the budget (max_layers, max_extra_flops per step: 4·d_out·d_in·r for
//     low-rank, 2·d_out·d_in² for full) in order of vulnerability; pinned
//     layers count against it first;
//  6. early refresh: a selected layer whose gain fell below half of the best
//     gain measured since its current factor version (and below the guard's
//     entry level) is listed once per factor version;
//  7. the plan pace: once the clock has passed `warmup_steps`, the moves the
//     policy makes for its own reasons (a layer entering or leaving the
//     candidates, entering the GIFT path, leaving it on a gain in
//     [−min_gain, stay level), early refresh) take effect at most once per
//     `plan_interval_steps`, all pending ones together; until then the
//     layers keep their state (`held`). At once, whenever: moves of a layer
//     whose pin or settings changed, audit removals, a selected layer whose
//     gain fell below −min_gain (whitening measurably hurts), and everything
//     after SetPolicy or Resume. Pending moves ride along with those (one plan
//     change either way). plan_interval_steps = 0 turns the pace off.
// The plan pace holds the accepted version with the move: a held layer keeps
// the version it had. Accepting a newer version for a layer that stays
// selected is not a move: it is never held, and it is no plan change (the
// daemon publishes accepted versions beside the plan and the ranks agree on
// them per step, as on factor versions).
// The decision changes (and the daemon emits a new plan epoch) only when the
// candidate or selected set changes (or an early refresh is listed).
//
// The rooms: selector_policy.h (the policy and its check), selector_window.h
// (the windows and each layer's memory), selector_stages.h (steps 1–6),
// selector_pace.h (step 7); this file's LayerSelector ties them together.
//
//   LayerSelector selector(SelectorPolicy{});
//   selector.AddLayer({"blocks.0.mlp.fc2", 64, 128});
//   selector.Observe("blocks.0.mlp.fc2", sample);
//   SelectionDecision d = selector.Decide(settings_by_layer);
//
// Thread safety: not thread-safe; the daemon serialises calls.
#ifndef GIFT_DAEMON_SELECTOR_H_
#define GIFT_DAEMON_SELECTOR_H_

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/beta_grid.h"
#include "daemon/selector_policy.h"

namespace gift::daemon {
namespace internal {
struct LayerState;  // one layer's windows and memory (selector_window.h)
}  // namespace internal

enum class PinState { kAuto, kIn, kOut };

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
  // The layer's wire format is 4-bit (nvfp4, mxfp4): top-k ranks it among
  // the 4-bit layers (policy top_k_4bit).
  bool four_bit = false;
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
  // β auto: probes that also tried the β grid, and per grid value Σ the
  // GIFT round-trip RelL2 with the factor rebuilt for it (kBetaGridValues).
  int64_t beta_probes = 0;
  std::array<double, kBetaGrid> probe_beta_sum{};
  int64_t factor_version = -1;  // newest version the daemon published
  // The factor version every probe of this sample used (-1: no factor
  // version is known; kMixedProbeVersion: the probes used different
  // versions, so they judge none).
  int64_t probe_version = -1;
  // The probe steps of probe_version so far: the most probes any one rank
  // made with it, counted from its first (a rank probes a layer once per
  // probe step; the ranks probe the same steps). Cumulative, not this
  // sample's: a probe step whose probes reach the selector in two samples
  // (ranks or nodes polled on either side of it) counts once. 0 without
  // probes.
  int64_t version_probes = 0;
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
  // The local FP8 round trip of the path the layer took, over the sample's
  // steps, summed over the ranks: Σ‖x̂ − x‖² and Σ‖x‖² (0 when unknown). With
  // Euclidean audits it calibrates the probe reference of the audit rule
  // for layers without probes.
  double round_trip_err_sq = 0;
  double round_trip_x_sq = 0;
  // The job's step at this observation (the slowest rank's), -1 when
  // unknown. When given, the selector's clock is the steps since the first
  // one it saw; else it sums `steps`, which overcounts a little when the
  // ranks are polled on either side of a step.
  int64_t step = -1;
};

// SelectorSample::probe_version of a sample whose probes mixed versions.
inline constexpr int64_t kMixedProbeVersion = -2;

// The probe_version of `probes_before` probes of `version_before` merged
// with `probes` of `version`: the one version when both agree (or one side
// has no probe), else kMixedProbeVersion.
int64_t MergeProbeVersion(int64_t probes_before, int64_t version_before,
                          int64_t probes, int64_t version);

// Probe steps (SelectorSample::version_probes) a factor version needs in the
// window before the gain guard judges it (DESIGN §2 probation): one probe
// step is too noisy to put a factor on the GIFT path.
inline constexpr int64_t kProbationProbes = 2;

// Reports of one audit step that reach the selector within this many steps
// of each other are one audit (the ranks of a job step together, but the
// daemon may poll them on either side of a step).
inline constexpr int64_t kAuditMergeSteps = 2;

struct LayerScore {
  double vulnerability = 0;  // 0 with no data
  double gain = 0;           // NaN while unmeasured
  // Probe steps the gain was measured on (all with the newest factor
  // version).
  int64_t gain_probe_steps = 0;
  // The lowest gain of one probe observation (in practice one probe step)
  // among them: a layer enters the GIFT path only when it is at least
  // entry_gain.
  double gain_lowest = std::numeric_limits<double>::quiet_NaN();
  // The newest probe observation's gain: an early refresh looks at it too.
  double gain_latest = std::numeric_limits<double>::quiet_NaN();
  // The factor version the GIFT path may use: -1 unless selected (and while
  // a selected layer has no version yet). Probes use the newest version.
  int64_t accepted_version = -1;
  // The newest version the probes judged to gain on the path (-1: none;
  // selected only): where a held leave of a version on trial goes back to.
  int64_t proven_version = -1;
  bool candidate = false;
  bool selected = false;
  std::string reason;  // e.g. "selected: gain 0.31 >= 0.05"
  // The plan pace holds a move of this layer until the decision's
  // next_change_step (the reason says which).
  bool held = false;
  // The audit window: mean audited RelL2 of the gradient applied on each
  // path (NaN without audits of that path) and how many audits of each.
  double audit_gift_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  double audit_euclid_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  int audit_gift_audits = 0;
  int audit_euclid_audits = 0;
  // The Euclidean reference the audit rule compares with: the audited
  // Euclidean mean when the window has Euclidean audits ("audit"), else the
  // probes' Euclidean RelL2 over the step window ("probe"); NaN and "" when
  // neither exists.
  double audit_reference_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  std::string audit_reference;
  // With the "probe" reference: the calibration it was multiplied by (1
  // without one); NaN otherwise.
  double audit_probe_scale = std::numeric_limits<double>::quiet_NaN();
  int64_t audit_removals = 0;  // times the audit rule took it off GIFT
  bool audit_barred = false;   // kept off the GIFT path by the audit rule
  // Over the step window: the probes' mean GIFT round-trip RelL2 with the
  // factors used (NaN without probes), and the β grid's (NaN each without
  // grid probes; beta_probes counts them).
  double probe_gift_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  int64_t beta_probes = 0;
  // Probe steps in the window that tried the β grid, each counted once
  // however many ranks, nodes and polls reported it
  // (SampleWindow::BetaProbeSteps).
  int64_t beta_probe_steps = 0;
  std::array<double, kBetaGrid> beta_rel_l2{
      std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::quiet_NaN()};
};

// Probe steps with grid probes (LayerScore::beta_probe_steps) ChooseBeta
// needs in the window before it moves β: one probe step's figures are too
// noisy (the demo model flipped β back and forth on them).
inline constexpr int64_t kMinBetaProbes = 3;

// β auto (DESIGN §2): the damping for a layer's next factor. The grid β
// whose windowed probe RelL2 is lowest when it beats the probes of the
// factors in use (built with `current`) by more than `margin` (relative),
// else `current`: a small, noisy difference never moves β. `current` also
// while the window holds fewer than kMinBetaProbes probe steps with grid
// probes.
double ChooseBeta(const LayerScore& score, double current,
                  double margin = 0.05);
// The index of β in kBetaGridValues (0 when it is not a grid value).
int BetaIndex(double beta);

struct SelectionDecision {
  std::vector<std::string> candidates;  // in layer order
  std::vector<std::string> selected;    // in layer order
  std::vector<std::string> early_refresh;
  bool changed = false;  // candidates or selected differ from the last call
  std::map<std::string, LayerScore> scores;
  int64_t step = 0;  // the selector's clock: steps seen
  // The plan pace: the first step at which held moves may take effect; -1
  // when none is held.
  int64_t next_change_step = -1;
};

class LayerSelector {
 public:
  explicit LayerSelector(SelectorPolicy policy);

  // INVALID_ARGUMENT for a duplicate or empty name or a bad shape.
  absl::Status AddLayer(const SelectorLayer& layer);
  bool HasLayer(const std::string& name) const;
  // INVALID_ARGUMENT (state unchanged) when the policy is invalid. A new
  // window length applies to the samples already held (audit_window too).
  // After a change the next Decide applies every move at once (the plan
  // pace waits for nothing); the same policy again changes nothing.
  absl::Status SetPolicy(const SelectorPolicy& policy);
  const SelectorPolicy& policy() const { return policy_; }

  // NOT_FOUND for an unknown layer. Negative counts: INVALID_ARGUMENT.
  absl::Status Observe(const std::string& layer, const SelectorSample& s);

  // A job resumed from a checkpoint had `selected` on the GIFT path (and
  // holds their factors): keep them selected (candidates, so they get new
  // factors) until their window holds telemetry, then until a gain is
  // measured; from then on the usual rules decide, with `selected` as the
  // hysteresis memory. Pins and the budget still apply. NOT_FOUND (state
  // unchanged) for an unknown layer. `versions` (by layer; a leader rebuilt
  // from a follower's plan): the factor version the path used and the newest
  // one judged to gain, which a resumed layer continues with instead of the
  // newest version; negative means none, and a proven version above the
  // accepted one is ignored.
  struct Versions {
    int64_t accepted = -1;
    int64_t proven = -1;
  };
  absl::Status Resume(const std::vector<std::string>& selected,
                      const std::map<std::string, Versions>& versions = {});

  // settings: by layer name; a missing layer has the defaults.
  SelectionDecision Decide(
      const std::map<std::string, SelectorSettings>& settings);

 private:
  SelectorPolicy policy_;
  std::vector<SelectorLayer> layers_;
  std::map<std::string, std::shared_ptr<internal::LayerState>> state_;
  std::vector<std::string> last_candidates_;
  std::vector<std::string> last_selected_;
  int64_t clock_ = 0;             // steps seen (the most of any layer)
  int64_t first_step_ = -1;       // the first SelectorSample::step seen
  int64_t step_clock_ = -1;       // steps since first_step_
  int64_t last_paced_step_ = -1;  // last paced change after the warm-up
  bool force_ = false;            // SetPolicy / Resume: apply at once
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_SELECTOR_H_
