// Layer selection (selector.h). The decision is built in stages that mirror
// the header: scores from the windows, pins, the vulnerability policy with
// hysteresis, the gain guard, the audit rule, the budget, the plan pace and
// early refresh. Each stage writes the layer's operator-facing `reason`, so
// the last stage that touched a layer explains why it ended where it did.
#include "daemon/selector.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gift::daemon {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

absl::Status Bad(const std::string& field, const std::string& rule,
                 double got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("selection.%s must be %s (got %g)", field, rule, got));
}

std::string Num(double v) { return absl::StrFormat("%.3g", v); }

double Mean(const std::deque<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? kNaN : sum / static_cast<double>(v.size());
}

}  // namespace

const char* SelectionKindName(SelectionKind kind) {
  switch (kind) {
    case SelectionKind::kTopK:
      return "top-k";
    case SelectionKind::kElbow:
      return "elbow";
    case SelectionKind::kThreshold:
      return "threshold";
  }
  return "unknown";
}

absl::StatusOr<SelectionKind> ParseSelectionKind(const std::string& name) {
  for (SelectionKind k : {SelectionKind::kTopK, SelectionKind::kElbow,
                          SelectionKind::kThreshold}) {
    if (name == SelectionKindName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "selection.kind must be one of top-k, elbow, threshold (got '", name,
      "')"));
}

absl::Status SelectorPolicy::Validate() const {
  if (kind != SelectionKind::kTopK && kind != SelectionKind::kElbow &&
      kind != SelectionKind::kThreshold) {
    return Bad("kind", "top-k, elbow or threshold", static_cast<int>(kind));
  }
  if (top_k < 1) return Bad("top_k", ">= 1", top_k);
  if (top_k > kMaxSelectionCount) return Bad("top_k", "<= 1000000", top_k);
  if (!(threshold >= 0 && threshold <= 1)) {
    return Bad("threshold", "in [0, 1]", threshold);
  }
  if (!(hysteresis >= 0 && hysteresis < 1)) {
    return Bad("hysteresis", "in [0, 1)", hysteresis);
  }
  if (window_steps < 1) return Bad("window_steps", ">= 1", window_steps);
  if (window_steps > kMaxSelectionCount) {
    return Bad("window_steps", "<= 1000000", window_steps);
  }
  if (max_layers < 0) return Bad("max_layers", ">= 0", max_layers);
  if (max_layers > kMaxSelectionCount) {
    return Bad("max_layers", "<= 1000000", max_layers);
  }
  if (!(max_extra_flops >= 0) || std::isinf(max_extra_flops)) {
    return Bad("max_extra_flops", "finite and >= 0", max_extra_flops);
  }
  if (!(min_gain >= 0 && min_gain < 1)) {
    return Bad("min_gain", "in [0, 1)", min_gain);
  }
  if (!(gain_hold >= 1 && gain_hold <= 1000)) {
    return Bad("gain_hold", "in [1, 1000]", gain_hold);
  }
  if (warmup_steps < 0 || warmup_steps > kMaxSelectionCount) {
    return Bad("warmup_steps", "in [0, 1000000]", warmup_steps);
  }
  if (plan_interval_steps < 0 || plan_interval_steps > kMaxSelectionCount) {
    return Bad("plan_interval_steps", "in [0, 1000000]", plan_interval_steps);
  }
  if (audit_window < 1 || audit_window > 1000) {
    return Bad("audit_window", "in [1, 1000]", audit_window);
  }
  if (!(audit_margin >= 0 && audit_margin <= 10)) {
    return Bad("audit_margin", "in [0, 10]", audit_margin);
  }
  return absl::OkStatus();
}

// The samples covering the last `window_steps` steps, with running sums.
// Samples are whole observations (about 100 ms each), so the window may hold
// a few steps more than asked: the oldest sample is dropped only while the
// rest still covers the window.
struct LayerSelector::Window {
  std::deque<SelectorSample> samples;
  SelectorSample sum;  // Σ over `samples` (factor_version unused)

  void Add(const SelectorSample& s, int window_steps) {
    samples.push_back(s);
    Accumulate(s, +1);
    Trim(window_steps);
  }
  void Trim(int window_steps) {
    while (samples.size() > 1 &&
           sum.steps - samples.front().steps >= window_steps) {
      Accumulate(samples.front(), -1);
      samples.pop_front();
    }
  }
  void Accumulate(const SelectorSample& s, int sign) {
    sum.steps += sign * s.steps;
    sum.n += sign * s.n;
    sum.upper += sign * s.upper;
    sum.lower += sign * s.lower;
    sum.probes += sign * s.probes;
    sum.probe_euclid_sum += sign * s.probe_euclid_sum;
    sum.probe_gift_sum += sign * s.probe_gift_sum;
    sum.beta_probes += sign * s.beta_probes;
    for (int b = 0; b < kBetaGrid; ++b) {
      sum.probe_beta_sum[b] += sign * s.probe_beta_sum[b];
    }
  }
  double Vulnerability() const {
    return sum.n > 0 ? static_cast<double>(sum.upper + sum.lower) / sum.n : 0;
  }
  double Gain() const {
    if (sum.probes <= 0 || !(sum.probe_euclid_sum > 0)) return kNaN;
    return 1.0 - sum.probe_gift_sum / sum.probe_euclid_sum;
  }
  // Mean Euclidean round-trip RelL2 of the probes (NaN without probes).
  double ProbeEuclid() const {
    return sum.probes > 0 ? sum.probe_euclid_sum / sum.probes : kNaN;
  }
  // The same of the GIFT path, and of each β of the grid.
  double ProbeGift() const {
    return sum.probes > 0 ? sum.probe_gift_sum / sum.probes : kNaN;
  }
  int64_t BetaProbeSamples() const {
    int64_t n = 0;
    for (const SelectorSample& s : samples) n += s.beta_probes > 0;
    return n;
  }
  double ProbeBeta(int b) const {
    return sum.beta_probes > 0 ? sum.probe_beta_sum[b] / sum.beta_probes : kNaN;
  }
};

// The last `audit_window` audits of a layer, oldest first. Reports of one
// audit step (its ranks may be polled on either side of a step) merge into
// one entry.
struct LayerSelector::Audits {
  struct Entry {
    bool gift = false;
    int64_t count = 0;  // summed over the ranks
    double sum = 0;
    int64_t step = 0;         // the layer's steps seen at the first report
    double local = kNaN;      // local Euclidean round-trip RelL2 beside it
    bool calibrated = false;  // its ratio is in State::calibration
  };
  std::deque<Entry> entries;

  // The entry `e` went into: a new one, or the newest of its path when that
  // began within kAuditMergeSteps steps.
  Entry& Add(const Entry& e, int window, bool* fresh) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->gift != e.gift) continue;
      if (e.step - it->step <= kAuditMergeSteps) {
        it->count += e.count;
        it->sum += e.sum;
        if (std::isnan(it->local)) it->local = e.local;
        *fresh = false;
        return *it;
      }
      break;
    }
    entries.push_back(e);
    *fresh = true;
    Trim(window);
    return entries.back();
  }
  void Trim(int window) {
    while (entries.size() > static_cast<size_t>(window)) entries.pop_front();
  }
  // Mean RelL2 of the path's audits (NaN without one) and their number.
  double Mean(bool gift, int* n) const {
    int64_t count = 0;
    double sum = 0;
    *n = 0;
    for (const Entry& e : entries) {
      if (e.gift != gift) continue;
      ++*n;
      count += e.count;
      sum += e.sum;
    }
    return count > 0 ? sum / count : kNaN;
  }
};

struct LayerSelector::State {
  Window window;
  Audits audits;
  // Audited / local round-trip Euclidean RelL2 of its last audit_window
  // Euclidean audits that had a local figure.
  std::deque<double> calibration;
  int64_t steps_seen = 0;
  int64_t factor_version = -1;
  double best_gain = kNaN;             // since factor_version was published
  int64_t early_refresh_version = -1;  // version already listed
  bool candidate = false;              // at the last Decide (hysteresis memory)
  bool selected = false;
  bool resumed = false;       // Resume() until a gain is measured
  SelectorSettings settings;  // at the last Decide
  // The audit rule.
  int64_t audit_removals = 0;
  bool barred = false;          // off the GIFT path until the bar lifts
  int64_t barred_version = -1;  // factor version at the removal
  int64_t euclid_audits_since_removal = 0;
  bool reentry = false;   // bar lifted, not selected since: enter higher
  std::string audit_why;  // the conviction of the last removal
};

LayerSelector::LayerSelector(SelectorPolicy policy)
    : policy_(std::move(policy)) {}

absl::Status LayerSelector::AddLayer(const SelectorLayer& layer) {
  if (layer.name.empty()) {
    return absl::InvalidArgumentError("selector: empty layer name");
  }
  if (layer.d_out < 1 || layer.d_in < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer.name, " has shape ", layer.d_out,
                     " x ", layer.d_in, "; both must be >= 1"));
  }
  if (HasLayer(layer.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: duplicate layer ", layer.name));
  }
  layers_.push_back(layer);
  state_[layer.name] = std::make_shared<State>();
  return absl::OkStatus();
}

bool LayerSelector::HasLayer(const std::string& name) const {
  return state_.count(name) > 0;
}

absl::Status LayerSelector::SetPolicy(const SelectorPolicy& policy) {
  if (absl::Status s = policy.Validate(); !s.ok()) return s;
  if (policy == policy_) return absl::OkStatus();  // e.g. giftctl policy
  policy_ = policy;
  for (auto& [name, st] : state_) {
    st->window.Trim(policy_.window_steps);
    st->audits.Trim(policy_.audit_window);
    while (st->calibration.size() > static_cast<size_t>(policy_.audit_window)) {
      st->calibration.pop_front();
    }
  }
  force_ = true;
  return absl::OkStatus();
}

absl::Status LayerSelector::Observe(const std::string& layer,
                                    const SelectorSample& s) {
  auto it = state_.find(layer);
  if (it == state_.end()) {
    return absl::NotFoundError(absl::StrCat("selector: unknown layer ", layer));
  }
  if (s.steps < 0 || s.n < 0 || s.upper < 0 || s.lower < 0 || s.probes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: negative count for layer ", layer, " (steps ",
                     s.steps, ", n ", s.n, ", upper ", s.upper, ", lower ",
                     s.lower, ", probes ", s.probes, ")"));
  }
  if (s.step < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selector: layer ", layer, " reports step ", s.step, " (-1: unknown)"));
  }
  if (s.upper + s.lower > s.n) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports ", s.upper + s.lower,
                     " boundary hits in ", s.n, " elements"));
  }
  if (!(s.probe_euclid_sum >= 0) || !(s.probe_gift_sum >= 0) ||
      std::isinf(s.probe_euclid_sum) || std::isinf(s.probe_gift_sum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selector: probe sums of layer ", layer, " must be finite and >= 0"));
  }
  if (s.beta_probes < 0 || s.beta_probes > s.probes) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports ", s.beta_probes,
                     " beta-grid probes in ", s.probes, " probes"));
  }
  for (double sum : s.probe_beta_sum) {
    if (!(sum >= 0) || std::isinf(sum) || (s.beta_probes == 0 && sum != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("selector: beta-grid probe sums of layer ", layer,
                       " must be finite, >= 0 and 0 without grid probes"));
    }
  }
  for (const auto& [count, sum] :
       {std::pair{s.audits_gift, s.audit_gift_rel_l2_sum},
        std::pair{s.audits_euclid, s.audit_euclid_rel_l2_sum}}) {
    if (count < 0 || !(sum >= 0) || std::isinf(sum) ||
        (count == 0 && sum != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "selector: audits of layer ", layer,
          " must have a count >= 0 and a finite sum >= 0, 0 without audits "
          "(got ",
          count, " audits, sum ", sum, ")"));
    }
  }
  if (!(s.round_trip_err_sq >= 0) || !(s.round_trip_x_sq >= 0) ||
      std::isinf(s.round_trip_err_sq) || std::isinf(s.round_trip_x_sq)) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: round-trip sums of layer ", layer,
                     " must be finite and >= 0"));
  }
  State& st = *it->second;
  if (s.factor_version > st.factor_version) {
    st.factor_version = s.factor_version;
    st.best_gain = kNaN;  // best is tracked per factor version
  }
  st.window.Add(s, policy_.window_steps);
  const double gain = st.window.Gain();
  if (!std::isnan(gain) && !(gain <= st.best_gain)) st.best_gain = gain;
  if (__builtin_add_overflow(st.steps_seen, s.steps, &st.steps_seen)) {
    st.steps_seen = std::numeric_limits<int64_t>::max();
  }
  clock_ = std::max(clock_, st.steps_seen);
  if (s.step >= 0) {
    if (first_step_ < 0) first_step_ = s.step;
    step_clock_ = std::max(step_clock_, s.step - first_step_);
  }
  const int w = policy_.audit_window;
  if (s.audits_euclid > 0) {
    // The local Euclidean figure beside the audit: the path's own round
    // trip in this sample, else the probes' over the window.
    const double local =
        s.round_trip_x_sq > 0
            ? std::sqrt(s.round_trip_err_sq / s.round_trip_x_sq)
            : st.window.ProbeEuclid();
    bool fresh = false;
    Audits::Entry& e =
        st.audits.Add({false, s.audits_euclid, s.audit_euclid_rel_l2_sum,
                       st.steps_seen, local > 0 ? local : kNaN},
                      w, &fresh);
    if (fresh && st.barred) ++st.euclid_audits_since_removal;
    if (e.local > 0) {
      const double ratio = e.sum / e.count / e.local;
      if (e.calibrated) {
        st.calibration.back() = ratio;
      } else {
        e.calibrated = true;
        st.calibration.push_back(ratio);
        while (st.calibration.size() > static_cast<size_t>(w)) {
          st.calibration.pop_front();
        }
      }
    }
  }
  if (s.audits_gift > 0) {
    bool fresh = false;
    st.audits.Add({true, s.audits_gift, s.audit_gift_rel_l2_sum, st.steps_seen},
                  w, &fresh);
  }
  return absl::OkStatus();
}

namespace {

// One layer during Decide: its inputs, a copy of the state the stages read,
// and the score being built. Decide commits the outcome to State.
struct Row {
  const SelectorLayer* layer = nullptr;
  SelectorSettings settings;
  LayerScore score;
  size_t order = 0;  // position in layers_: the tie-break everywhere
  bool has_telemetry = false;
  bool was_candidate = false;
  bool was_selected = false;
  bool resumed = false;
  bool settings_changed = false;
  bool gaining = false;  // was selected with a gain >= the stay level
  int64_t factor_version = -1;
  double best_gain = kNaN;
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

// Extra whitening flops per step of one selected layer.
double ExtraFlops(const SelectorLayer& l, const SelectorSettings& s) {
  const double d_out = static_cast<double>(l.d_out);
  const double d_in = static_cast<double>(l.d_in);
  return s.full ? 2.0 * d_out * d_in * d_in : 4.0 * d_out * d_in * s.rank;
}

// Strongest first; layer order breaks ties so decisions are deterministic.
bool Stronger(const Row* a, const Row* b) {
  if (a->score.vulnerability != b->score.vulnerability) {
    return a->score.vulnerability > b->score.vulnerability;
  }
  return a->order < b->order;
}

// The score a top-k newcomer must exceed to displace member `r`.
double Hold(const Row* r, const SelectorPolicy& p) {
  return r->score.vulnerability * (1 + p.hysteresis) *
         (r->gaining ? p.gain_hold : 1);
}

// The member a newcomer would displace first: the lowest hold.
Row* Weakest(const std::vector<Row*>& members, const SelectorPolicy& p) {
  Row* w = nullptr;
  for (Row* r : members) {
    if (w == nullptr || Hold(r, p) < Hold(w, p) ||
        (Hold(r, p) == Hold(w, p) && r->order > w->order)) {
      w = r;
    }
  }
  return w;
}

// top-k with hysteresis: members keep their place unless a newcomer beats
// the weakest one's hold (its score times (1 + h), times gain_hold for a
// gaining one); free places fill without a margin.
void ApplyTopK(std::vector<Row*> eligible, const SelectorPolicy& p) {
  const int k = p.top_k;
  std::vector<Row*> members, others;
  for (Row* r : eligible) (r->was_candidate ? members : others).push_back(r);
  auto by_hold = [&p](const Row* a, const Row* b) {
    if (Hold(a, p) != Hold(b, p)) return Hold(a, p) > Hold(b, p);
    return a->order < b->order;
  };
  std::sort(members.begin(), members.end(), by_hold);
  while (members.size() > static_cast<size_t>(k)) {
    others.push_back(members.back());  // k shrank: the weakest leave
    members.pop_back();
  }
  std::sort(others.begin(), others.end(), Stronger);
  while (members.size() < static_cast<size_t>(k) && !others.empty()) {
    members.push_back(others.front());
    others.erase(others.begin());
  }
  // Each swap raises the lowest hold among the members: it ends.
  while (!others.empty()) {
    Row* weakest = Weakest(members, p);
    if (!(others.front()->score.vulnerability > Hold(weakest, p))) break;
    std::replace(members.begin(), members.end(), weakest, others.front());
    others.front() = weakest;
    std::sort(others.begin(), others.end(), Stronger);
  }
  const std::string top = absl::StrCat("top-", k);
  const double enter = Hold(Weakest(members, p), p);
  for (Row* r : members) {
    r->score.candidate = true;
    r->score.reason = absl::StrCat("candidate: vulnerability ",
                                   Num(r->score.vulnerability), " in ", top);
    if (r->gaining && p.gain_hold > 1) {
      absl::StrAppend(&r->score.reason, " (gaining: kept until a newcomer ",
                      "exceeds ", Num(Hold(r, p)), ")");
    }
  }
  for (Row* r : others) {
    r->score.reason = absl::StrCat("not a candidate: vulnerability ",
                                   Num(r->score.vulnerability), " not in ", top,
                                   " (must exceed ", Num(enter), " to enter)");
  }
}

// Hysteresis as a per-layer effective score: a member counts as
// v / (1 − h), a newcomer as v / (1 + h), and a layer is in when its
// effective score reaches the cut. So a member stays while v >= cut·(1 − h)
// and a newcomer enters at v >= cut·(1 + h). `hold`: a gaining member
// counts gain_hold times more (it stays down to cut·(1 − h) / gain_hold).
double Effective(const Row* r, double h, double hold = 1) {
  return r->score.vulnerability / (r->was_candidate ? 1 - h : 1 + h) *
         (r->gaining ? hold : 1);
}

// Elbow and threshold membership against `cut` (0: every layer is in).
void ApplyCut(const std::vector<Row*>& eligible, double cut,
              const SelectorPolicy& p, const std::string& what) {
  const double h = p.hysteresis;
  for (Row* r : eligible) {
    const double v = r->score.vulnerability;
    r->score.candidate = Effective(r, h, p.gain_hold) >= cut;
    if (cut <= 0) {
      r->score.reason = absl::StrCat("candidate: vulnerability ", Num(v),
                                     " (no ", what, " among the layers)");
    } else if (r->score.candidate) {
      r->score.reason = absl::StrCat(
          "candidate: vulnerability ", Num(v), v >= cut ? " above " : " near ",
          what, " ", Num(cut), v < cut * (1 + h) ? " (hysteresis)" : "");
      if (Effective(r, h) < cut) {
        absl::StrAppend(&r->score.reason, " (gaining: stays down to ",
                        Num(cut * (1 - h) / p.gain_hold), ")");
      }
    } else {
      r->score.reason = absl::StrCat("not a candidate: vulnerability ", Num(v),
                                     " below ", what, " ", Num(cut),
                                     " (enter at ", Num(cut * (1 + h)), ")");
    }
  }
}

// The elbow's cut on the effective scores (so that hysteresis also moves
// the elbow itself, not only the membership test): before the largest
// ratio drop between consecutive non-zero scores, at the geometric middle
// of that gap. 0 when there is no drop at all (all equal, or one layer).
double ElbowCut(const std::vector<Row*>& eligible, double h) {
  std::vector<double> e;
  for (const Row* r : eligible) e.push_back(Effective(r, h));
  std::sort(e.begin(), e.end(), std::greater<double>());
  double best_ratio = 1;
  double cut = 0;
  for (size_t i = 0; i + 1 < e.size(); ++i) {
    if (e[i] / e[i + 1] > best_ratio) {
      best_ratio = e[i] / e[i + 1];
      cut = std::sqrt(e[i] * e[i + 1]);
    }
  }
  return cut;
}

// Pins, then the policy over the unpinned layers that have data.
void ApplyCandidates(const SelectorPolicy& policy, std::vector<Row>& rows) {
  std::vector<Row*> eligible;
  for (Row& r : rows) {
    if (r.settings.pin == PinState::kOut) {
      r.score.reason = "pinned out";
    } else if (r.settings.pin == PinState::kIn) {
      r.score.candidate = r.score.selected = true;
      r.score.reason = "selected: pinned in";
    } else if (r.resumed && !r.has_telemetry) {
      r.score.candidate = r.score.selected = true;
      r.score.reason = "selected: resumed from a checkpoint, no telemetry yet";
    } else if (!(r.score.vulnerability > 0)) {
      r.score.reason = r.has_telemetry
                           ? "not a candidate: no boundary hits in the window"
                           : "not a candidate: no telemetry yet";
    } else {
      eligible.push_back(&r);
    }
  }
  if (!eligible.empty()) {
    switch (policy.kind) {
      case SelectionKind::kTopK:
        ApplyTopK(eligible, policy);
        break;
      case SelectionKind::kElbow:
        ApplyCut(eligible, ElbowCut(eligible, policy.hysteresis), policy,
                 "elbow cut");
        break;
      case SelectionKind::kThreshold:
        ApplyCut(eligible, policy.threshold, policy, "threshold");
        break;
    }
  }
  for (Row& r : rows) r.policy_reason = r.score.reason;
}

// What keeps an audit-barred layer off the GIFT path, for its reason.
std::string BarReason(const Row& r) {
  std::string out = absl::StrCat(
      "barred by the audit (removal ", r.score.audit_removals, ": ",
      r.audit_why, "): back after ", r.euclid_audits_needed,
      " Euclidean audits (", r.euclid_audits_since_removal, " so far)");
  if (r.factor_version <= r.barred_version) {
    absl::StrAppend(&out, " and a factor newer than v", r.barred_version);
  }
  return out;
}

// The measured-gain guard on the unpinned candidates.
void ApplyGainGuard(const SelectorPolicy& policy, std::vector<Row>& rows) {
  const double stay = policy.min_gain * (1 - policy.hysteresis);
  for (Row& r : rows) {
    if (!r.score.candidate || r.settings.pin == PinState::kIn) continue;
    if (r.resumed && !r.has_telemetry) continue;  // ApplyCandidates said why
    const double entry =
        policy.min_gain * (r.reentry ? 1 + policy.hysteresis : 1);
    const double g = r.score.gain;
    std::string verdict;
    if (r.barred) {
      verdict = absl::StrCat("candidate, not selected: ", BarReason(r));
    } else if (std::isnan(g) && r.resumed) {
      r.score.selected = true;
      verdict = "selected: resumed from a checkpoint, no gain measured yet";
    } else if (std::isnan(g)) {
      verdict = "candidate, not selected: no gain measured yet";
    } else if (g >= entry) {
      r.score.selected = true;
      verdict = absl::StrCat("selected: gain ", Num(g), " >= ", Num(entry),
                             r.reentry ? " (back after an audit removal)" : "");
    } else if (r.was_selected && g >= stay) {
      r.score.selected = true;
      verdict = absl::StrCat("selected: gain ", Num(g), " >= ", Num(stay),
                             " (hysteresis)");
    } else {
      verdict = absl::StrCat("candidate, not selected: gain ", Num(g), " < ",
                             Num(r.was_selected ? stay : entry));
    }
    // Keep the policy's part: it says why the layer is a candidate.
    r.score.reason = absl::StrCat(verdict, "; ", r.policy_reason);
  }
}

// "applied RelL2 0.081 > Euclidean 0.035 (audited) · 1.05 over 3 audits"
// when the audit window convicts the layer's GIFT path; empty otherwise.
std::string AuditConviction(const SelectorPolicy& policy, const Row& r) {
  const LayerScore& s = r.score;
  const int needed = std::min(2, policy.audit_window);
  if (s.audit_gift_audits < needed) return "";
  const double ref = s.audit_reference_rel_l2;
  if (!(ref > 0) || !(s.audit_gift_rel_l2 > ref * (1 + policy.audit_margin))) {
    return "";
  }
  std::string source = "audited";
  if (s.audit_reference == "probe") {
    source = s.audit_probe_scale == 1
                 ? "probe"
                 : absl::StrCat("probe ", Num(ref / s.audit_probe_scale),
                                " × calibration ", Num(s.audit_probe_scale));
  }
  return absl::StrCat("applied RelL2 ", Num(s.audit_gift_rel_l2),
                      " > Euclidean ", Num(ref), " (", source, ") · ",
                      Num(1 + policy.audit_margin), " over ",
                      s.audit_gift_audits, " audits");
}

// The audit rule on the layers the guard put on the GIFT path.
void ApplyAudit(const SelectorPolicy& policy, std::vector<Row>& rows) {
  for (Row& r : rows) {
    if (!r.score.selected) continue;
    const std::string why = AuditConviction(policy, r);
    if (why.empty()) continue;
    if (r.settings.pin == PinState::kIn) {
      absl::StrAppend(&r.score.reason, "; the audit objects: ", why);
      continue;
    }
    r.score.selected = false;
    r.audit_removed = true;
    r.barred = true;
    ++r.score.audit_removals;
    r.barred_version = r.factor_version;
    r.euclid_audits_since_removal = 0;
    r.reentry = false;
    r.euclid_audits_needed = int64_t{policy.audit_window} << std::min<int64_t>(
                                 r.score.audit_removals - 1, 20);
    r.score.audit_barred = true;
    r.audit_why = why;
    r.score.reason = absl::StrCat(
        "candidate, not selected: audit: ", why, " (removal ",
        r.score.audit_removals, "; back after ", r.euclid_audits_needed,
        " Euclidean audits, a factor newer than v", r.barred_version,
        " and gain >= ", Num(policy.min_gain * (1 + policy.hysteresis)), "); ",
        r.policy_reason);
  }
}

// Why `r` does not fit the budget with `count` layers and `flops` already
// in; empty when it fits.
std::string OverBudget(const SelectorPolicy& policy, int count, double flops,
                       double f) {
  if (policy.max_layers > 0 && count + 1 > policy.max_layers) {
    return absl::StrCat("max_layers ", policy.max_layers);
  }
  if (policy.max_extra_flops > 0 && flops + f > policy.max_extra_flops) {
    return absl::StrCat("max_extra_flops ", Num(policy.max_extra_flops),
                        " (layer needs ", Num(f), ", ", Num(flops), " in use)");
  }
  return "";
}

// The budget, pinned layers first, then by vulnerability. A layer that
// does not fit is skipped and smaller ones behind it may still fit.
void ApplyBudget(const SelectorPolicy& policy, std::vector<Row>& rows) {
  std::vector<Row*> order;
  for (Row& r : rows) {
    if (r.score.selected) order.push_back(&r);
  }
  std::sort(order.begin(), order.end(), [](const Row* a, const Row* b) {
    const bool pa = a->settings.pin == PinState::kIn;
    const bool pb = b->settings.pin == PinState::kIn;
    return pa != pb ? pa : Stronger(a, b);
  });
  int count = 0;
  double flops = 0;
  for (Row* r : order) {
    const double f = ExtraFlops(*r->layer, r->settings);
    const std::string over = OverBudget(policy, count, flops, f);
    if (over.empty()) {
      ++count;
      flops += f;
      continue;
    }
    r->score.selected = false;
    r->score.reason = absl::StrCat(
        r->settings.pin == PinState::kIn ? "pinned in" : "candidate",
        ", not selected: over budget: ", over);
  }
}

// A move of `r` the plan pace may not hold: the operator's (pins and
// settings), the audit's, a resumed layer's first, and leaving the GIFT
// path on a gain below −min_gain (whitening measurably hurts: as much worse
// as the guard asks it to be better; a gain just below 0 is noise).
bool Urgent(const SelectorPolicy& p, const Row& r) {
  if (r.settings.pin != PinState::kAuto || r.settings_changed) return true;
  if (r.audit_removed) return true;
  if (r.resumed && !r.has_telemetry) return true;
  return r.was_selected && !r.score.selected && r.score.gain < -p.min_gain;
}

bool Moved(const Row& r) {
  return r.score.candidate != r.was_candidate ||
         r.score.selected != r.was_selected;
}

// The plan pace keeps a layer where it was; its reason says until when and
// what comes then.
void HoldMove(Row& r, int64_t next) {
  const char* was = r.was_selected    ? "selected"
                    : r.was_candidate ? "candidate, not selected"
                                      : "not a candidate";
  const bool say_bar =
      r.barred && r.was_candidate && !r.was_selected &&
      r.score.reason.find("barred by the audit") == std::string::npos;
  r.score.reason = absl::StrCat(was, " until the next plan change (step ", next,
                                "; plan pace); then ", r.score.reason);
  if (say_bar) absl::StrAppend(&r.score.reason, "; ", BarReason(r));
  r.score.candidate = r.was_candidate;
  r.score.selected = r.was_selected;
  r.score.held = true;
}

// Layers for an early refresh: once per factor version for a layer on (or
// just leaving) the GIFT path whose gain decayed below half its best and
// below the guard's entry level: a fresher factor may win the gain back.
std::vector<Row*> EarlyRefresh(const SelectorPolicy& policy,
                               std::vector<Row>& rows) {
  std::vector<Row*> out;
  for (Row& r : rows) {
    const double g = r.score.gain;
    if (!r.score.candidate || !(r.score.selected || r.was_selected)) continue;
    if (r.factor_version < 0 || std::isnan(g) || std::isnan(r.best_gain)) {
      continue;
    }
    if (g >= 0.5 * r.best_gain || g >= policy.min_gain) continue;
    if (r.early_refresh_version == r.factor_version) continue;
    out.push_back(&r);
  }
  return out;
}

}  // namespace

absl::Status LayerSelector::Resume(const std::vector<std::string>& selected) {
  for (const std::string& name : selected) {
    if (state_.count(name) == 0) {
      return absl::NotFoundError(
          absl::StrCat("selector: resume: unknown layer '", name, "'"));
    }
  }
  for (const std::string& name : selected) {
    State& st = *state_.at(name);
    st.resumed = st.candidate = st.selected = true;
  }
  force_ = true;
  return absl::OkStatus();
}

SelectionDecision LayerSelector::Decide(
    const std::map<std::string, SelectorSettings>& settings) {
  const SelectorPolicy& p = policy_;
  const int64_t clock = step_clock_ >= 0 ? step_clock_ : clock_;
  const double stay = p.min_gain * (1 - p.hysteresis);
  bool settings_changed = false;
  // The probe reference's calibration where a layer has none of its own:
  // the mean over the layers that have one; 1 when none has.
  double calibrated = 0;
  int calibrated_layers = 0;
  for (const auto& [name, st] : state_) {
    if (st->calibration.empty()) continue;
    calibrated += Mean(st->calibration);
    ++calibrated_layers;
  }
  const double job_calibration =
      calibrated_layers > 0 ? calibrated / calibrated_layers : 1.0;
  std::vector<Row> rows(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const State& st = *state_.at(layers_[i].name);
    Row& r = rows[i];
    r.layer = &layers_[i];
    r.order = i;
    r.has_telemetry = st.window.sum.n > 0;
    r.was_candidate = st.candidate;
    r.was_selected = st.selected;
    r.resumed = st.resumed;
    r.factor_version = st.factor_version;
    r.best_gain = st.best_gain;
    r.early_refresh_version = st.early_refresh_version;
    if (auto it = settings.find(layers_[i].name); it != settings.end()) {
      r.settings = it->second;
    }
    r.settings_changed = r.settings.pin != st.settings.pin ||
                         r.settings.full != st.settings.full ||
                         r.settings.rank != st.settings.rank;
    settings_changed = settings_changed || r.settings_changed;
    LayerScore& sc = r.score;
    sc.vulnerability = st.window.Vulnerability();
    sc.gain = st.window.Gain();
    sc.probe_gift_rel_l2 = st.window.ProbeGift();
    sc.beta_probes = st.window.sum.beta_probes;
    sc.beta_probe_samples = st.window.BetaProbeSamples();
    for (int b = 0; b < kBetaGrid; ++b) {
      sc.beta_rel_l2[b] = st.window.ProbeBeta(b);
    }
    r.gaining =
        r.was_selected && r.settings.pin == PinState::kAuto && sc.gain >= stay;
    // The audit window and the Euclidean reference.
    sc.audit_gift_rel_l2 = st.audits.Mean(true, &sc.audit_gift_audits);
    sc.audit_euclid_rel_l2 = st.audits.Mean(false, &sc.audit_euclid_audits);
    if (sc.audit_euclid_audits > 0) {
      sc.audit_reference_rel_l2 = sc.audit_euclid_rel_l2;
      sc.audit_reference = "audit";
    } else if (!std::isnan(st.window.ProbeEuclid())) {
      sc.audit_probe_scale =
          st.calibration.empty() ? job_calibration : Mean(st.calibration);
      sc.audit_reference_rel_l2 =
          st.window.ProbeEuclid() * sc.audit_probe_scale;
      sc.audit_reference = "probe";
    }
    r.audit_why = st.audit_why;
    sc.audit_removals = st.audit_removals;
    r.barred_version = st.barred_version;
    r.euclid_audits_since_removal = st.euclid_audits_since_removal;
    r.euclid_audits_needed = st.audit_removals > 0
                                 ? int64_t{p.audit_window} << std::min<int64_t>(
                                       st.audit_removals - 1, 20)
                                 : 0;
    r.reentry = st.reentry;
    r.barred = st.barred;
    if (r.barred && r.euclid_audits_since_removal >= r.euclid_audits_needed &&
        r.factor_version > r.barred_version) {
      r.barred = false;  // the evidence aged out and the factor is new
      r.reentry = true;
    }
    sc.audit_barred = r.barred;
  }
  ApplyCandidates(p, rows);
  ApplyGainGuard(p, rows);
  ApplyAudit(p, rows);
  ApplyBudget(p, rows);

  // The plan pace.
  bool urgent = false, pending = false;
  for (const Row& r : rows) {
    if (!Moved(r)) continue;
    (Urgent(p, r) ? urgent : pending) = true;
  }
  std::vector<Row*> refresh = EarlyRefresh(p, rows);
  pending = pending || !refresh.empty();
  const bool open = force_ || settings_changed || urgent ||
                    p.plan_interval_steps == 0 || clock < p.warmup_steps ||
                    last_paced_step_ < 0 ||
                    clock - last_paced_step_ >= p.plan_interval_steps;
  SelectionDecision d;
  d.step = clock;
  if (open) {
    if (pending) last_paced_step_ = clock;
    for (Row* r : refresh) {
      r->early_refresh_version = r->factor_version;
      d.early_refresh.push_back(r->layer->name);
      absl::StrAppend(&r->score.reason, "; early refresh: gain ",
                      Num(r->score.gain), " < half the best ",
                      Num(r->best_gain), " of factor v", r->factor_version);
    }
  } else if (pending) {
    const int64_t next = last_paced_step_ + p.plan_interval_steps;
    d.next_change_step = next;
    for (Row& r : rows) {
      if (Moved(r)) HoldMove(r, next);
    }
    for (Row* r : refresh) {
      r->score.held = true;
      absl::StrAppend(&r->score.reason,
                      "; early refresh held until the next plan change");
    }
  }
  force_ = false;

  for (const Row& r : rows) {
    State& st = *state_.at(r.layer->name);
    st.candidate = r.score.candidate;
    st.selected = r.score.selected;
    st.resumed = st.resumed && std::isnan(r.score.gain);
    st.early_refresh_version = r.early_refresh_version;
    st.settings = r.settings;
    if (r.audit_removed) {
      st.audit_why = r.audit_why;
      st.audit_removals = r.score.audit_removals;
      st.barred_version = r.barred_version;
      st.euclid_audits_since_removal = 0;
    }
    st.barred = r.barred;
    st.reentry = r.reentry && !r.score.selected;
    if (r.score.candidate) d.candidates.push_back(r.layer->name);
    if (r.score.selected) d.selected.push_back(r.layer->name);
    d.scores[r.layer->name] = r.score;
  }
  d.changed = d.candidates != last_candidates_ || d.selected != last_selected_;
  last_candidates_ = d.candidates;
  last_selected_ = d.selected;
  return d;
}

int BetaIndex(double beta) {
  for (int b = 0; b < kBetaGrid; ++b) {
    if (kBetaGridValues[b] == beta) return b;
  }
  return 0;
}

double ChooseBeta(const LayerScore& score, double current, double margin) {
  if (score.beta_probe_samples < kMinBetaProbes ||
      !(score.probe_gift_rel_l2 > 0)) {
    return current;
  }
  int best = -1;
  for (int b = 0; b < kBetaGrid; ++b) {
    const double v = score.beta_rel_l2[b];
    if (v >= 0 && (best < 0 || v < score.beta_rel_l2[best])) best = b;
  }
  if (best < 0 || kBetaGridValues[best] == current) return current;
  return score.beta_rel_l2[best] < (1 - margin) * score.probe_gift_rel_l2
             ? kBetaGridValues[best]
             : current;
}

}  // namespace gift::daemon
