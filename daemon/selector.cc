// Layer selection (selector.h). The decision is built in stages that mirror
// the header: scores from the windows, pins, the vulnerability policy with
// hysteresis, the gain guard, the budget, early refresh. Each stage writes
// the layer's operator-facing `reason`, so the last stage that touched a
// layer explains why it ended where it did.
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
  }
  double Vulnerability() const {
    return sum.n > 0 ? static_cast<double>(sum.upper + sum.lower) / sum.n : 0;
  }
  double Gain() const {
    if (sum.probes <= 0 || !(sum.probe_euclid_sum > 0)) return kNaN;
    return 1.0 - sum.probe_gift_sum / sum.probe_euclid_sum;
  }
};

struct LayerSelector::State {
  Window window;
  int64_t factor_version = -1;
  double best_gain = kNaN;             // since factor_version was published
  int64_t early_refresh_version = -1;  // version already listed
  bool candidate = false;              // at the last Decide (hysteresis memory)
  bool selected = false;
  bool resumed = false;  // Resume() until a gain is measured
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
  policy_ = policy;
  for (auto& [name, st] : state_) st->window.Trim(policy_.window_steps);
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
  State& st = *it->second;
  if (s.factor_version > st.factor_version) {
    st.factor_version = s.factor_version;
    st.best_gain = kNaN;  // best is tracked per factor version
  }
  st.window.Add(s, policy_.window_steps);
  const double gain = st.window.Gain();
  if (!std::isnan(gain) && !(gain <= st.best_gain)) st.best_gain = gain;
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
  int64_t factor_version = -1;
  double best_gain = kNaN;
  int64_t early_refresh_version = -1;
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

// top-k with hysteresis: members keep their place unless a newcomer beats
// the weakest one by the factor (1 + h); free places fill without a margin.
void ApplyTopK(std::vector<Row*> eligible, int k, double h) {
  std::sort(eligible.begin(), eligible.end(), Stronger);
  std::vector<Row*> members, others;
  for (Row* r : eligible) (r->was_candidate ? members : others).push_back(r);
  while (members.size() > static_cast<size_t>(k)) {
    others.push_back(members.back());  // k shrank: the weakest leave
    members.pop_back();
  }
  std::sort(others.begin(), others.end(), Stronger);
  while (members.size() < static_cast<size_t>(k) && !others.empty()) {
    members.push_back(others.front());
    others.erase(others.begin());
  }
  std::sort(members.begin(), members.end(), Stronger);
  while (!others.empty() && others.front()->score.vulnerability >
                                members.back()->score.vulnerability * (1 + h)) {
    std::swap(members.back(), others.front());
    std::sort(members.begin(), members.end(), Stronger);
    std::sort(others.begin(), others.end(), Stronger);
  }
  const std::string top = absl::StrCat("top-", k);
  for (Row* r : members) {
    r->score.candidate = true;
    r->score.reason = absl::StrCat("candidate: vulnerability ",
                                   Num(r->score.vulnerability), " in ", top);
  }
  for (Row* r : others) {
    r->score.reason = absl::StrCat(
        "not a candidate: vulnerability ", Num(r->score.vulnerability),
        " not in ", top, " (must exceed ",
        Num(members.back()->score.vulnerability * (1 + h)), " to enter)");
  }
}

// Hysteresis as a per-layer effective score: a member counts as
// v / (1 − h), a newcomer as v / (1 + h), and a layer is in when its
// effective score reaches the cut. So a member stays while v >= cut·(1 − h)
// and a newcomer enters at v >= cut·(1 + h).
double Effective(const Row* r, double h) {
  return r->score.vulnerability / (r->was_candidate ? 1 - h : 1 + h);
}

// Elbow and threshold membership against `cut` (0: every layer is in).
void ApplyCut(const std::vector<Row*>& eligible, double cut, double h,
              const std::string& what) {
  for (Row* r : eligible) {
    const double v = r->score.vulnerability;
    r->score.candidate = Effective(r, h) >= cut;
    if (cut <= 0) {
      r->score.reason = absl::StrCat("candidate: vulnerability ", Num(v),
                                     " (no ", what, " among the layers)");
    } else if (r->score.candidate) {
      r->score.reason = absl::StrCat(
          "candidate: vulnerability ", Num(v), v >= cut ? " above " : " near ",
          what, " ", Num(cut), v < cut * (1 + h) ? " (hysteresis)" : "");
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
  if (eligible.empty()) return;
  const double h = policy.hysteresis;
  switch (policy.kind) {
    case SelectionKind::kTopK:
      ApplyTopK(eligible, policy.top_k, h);
      break;
    case SelectionKind::kElbow:
      ApplyCut(eligible, ElbowCut(eligible, h), h, "elbow cut");
      break;
    case SelectionKind::kThreshold:
      ApplyCut(eligible, policy.threshold, h, "threshold");
      break;
  }
}

// The measured-gain guard on the unpinned candidates.
void ApplyGainGuard(const SelectorPolicy& policy, std::vector<Row>& rows) {
  const double entry = policy.min_gain;
  const double stay = entry * (1 - policy.hysteresis);
  for (Row& r : rows) {
    if (!r.score.candidate || r.settings.pin == PinState::kIn) continue;
    if (r.resumed && !r.has_telemetry) continue;  // ApplyCandidates said why
    const double g = r.score.gain;
    std::string verdict;
    if (std::isnan(g) && r.resumed) {
      r.score.selected = true;
      verdict = "selected: resumed from a checkpoint, no gain measured yet";
    } else if (std::isnan(g)) {
      verdict = "candidate, not selected: no gain measured yet";
    } else if (g >= entry) {
      r.score.selected = true;
      verdict = absl::StrCat("selected: gain ", Num(g), " >= ", Num(entry));
    } else if (r.was_selected && g >= stay) {
      r.score.selected = true;
      verdict = absl::StrCat("selected: gain ", Num(g), " >= ", Num(stay),
                             " (hysteresis)");
    } else {
      verdict = absl::StrCat("candidate, not selected: gain ", Num(g), " < ",
                             Num(r.was_selected ? stay : entry));
    }
    // Keep the policy's part: it says why the layer is a candidate.
    r.score.reason = absl::StrCat(verdict, "; ", r.score.reason);
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

// Early refresh once per factor version for a layer on (or just leaving)
// the GIFT path whose gain decayed below half its best and below the
// guard's entry level: a fresher factor may win the gain back.
std::vector<std::string> EarlyRefresh(const SelectorPolicy& policy,
                                      std::vector<Row>& rows) {
  std::vector<std::string> out;
  for (Row& r : rows) {
    const double g = r.score.gain;
    if (!r.score.candidate || !(r.score.selected || r.was_selected)) continue;
    if (r.factor_version < 0 || std::isnan(g) || std::isnan(r.best_gain)) {
      continue;
    }
    if (g >= 0.5 * r.best_gain || g >= policy.min_gain) continue;
    if (r.early_refresh_version == r.factor_version) continue;
    r.early_refresh_version = r.factor_version;
    out.push_back(r.layer->name);
    absl::StrAppend(&r.score.reason, "; early refresh: gain ", Num(g),
                    " < half the best ", Num(r.best_gain), " of factor v",
                    r.factor_version);
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
  return absl::OkStatus();
}

SelectionDecision LayerSelector::Decide(
    const std::map<std::string, SelectorSettings>& settings) {
  std::vector<Row> rows(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const State& st = *state_.at(layers_[i].name);
    Row& r = rows[i];
    r = Row{&layers_[i],
            {},
            {},
            i,
            st.window.sum.n > 0,
            st.candidate,
            st.selected,
            st.resumed,
            st.factor_version,
            st.best_gain,
            st.early_refresh_version};
    if (auto it = settings.find(layers_[i].name); it != settings.end()) {
      r.settings = it->second;
    }
    r.score.vulnerability = st.window.Vulnerability();
    r.score.gain = st.window.Gain();
  }
  ApplyCandidates(policy_, rows);
  ApplyGainGuard(policy_, rows);
  ApplyBudget(policy_, rows);
  SelectionDecision d;
  d.early_refresh = EarlyRefresh(policy_, rows);
  for (const Row& r : rows) {
    State& st = *state_.at(r.layer->name);
    st.candidate = r.score.candidate;
    st.selected = r.score.selected;
    st.resumed = st.resumed && std::isnan(r.score.gain);
    st.early_refresh_version = r.early_refresh_version;
    if (r.score.candidate) d.candidates.push_back(r.layer->name);
    if (r.score.selected) d.selected.push_back(r.layer->name);
    d.scores[r.layer->name] = r.score;
  }
  d.changed = d.candidates != last_candidates_ || d.selected != last_selected_;
  last_candidates_ = d.candidates;
  last_selected_ = d.selected;
  return d;
}

}  // namespace gift::daemon
