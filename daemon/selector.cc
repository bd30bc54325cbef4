// Layer selection (selector.h): the layers and their state, and Decide,
// which builds one row per layer from its state and runs the stages that
// mirror the header: scores from the windows (selector_window.h), pins, the
// vulnerability policy with hysteresis, the gain guard, the audit rule and
// the budget (selector_stages.h), then the plan pace and early refresh
// (selector_pace.h), and commits the outcome.
#include "daemon/selector.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/selector_pace.h"
#include "daemon/selector_stages.h"
#include "daemon/selector_window.h"

namespace gift::daemon {

using internal::LayerState;
using internal::Row;

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
  state_[layer.name] = std::make_shared<LayerState>();
  return absl::OkStatus();
}

bool LayerSelector::HasLayer(const std::string& name) const {
  return state_.count(name) > 0;
}

absl::Status LayerSelector::SetPolicy(const SelectorPolicy& policy) {
  if (absl::Status s = policy.Validate(); !s.ok()) return s;
  if (policy == policy_) return absl::OkStatus();  // e.g. giftctl policy
  policy_ = policy;
  for (auto& [name, st] : state_) st->Trim(policy_);
  force_ = true;
  return absl::OkStatus();
}

absl::Status LayerSelector::Observe(const std::string& layer,
                                    const SelectorSample& s) {
  auto it = state_.find(layer);
  if (it == state_.end()) {
    return absl::NotFoundError(absl::StrCat("selector: unknown layer ", layer));
  }
  if (absl::Status st = internal::ValidateSample(layer, s); !st.ok()) {
    return st;
  }
  LayerState& st = *it->second;
  st.Add(s, policy_);
  clock_ = std::max(clock_, st.steps_seen);
  if (s.step >= 0) {
    if (first_step_ < 0) first_step_ = s.step;
    step_clock_ = std::max(step_clock_, s.step - first_step_);
  }
  return absl::OkStatus();
}

absl::Status LayerSelector::Resume(
    const std::vector<std::string>& selected,
    const std::map<std::string, Versions>& versions) {
  for (const std::string& name : selected) {
    if (state_.count(name) == 0) {
      return absl::NotFoundError(
          absl::StrCat("selector: resume: unknown layer '", name, "'"));
    }
  }
  for (const std::string& name : selected) {
    LayerState& st = *state_.at(name);
    st.resumed = st.candidate = st.selected = true;
    auto it = versions.find(name);
    st.resumed_from_plan = it != versions.end();
    if (it == versions.end()) continue;
    const Versions& v = it->second;
    st.accepted_version = std::max<int64_t>(v.accepted, -1);
    st.proven_version =
        v.proven >= 0 && v.proven <= st.accepted_version ? v.proven : -1;
  }
  force_ = true;
  return absl::OkStatus();
}

namespace {

// The probe reference's calibration where a layer has none of its own: the
// mean over the layers that have one; 1 when none has.
double JobCalibration(
    const std::map<std::string, std::shared_ptr<LayerState>>& state) {
  double calibrated = 0;
  int calibrated_layers = 0;
  for (const auto& [name, st] : state) {
    if (st->calibration.empty()) continue;
    calibrated += internal::Mean(st->calibration);
    ++calibrated_layers;
  }
  return calibrated_layers > 0 ? calibrated / calibrated_layers : 1.0;
}

// The window's scores of a row.
void ScoreRow(const LayerState& st, LayerScore& sc) {
  sc.vulnerability = st.window.Vulnerability();
  sc.gain = st.window.VersionGain(st.factor_version, &sc.gain_probe_steps,
                                  &sc.gain_lowest, &sc.gain_latest);
  sc.probe_gift_rel_l2 = st.window.ProbeGift();
  sc.beta_probes = st.window.sum.beta_probes;
  sc.beta_probe_steps = st.window.BetaProbeSteps();
  for (int b = 0; b < kBetaGrid; ++b) {
    sc.beta_rel_l2[b] = st.window.ProbeBeta(b);
  }
}

// The audit window, the Euclidean reference and the audit rule's bar of a
// row (the bar lifts once the evidence aged out and the factor is new).
void AuditRow(const SelectorPolicy& p, const LayerState& st,
              double job_calibration, Row& r) {
  LayerScore& sc = r.score;
  sc.audit_gift_rel_l2 = st.audits.Mean(true, &sc.audit_gift_audits);
  sc.audit_euclid_rel_l2 = st.audits.Mean(false, &sc.audit_euclid_audits);
  if (sc.audit_euclid_audits > 0) {
    sc.audit_reference_rel_l2 = sc.audit_euclid_rel_l2;
    sc.audit_reference = "audit";
  } else if (!std::isnan(st.window.ProbeEuclid())) {
    sc.audit_probe_scale = st.calibration.empty()
                               ? job_calibration
                               : internal::Mean(st.calibration);
    sc.audit_reference_rel_l2 = st.window.ProbeEuclid() * sc.audit_probe_scale;
    sc.audit_reference = "probe";
  }
  r.audit_why = st.audit_why;
  sc.audit_removals = st.audit_removals;
  r.barred_version = st.barred_version;
  r.euclid_audits_since_removal = st.euclid_audits_since_removal;
  r.euclid_audits_needed = internal::EuclidAuditsNeeded(p, st.audit_removals);
  r.reentry = st.reentry;
  r.barred = st.barred;
  if (r.barred && r.euclid_audits_since_removal >= r.euclid_audits_needed &&
      r.factor_version > r.barred_version) {
    r.barred = false;  // the evidence aged out and the factor is new
    r.reentry = true;
  }
  sc.audit_barred = r.barred;
}

// Layer `order`'s row before the stages: its state and settings (a missing
// layer has the defaults).
Row MakeRow(const SelectorPolicy& p, const SelectorLayer& layer, size_t order,
            const LayerState& st,
            const std::map<std::string, SelectorSettings>& settings,
            double job_calibration) {
  Row r;
  r.layer = &layer;
  r.order = order;
  r.has_telemetry = st.window.sum.n > 0;
  r.was_candidate = st.candidate;
  r.was_selected = st.selected;
  r.resumed = st.resumed;
  r.resumed_from_plan = st.resumed_from_plan;
  r.factor_version = st.factor_version;
  r.was_accepted = st.accepted_version;
  r.was_proven = r.proven = st.proven_version;
  r.best_gain = st.best_gain;
  r.early_refresh_version = st.early_refresh_version;
  if (auto it = settings.find(layer.name); it != settings.end()) {
    r.settings = it->second;
  }
  r.settings_changed = r.settings.pin != st.settings.pin ||
                       r.settings.full != st.settings.full ||
                       r.settings.rank != st.settings.rank ||
                       r.settings.four_bit != st.settings.four_bit;
  ScoreRow(st, r.score);
  const double stay = p.min_gain * (1 - p.hysteresis);
  r.gaining = r.was_selected && r.settings.pin == PinState::kAuto &&
              r.score.gain >= stay;
  AuditRow(p, st, job_calibration, r);
  return r;
}

// The outcome of a row into its layer's state.
void CommitRow(const Row& r, LayerState& st) {
  st.candidate = r.score.candidate;
  st.selected = r.score.selected;
  st.accepted_version = r.score.accepted_version;
  st.proven_version = r.score.selected ? r.proven : -1;
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
}

}  // namespace

SelectionDecision LayerSelector::Decide(
    const std::map<std::string, SelectorSettings>& settings) {
  const SelectorPolicy& p = policy_;
  const int64_t clock = step_clock_ >= 0 ? step_clock_ : clock_;
  const double job_calibration = JobCalibration(state_);
  std::vector<Row> rows;
  rows.reserve(layers_.size());
  bool settings_changed = false;
  for (size_t i = 0; i < layers_.size(); ++i) {
    rows.push_back(MakeRow(p, layers_[i], i, *state_.at(layers_[i].name),
                           settings, job_calibration));
    settings_changed = settings_changed || rows.back().settings_changed;
  }
  internal::ApplyCandidates(p, rows);
  internal::ApplyGainGuard(p, rows);
  internal::ApplyAudit(p, rows);
  internal::ApplyBudget(p, rows);
  SelectionDecision d;
  d.step = clock;
  internal::ApplyPlanPace(p, clock, force_ || settings_changed,
                          &last_paced_step_, rows, &d);
  force_ = false;
  for (Row& r : rows) {
    r.score.accepted_version = r.score.selected ? r.accepted : -1;
    r.score.proven_version = r.score.selected ? r.proven : -1;
    CommitRow(r, *state_.at(r.layer->name));
    if (r.score.candidate) d.candidates.push_back(r.layer->name);
    if (r.score.selected) d.selected.push_back(r.layer->name);
    d.scores[r.layer->name] = r.score;
  }
  d.changed = d.candidates != last_candidates_ || d.selected != last_selected_;
  last_candidates_ = d.candidates;
  last_selected_ = d.selected;
  return d;
}

int64_t MergeProbeVersion(int64_t probes_before, int64_t version_before,
                          int64_t probes, int64_t version) {
  if (probes <= 0) return version_before;
  if (probes_before <= 0) return version;
  return version_before == version ? version : kMixedProbeVersion;
}

int BetaIndex(double beta) {
  for (int b = 0; b < kBetaGrid; ++b) {
    if (kBetaGridValues[b] == beta) return b;
  }
  return 0;
}

double ChooseBeta(const LayerScore& score, double current, double margin) {
  if (score.beta_probe_steps < kMinBetaProbes ||
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
