// The decision stages of the layer selector (selector.h, steps 1–6): pins
// and the vulnerability policy with hysteresis (ApplyCandidates), the
// measured-gain guard, the audit rule, the budget, and the early-refresh
// list. Each stage reads and writes the rows of one Decide; each writes the
// layer's operator-facing `reason`, so the last stage that touched a layer
// explains why it ended where it did. The plan pace (selector_pace.h) runs
// after them. Internal to gift_selector.
//
//   std::vector<internal::Row> rows = ...;  // one per layer, from its state
//   internal::ApplyCandidates(policy, rows);
//   internal::ApplyGainGuard(policy, rows);
//   internal::ApplyAudit(policy, rows);
//   internal::ApplyBudget(policy, rows);
//
// Thread safety: pure functions of their arguments.
#ifndef GIFT_DAEMON_SELECTOR_STAGES_H_
#define GIFT_DAEMON_SELECTOR_STAGES_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "daemon/selector.h"

namespace gift::daemon::internal {

// One layer during Decide: its inputs, a copy of the state the stages read,
// and the score being built. Decide commits the outcome to its LayerState.
struct Row {
  const SelectorLayer* layer = nullptr;
  SelectorSettings settings;
  LayerScore score;
  size_t order = 0;  // position in the layers: the tie-break everywhere
  bool has_telemetry = false;
  bool was_candidate = false;
  bool was_selected = false;
  bool resumed = false;
  bool resumed_from_plan = false;  // else from a checkpoint
  bool settings_changed = false;
  bool gaining = false;  // was selected with a gain >= the stay level
  int64_t factor_version = -1;
  int64_t was_accepted = -1;  // the accepted version at the last Decide
  int64_t accepted = -1;      // the one the guard accepts (while selected)
  // The newest version judged to gain on the path (on trial versions are
  // accepted before their probes judge them; a held leave goes back to it).
  int64_t was_proven = -1;
  int64_t proven = -1;
  double best_gain = std::numeric_limits<double>::quiet_NaN();
  int64_t early_refresh_version = -1;
  std::string policy_reason;  // what the vulnerability policy said
  // The audit rule.
  bool barred = false;
  bool reentry = false;
  bool audit_removed = false;  // convicted in this Decide
  int64_t euclid_audits_needed = 0;
  int64_t euclid_audits_since_removal = 0;
  int64_t barred_version = -1;
  std::string audit_why;  // the conviction behind the bar
};

// A figure in a reason: three significant digits.
std::string Num(double v);

// Euclidean audits a layer waits for after its `removals`-th audit removal:
// audit_window · 2^(removals − 1) (0 before the first).
int64_t EuclidAuditsNeeded(const SelectorPolicy& policy, int64_t removals);

// 1–2. Pins, then the policy over the unpinned layers that have data.
void ApplyCandidates(const SelectorPolicy& policy, std::vector<Row>& rows);
// 3. The measured-gain guard on the unpinned candidates.
void ApplyGainGuard(const SelectorPolicy& policy, std::vector<Row>& rows);
// 4. The audit rule on the layers the guard put on the GIFT path.
void ApplyAudit(const SelectorPolicy& policy, std::vector<Row>& rows);
// 5. The budget, pinned layers first, then by vulnerability.
void ApplyBudget(const SelectorPolicy& policy, std::vector<Row>& rows);
// The gain an early refresh judges: the lower of the version's summed gain
// and its newest probe observation's.
double RefreshGain(const LayerScore& s);
// 6. The layers due an early refresh (listed by the plan pace).
std::vector<Row*> EarlyRefresh(const SelectorPolicy& policy,
                               std::vector<Row>& rows);

// What keeps an audit-barred layer off the GIFT path, for its reason.
std::string BarReason(const Row& r);

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_SELECTOR_STAGES_H_
