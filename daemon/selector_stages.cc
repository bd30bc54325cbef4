// The decision stages of the layer selector (selector_stages.h).
#include "daemon/selector_stages.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gift::daemon::internal {

std::string Num(double v) { return absl::StrFormat("%.3g", v); }

int64_t EuclidAuditsNeeded(const SelectorPolicy& policy, int64_t removals) {
  if (removals <= 0) return 0;
  return int64_t{policy.audit_window} << std::min<int64_t>(removals - 1, 20);
}

namespace {

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
void ApplyTopK(std::vector<Row*> eligible, const SelectorPolicy& p, int k,
               const std::string& top) {
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

// Where a resumed layer's selection came from, for its reason.
const char* ResumedFrom(const Row& r) {
  return r.resumed_from_plan ? "resumed from the job's last plan"
                             : "resumed from a checkpoint";
}

// The version a resumed layer's path uses until a gain is measured: the
// one it used (a leader rebuilt from a follower's plan), else the newest.
int64_t ResumedVersion(const Row& r) {
  return r.was_accepted >= 0 ? r.was_accepted : r.factor_version;
}

}  // namespace

void ApplyCandidates(const SelectorPolicy& policy, std::vector<Row>& rows) {
  std::vector<Row*> eligible;
  for (Row& r : rows) {
    if (r.settings.pin == PinState::kOut) {
      r.score.reason = "pinned out";
    } else if (r.settings.pin == PinState::kIn) {
      r.score.candidate = r.score.selected = true;
      r.accepted = r.factor_version;  // the operator's: no probation
      r.score.reason = "selected: pinned in";
    } else if (r.resumed && !r.has_telemetry) {
      r.score.candidate = r.score.selected = true;
      r.accepted = ResumedVersion(r);
      r.score.reason =
          absl::StrCat("selected: ", ResumedFrom(r), ", no telemetry yet");
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
      case SelectionKind::kTopK: {
        // The 4-bit layers apart: their scores are not on the FP8 scale.
        std::vector<Row*> fp8, fp4;
        for (Row* r : eligible) (r->settings.four_bit ? fp4 : fp8).push_back(r);
        if (!fp8.empty()) {
          ApplyTopK(fp8, policy, policy.top_k,
                    absl::StrCat("top-", policy.top_k));
        }
        if (!fp4.empty()) {
          const int k = policy.top_k_4bit > 0 ? policy.top_k_4bit
                                              : static_cast<int>(fp4.size());
          ApplyTopK(fp4, policy, k,
                    policy.top_k_4bit > 0
                        ? absl::StrCat("4-bit top-", k)
                        : std::string("the 4-bit layers (top_k_4bit 0: all)"));
        }
        break;
      }
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

namespace {

// Probe steps of its newest version a row's layer needs: a newcomer the
// policy's entry_probes, a layer on the path kProbationProbes.
int64_t ProbesNeeded(const SelectorPolicy& policy, const Row& r) {
  return r.was_selected ? kProbationProbes : policy.entry_probes;
}

// "factor v3 on probation (1 of 2 probe steps, gain 0.2)".
std::string Probation(const SelectorPolicy& policy, const Row& r) {
  std::string out = absl::StrCat(
      "factor v", r.factor_version, " on probation (", r.score.gain_probe_steps,
      " of ", ProbesNeeded(policy, r), " probe steps");
  if (!std::isnan(r.score.gain)) {
    absl::StrAppend(&out, ", gain ", Num(r.score.gain));
  }
  return absl::StrCat(out, ")");
}

// The gain a newcomer's every probe step must show: entry_gain, at least
// min_gain, raised by the hysteresis on a return after an audit removal.
double EntryLevel(const SelectorPolicy& policy, bool reentry) {
  return std::max(policy.min_gain, policy.entry_gain) *
         (reentry ? 1 + policy.hysteresis : 1);
}

// The guard's verdict on an unpinned, unbarred candidate; sets selected and
// the accepted version.
std::string GuardVerdict(const SelectorPolicy& policy, Row& r) {
  const double stay = policy.min_gain * (1 - policy.hysteresis);
  const double g = r.score.gain;
  const bool judged =
      r.score.gain_probe_steps >= ProbesNeeded(policy, r) && !std::isnan(g);
  const std::string on = r.factor_version >= 0
                             ? absl::StrCat(" on factor v", r.factor_version)
                             : "";
  if (!judged && r.resumed) {
    r.score.selected = true;
    r.accepted = ResumedVersion(r);
    return absl::StrCat("selected: ", ResumedFrom(r), ", no gain measured yet");
  }
  if (!judged && r.was_selected && r.was_accepted >= 0) {
    // On the path a new version is used at once, on trial: once its probes
    // judge it, it is kept only if they still gain (below), and a held
    // leave goes back to the last version judged to gain (HoldMove). Held
    // back until judged, the path's factor lagged the probes' by the
    // probation: in issue 27's demo the path's per-step RelL2 ratio was
    // 1.08x the probes' that way, 0.98x on trial.
    r.score.selected = true;
    r.accepted = std::max(r.factor_version, r.was_accepted);
    return absl::StrCat("selected: ", Probation(policy, r), ", in use");
  }
  if (!judged) {
    return r.score.gain_probe_steps == 0
               ? absl::StrCat("candidate, not selected: no gain measured yet",
                              on)
               : absl::StrCat("candidate, not selected: ",
                              Probation(policy, r));
  }
  if (r.was_selected) {
    // On the path: a new version is kept on its summed gain.
    if (g >= stay) {
      r.score.selected = true;
      r.accepted = r.proven = r.factor_version;
      return g >= policy.min_gain
                 ? absl::StrCat("selected: gain ", Num(g),
                                " >= ", Num(policy.min_gain), on, " (",
                                r.score.gain_probe_steps, " probe steps)")
                 : absl::StrCat("selected: gain ", Num(g), " >= ", Num(stay),
                                " (hysteresis)", on);
    }
    return absl::StrCat("candidate, not selected: gain ", Num(g), " < ",
                        Num(stay), on, " (left the GIFT path)");
  }
  // A newcomer must gain entry_gain on every probe step of the version,
  // not only on their sum. The probe (one rank's round trip without error
  // feedback) reads more gain than the path then delivers, and a gain that
  // decays as the factor ages (an early factor, the activations still
  // moving) reads well summed over its first probe while the later ones
  // lose (issue 27's demo: 0.185, then -0.02 twice on a w2 layer, which
  // ran 1.14x Euclidean once on the path), on entry_probes steps
  // (ProbesNeeded).
  const double entry = EntryLevel(policy, r.reentry);
  const double lowest = r.score.gain_lowest;
  if (g >= entry && !(lowest < entry)) {
    r.score.selected = true;
    r.accepted = r.proven = r.factor_version;
    return absl::StrCat("selected: gain ", Num(g), " >= ", Num(entry),
                        r.reentry ? " (back after an audit removal)" : "", on,
                        " (", r.score.gain_probe_steps, " probe steps, lowest ",
                        Num(lowest), ")");
  }
  if (g >= entry) {
    return absl::StrCat("candidate, not selected: gain ", Num(g),
                        " but one probe step's ", Num(lowest), " < ",
                        Num(entry), on);
  }
  return absl::StrCat("candidate, not selected: gain ", Num(g), " < ",
                      Num(entry), on);
}

}  // namespace

void ApplyGainGuard(const SelectorPolicy& policy, std::vector<Row>& rows) {
  for (Row& r : rows) {
    if (!r.score.candidate || r.settings.pin == PinState::kIn) continue;
    if (r.resumed && !r.has_telemetry) continue;  // ApplyCandidates said why
    const std::string verdict =
        r.barred ? absl::StrCat("candidate, not selected: ", BarReason(r))
                 : GuardVerdict(policy, r);
    // Keep the policy's part: it says why the layer is a candidate.
    r.score.reason = absl::StrCat(verdict, "; ", r.policy_reason);
  }
}

namespace {

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

}  // namespace

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
    r.euclid_audits_needed = EuclidAuditsNeeded(policy, r.score.audit_removals);
    r.score.audit_barred = true;
    r.audit_why = why;
    r.score.reason = absl::StrCat(
        "candidate, not selected: audit: ", why, " (removal ",
        r.score.audit_removals, "; back after ", r.euclid_audits_needed,
        " Euclidean audits, a factor newer than v", r.barred_version,
        " and gain >= ", Num(EntryLevel(policy, true)), "); ", r.policy_reason);
  }
}

namespace {

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

}  // namespace

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

double RefreshGain(const LayerScore& s) {
  return std::isnan(s.gain_latest) ? s.gain : std::min(s.gain, s.gain_latest);
}

// Layers for an early refresh: once per factor version for a layer on (or
// just leaving) the GIFT path whose gain decayed below half its best and
// below min_gain: a fresher factor may win the gain back. The gain is the
// lower of the version's summed gain and its newest probe observation's: a
// summed gain lags a decay by the window (the demo's w2 layers: 0.29, 0.26,
// then 0.02 read as 0.19 summed).
std::vector<Row*> EarlyRefresh(const SelectorPolicy& policy,
                               std::vector<Row>& rows) {
  std::vector<Row*> out;
  for (Row& r : rows) {
    const double g = RefreshGain(r.score);
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

}  // namespace gift::daemon::internal
