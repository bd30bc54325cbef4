// The one schema of the layer selection policy: every field's name, type,
// default, range and help text, and the kinds' spellings. SelectorPolicy
// (selector_policy.h) takes its defaults and Validate its ranges from it,
// giftd's option table (config_options.cc) its keys, help and lower bounds,
// giftctl's `policy` command (tools/giftctl/cli.cc) its ranges and kind
// names, and selection_policy_schema_test checks the README's option table
// against it, so that none of them can drift. A plain header with no
// dependencies beyond the standard library: giftctl reads it without the
// selector.
//
//   for (const PolicyField& f : kPolicyFields) {
//     if (!f.Contains(value)) ... "must be " + PolicyRangeText(f)
//   }
//
// Thread safety: constants and pure functions.
#ifndef GIFT_DAEMON_SELECTION_POLICY_SCHEMA_H_
#define GIFT_DAEMON_SELECTION_POLICY_SCHEMA_H_

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

namespace gift::daemon {

enum class SelectionKind { kTopK, kElbow, kThreshold };

struct SelectionKindSpelling {
  SelectionKind kind;
  const char* name;  // YAML value, giftctl --kind, giftctl's output
};

// Every kind, in the order giftd's help lists them.
inline constexpr std::array<SelectionKindSpelling, 3> kSelectionKinds = {{
    {SelectionKind::kTopK, "top-k"},
    {SelectionKind::kElbow, "elbow"},
    {SelectionKind::kThreshold, "threshold"},
}};
inline constexpr SelectionKind kDefaultSelectionKind = SelectionKind::kTopK;
inline constexpr const char* kSelectionKindDoc =
    "Layer selection policy on the vulnerability score";

// The kinds' names joined: ("|", "|") gives "top-k|elbow|threshold",
// (", ", " or ") gives "top-k, elbow or threshold".
inline std::string SelectionKindList(std::string_view sep,
                                     std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < kSelectionKinds.size(); ++i) {
    if (i > 0) out += i + 1 == kSelectionKinds.size() ? last_sep : sep;
    out += kSelectionKinds[i].name;
  }
  return out;
}

// The kind spelt `name`; nullptr when there is none.
inline const SelectionKindSpelling* FindSelectionKind(std::string_view name) {
  for (const SelectionKindSpelling& k : kSelectionKinds) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// Largest top_k, window_steps and max_layers (a window keeps one sample
// per poll and layer, so its length is bounded too).
inline constexpr int kMaxSelectionCount = 1000000;

// One numeric field of the policy. Values lie in [min, max] ([min, max)
// when max_open); with max = kNoMax, in [min, ∞) and finite.
struct PolicyField {
  enum class Type { kInt, kDouble };
  static constexpr double kNoMax = std::numeric_limits<double>::infinity();

  const char* name;  // SelectorPolicy member; YAML key under `selection:`
  const char* flag;  // giftctl's `policy` option, without "--"
  Type type;
  double default_value;
  double min;
  double max;
  bool max_open;
  const char* doc;  // help text; the range follows it (PolicyHelp)

  constexpr bool HasMax() const { return max != kNoMax; }
  // False for NaN and, without a max, for infinity too.
  bool Contains(double v) const {
    if (!(v >= min)) return false;
    if (!HasMax()) return std::isfinite(v);
    return max_open ? v < max : v <= max;
  }
};

// The default of `f` as its member's type.
template <typename T>
constexpr T PolicyDefault(const PolicyField& f) {
  return static_cast<T>(f.default_value);
}

namespace policy_field {
using Type = PolicyField::Type;
inline constexpr double kCount = kMaxSelectionCount;
inline constexpr double kNoMax = PolicyField::kNoMax;

inline constexpr PolicyField kTopK = {
    "top_k", "top-k", Type::kInt, 8,
    1,       kCount,  false,      "top-k: number of candidate layers"};
inline constexpr PolicyField kTopK4bit = {
    "top_k_4bit",
    "top-k-4bit",
    Type::kInt,
    0,
    0,
    kCount,
    false,
    "top-k: number of candidate layers among those on a 4-bit format "
    "(nvfp4, mxfp4), ranked apart from the FP8 ones (0 = every 4-bit layer "
    "with boundary hits: at 4 bits most layers gain, and entry_gain decides "
    "which go on the GIFT path)"};
inline constexpr PolicyField kThreshold = {
    "threshold",
    "threshold",
    Type::kDouble,
    0.01,
    0,
    1,
    false,
    "threshold: minimum vulnerability score"};
inline constexpr PolicyField kHysteresis = {
    "hysteresis",
    "hysteresis",
    Type::kDouble,
    0.1,
    0,
    1,
    true,
    "Relative score margin to enter/leave"};
inline constexpr PolicyField kWindowSteps = {
    "window_steps",          "window", Type::kInt, 50, 1, kCount, false,
    "Score window, in steps"};
inline constexpr PolicyField kMaxLayers = {
    "max_layers",
    "max-layers",
    Type::kInt,
    0,
    0,
    kCount,
    false,
    "Budget: most selected layers (0 = unlimited)"};
inline constexpr PolicyField kMaxExtraFlops = {
    "max_extra_flops",
    "max-flops",
    Type::kDouble,
    0,
    0,
    kNoMax,
    false,
    "Budget: extra whitening flops per step (0 = unlimited)"};
inline constexpr PolicyField kMinGain = {
    "min_gain", "min-gain", Type::kDouble, 0.05,
    0,          1,          true,          "Measured-gain guard"};
inline constexpr PolicyField kEntryGain = {
    "entry_gain",
    "entry-gain",
    Type::kDouble,
    0.15,
    0,
    1,
    true,
    "A layer enters the GIFT path only when each probe step of its factor "
    "gains this much (at least min_gain): a probe reads more gain than the "
    "path with error feedback delivers"};
inline constexpr PolicyField kEntryProbes = {
    "entry_probes",
    "entry-probes",
    Type::kInt,
    2,
    2,
    100,
    false,
    "Probe steps of its factor a layer needs before it enters the GIFT path, "
    "each gaining entry_gain (window_steps must span them; a layer on the "
    "path judges a new factor on 2)"};
inline constexpr PolicyField kGainHold = {
    "gain_hold",
    "gain-hold",
    Type::kDouble,
    2,
    1,
    1000,
    false,
    "A GIFT layer that gains keeps its candidate place this many times as "
    "firmly (1 = plain hysteresis; top-k: a newcomer must beat it by this "
    "factor times 1 + hysteresis)"};
inline constexpr PolicyField kWarmupSteps = {
    "warmup_steps",
    "warmup",
    Type::kInt,
    100,
    0,
    kCount,
    false,
    "Steps before the plan pace applies (the plan settles)"};
inline constexpr PolicyField kPlanIntervalSteps = {
    "plan_interval_steps",
    "plan-interval",
    Type::kInt,
    200,
    0,
    kCount,
    false,
    "After the warm-up, the selector's own plan changes come at most once "
    "per this many steps (0 = at once)"};
inline constexpr PolicyField kAuditWindow = {
    "audit_window",
    "audit-window",
    Type::kInt,
    3,
    1,
    1000,
    false,
    "Audits per layer the audit rule averages"};
inline constexpr PolicyField kAuditMargin = {
    "audit_margin",
    "audit-margin",
    Type::kDouble,
    0.1,
    0,
    10,
    false,
    "A layer leaves the GIFT path when its audited RelL2 exceeds the "
    "Euclidean reference by this relative margin"};
}  // namespace policy_field

// Every numeric field, in the order of giftd's help and the README.
inline constexpr std::array<PolicyField, 15> kPolicyFields = {
    policy_field::kTopK,
    policy_field::kTopK4bit,
    policy_field::kThreshold,
    policy_field::kHysteresis,
    policy_field::kWindowSteps,
    policy_field::kMaxLayers,
    policy_field::kMaxExtraFlops,
    policy_field::kMinGain,
    policy_field::kEntryGain,
    policy_field::kEntryProbes,
    policy_field::kGainHold,
    policy_field::kWarmupSteps,
    policy_field::kPlanIntervalSteps,
    policy_field::kAuditWindow,
    policy_field::kAuditMargin,
};

// A bound as the texts print it: integers as integers (1000000, not 1e+06),
// other numbers as %g.
inline std::string PolicyNumberText(double v, PolicyField::Type type) {
  char buf[32];
  if (type == PolicyField::Type::kInt) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

// "[1, 1000000]", "[0, 1)", ">= 0" (no max).
inline std::string PolicyRangeText(const PolicyField& f) {
  const std::string lo = PolicyNumberText(f.min, f.type);
  if (!f.HasMax()) return ">= " + lo;
  return "[" + lo + ", " + PolicyNumberText(f.max, f.type) +
         (f.max_open ? ")" : "]");
}

// The help text: the doc and the range ("Measured-gain guard, [0, 1)").
inline std::string PolicyHelp(const PolicyField& f) {
  return std::string(f.doc) + ", " + PolicyRangeText(f);
}

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_SELECTION_POLICY_SCHEMA_H_
