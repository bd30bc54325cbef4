// The selector's policy and its range check (selector_policy.h), both read
// from the schema (selection_policy_schema.h).
#include "daemon/selector_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gift::daemon {
namespace {

absl::Status Bad(const std::string& field, const std::string& rule,
                 double got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("selection.%s must be %s (got %g)", field, rule, got));
}

// Below the minimum: ">= min" (as giftd's option table says it); above the
// maximum, NaN or infinite: the whole range.
absl::Status CheckField(const PolicyField& f, double v) {
  if (f.Contains(v)) return absl::OkStatus();
  if (v < f.min) {
    return Bad(f.name, ">= " + PolicyNumberText(f.min, f.type), v);
  }
  return Bad(
      f.name,
      absl::StrCat(f.HasMax() ? "in " : "finite and ", PolicyRangeText(f)), v);
}

}  // namespace

const char* SelectionKindName(SelectionKind kind) {
  for (const SelectionKindSpelling& k : kSelectionKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

absl::StatusOr<SelectionKind> ParseSelectionKind(const std::string& name) {
  if (const SelectionKindSpelling* k = FindSelectionKind(name)) return k->kind;
  return absl::InvalidArgumentError(
      absl::StrCat("selection.kind must be one of ",
                   SelectionKindList(", ", " or "), " (got '", name, "')"));
}

const std::array<PolicyMember, kPolicyFields.size()>& PolicyMembers() {
  namespace f = policy_field;
  using P = SelectorPolicy;
  static constexpr std::array<PolicyMember, kPolicyFields.size()> kMembers = {{
      {&f::kTopK, &P::top_k, nullptr},
      {&f::kTopK4bit, &P::top_k_4bit, nullptr},
      {&f::kThreshold, nullptr, &P::threshold},
      {&f::kHysteresis, nullptr, &P::hysteresis},
      {&f::kWindowSteps, &P::window_steps, nullptr},
      {&f::kMaxLayers, &P::max_layers, nullptr},
      {&f::kMaxExtraFlops, nullptr, &P::max_extra_flops},
      {&f::kMinGain, nullptr, &P::min_gain},
      {&f::kEntryGain, nullptr, &P::entry_gain},
      {&f::kEntryProbes, &P::entry_probes, nullptr},
      {&f::kGainHold, nullptr, &P::gain_hold},
      {&f::kWarmupSteps, &P::warmup_steps, nullptr},
      {&f::kPlanIntervalSteps, &P::plan_interval_steps, nullptr},
      {&f::kAuditWindow, &P::audit_window, nullptr},
      {&f::kAuditMargin, nullptr, &P::audit_margin},
  }};
  return kMembers;
}

absl::Status SelectorPolicy::Validate() const {
  if (SelectionKindName(kind) == std::string("unknown")) {
    return Bad("kind", SelectionKindList(", ", " or "), static_cast<int>(kind));
  }
  for (const PolicyMember& m : PolicyMembers()) {
    if (absl::Status s = CheckField(*m.field, m.Get(*this)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gift::daemon
