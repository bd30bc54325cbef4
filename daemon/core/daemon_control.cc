// giftd's Control service logic: status, layers, run-time settings.
// Every request is validated before anything changes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/core/daemon.h"
#include "daemon/core/request_limits.h"
#include "daemon/limits.h"
#include "daemon/log.h"

namespace gift::daemon {
namespace {

v1::SelectionKind ToProto(SelectionKind k) {
  switch (k) {
    case SelectionKind::kTopK:
      return v1::SELECTION_KIND_TOP_K;
    case SelectionKind::kElbow:
      return v1::SELECTION_KIND_ELBOW;
    case SelectionKind::kThreshold:
      return v1::SELECTION_KIND_THRESHOLD;
  }
  return v1::SELECTION_KIND_UNSPECIFIED;
}

v1::SelectionPolicy ToProto(const SelectorPolicy& p) {
  v1::SelectionPolicy out;
  out.set_kind(ToProto(p.kind));
  out.set_top_k(p.top_k);
  out.set_threshold(p.threshold);
  out.set_hysteresis(p.hysteresis);
  out.set_window_steps(p.window_steps);
  out.set_max_layers(p.max_layers);
  out.set_max_extra_flops(p.max_extra_flops);
  out.set_min_gain(p.min_gain);
  out.set_gain_hold(p.gain_hold);
  out.set_warmup_steps(p.warmup_steps);
  out.set_plan_interval_steps(p.plan_interval_steps);
  out.set_audit_window(p.audit_window);
  out.set_audit_margin(p.audit_margin);
  return out;
}

// Fields left at 0 / UNSPECIFIED keep their value. Negative values are
// passed through so that Validate rejects them.
absl::StatusOr<SelectorPolicy> Merge(SelectorPolicy p,
                                     const v1::SelectionPolicy& in) {
  switch (in.kind()) {
    case v1::SELECTION_KIND_UNSPECIFIED:
      break;
    case v1::SELECTION_KIND_TOP_K:
      p.kind = SelectionKind::kTopK;
      break;
    case v1::SELECTION_KIND_ELBOW:
      p.kind = SelectionKind::kElbow;
      break;
    case v1::SELECTION_KIND_THRESHOLD:
      p.kind = SelectionKind::kThreshold;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown selection kind ", in.kind()));
  }
  // Presence, not value, decides (types.proto): 0 is a value like any.
  if (in.has_top_k()) p.top_k = in.top_k();
  if (in.has_threshold()) p.threshold = in.threshold();
  if (in.has_hysteresis()) p.hysteresis = in.hysteresis();
  if (in.has_window_steps()) p.window_steps = in.window_steps();
  if (in.has_max_layers()) p.max_layers = in.max_layers();
  if (in.has_max_extra_flops()) p.max_extra_flops = in.max_extra_flops();
  if (in.has_min_gain()) p.min_gain = in.min_gain();
  if (in.has_gain_hold()) p.gain_hold = in.gain_hold();
  if (in.has_warmup_steps()) p.warmup_steps = in.warmup_steps();
  if (in.has_plan_interval_steps()) {
    p.plan_interval_steps = in.plan_interval_steps();
  }
  if (in.has_audit_window()) p.audit_window = in.audit_window();
  if (in.has_audit_margin()) p.audit_margin = in.audit_margin();
  for (double v : {p.threshold, p.hysteresis, p.max_extra_flops, p.min_gain,
                   p.gain_hold, p.audit_margin}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          "selection policy values must be finite");
    }
  }
  RETURN_IF_ERROR(p.Validate());
  return p;
}

}  // namespace

absl::StatusOr<Daemon::Layer*> Daemon::FindLayer(const std::string& name) {
  for (Layer& l : layers_) {
    if (l.name == name) return &l;
  }
  if (layers_.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown layer '%s': no rank has registered yet", Clip(name)));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown layer '%s' (giftctl layers lists the %d layers)",
                      Clip(name), layers_.size()));
}

v1::LayerStatus Daemon::LayerStatusOf(const Layer& l) const {
  v1::LayerStatus s;
  s.set_name(l.name);
  s.set_d_out(l.d_out);
  s.set_d_in(l.d_in);
  *s.mutable_settings() = l.settings;
  s.mutable_settings()->set_rank(
      std::min<int32_t>(l.r_cap, planner_.RankOf(l.settings)));
  if (l.settings.beta() <= 0) {
    s.mutable_settings()->set_beta(l.settings.transform() == v1::TRANSFORM_FULL
                                       ? config_.full_beta
                                       : config_.beta);
  }
  s.set_candidate(l.candidate);
  s.set_selected(l.selected);
  s.set_reason(l.score.reason);
  if (const shm::FactorData* f = l.factors.newest(); f != nullptr) {
    s.set_factor_beta(f->beta);
  }
  s.set_probe_gift_rel_l2(l.score.probe_gift_rel_l2);
  s.set_beta_probes(l.score.beta_probes);
  for (int b = 0; b < kBetaGrid; ++b) {
    s.add_beta_grid(kBetaGridValues[b]);
    s.add_beta_grid_rel_l2(l.score.beta_rel_l2[b]);
  }
  s.set_vulnerability(l.score.vulnerability);
  s.set_gain(l.score.gain);
  s.set_factor_version(l.factors.newest_version());
  const int64_t factor_step = l.factors.factor_step();
  s.set_factor_age_steps(
      factor_step < 0
          ? std::numeric_limits<double>::quiet_NaN()
          : std::max<int64_t>(0, sessions_.SlowestStep() - factor_step));
  s.set_last_refresh_seconds(l.factors.last_refresh_seconds());
  s.set_refreshes(l.factors.refreshes());
  s.set_rel_l2(l.rel_l2);
  s.set_cosine(l.cosine);
  s.set_audit_rel_l2_euclid(l.audit[0].rel_l2);
  s.set_audit_rel_l2_gift(l.audit[1].rel_l2);
  s.set_audit_drift_euclid(l.audit[0].drift);
  s.set_audit_drift_gift(l.audit[1].drift);
  s.set_audit_cosine(l.audit_path >= 0
                         ? l.audit[l.audit_path].cosine
                         : std::numeric_limits<double>::quiet_NaN());
  s.set_audit_path(l.audit_path < 0    ? ""
                   : l.audit_path == 1 ? "gift"
                                       : "euclid");
  s.set_audits(l.audits);
  s.set_audit_reference_rel_l2(l.score.audit_reference_rel_l2);
  s.set_audit_reference(l.score.audit_reference);
  s.set_audit_removals(l.score.audit_removals);
  s.set_audit_barred(l.score.audit_barred);
  s.set_held(l.score.held);
  return s;
}

v1::GetStatusResponse Daemon::StatusLocked() const {
  v1::GetStatusResponse s;
  s.set_node(config_.node);
  s.set_daemon_instance(instance_);
  s.set_version(kGiftVersion);
  s.set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  s.set_job_id(job_id_);
  s.set_ranks_registered(static_cast<int>(sessions_.size()));
  s.set_world_size(world_size_);
  s.set_plan_epoch(planner_.epoch());
  s.set_refresh_interval(planner_.refresh_interval());
  s.set_audit_interval(planner_.audit_interval());
  s.set_rank(planner_.rank());
  *s.mutable_policy() = ToProto(planner_.selector().policy());
  s.set_step(sessions_.empty() ? 0 : sessions_.SlowestStep());
  s.set_layers(static_cast<int>(layers_.size()));
  int selected = 0;
  for (const Layer& l : layers_) selected += l.selected;
  s.set_selected_layers(selected);
  s.set_refreshes(refreshes_total_);
  s.set_ranks_reaped(reaped_total_);
  return s;
}

absl::StatusOr<v1::GetStatusResponse> Daemon::GetStatus(
    const v1::GetStatusRequest&) {
  v1::GetStatusResponse s;
  {
    absl::MutexLock lock(&mu_);
    s = StatusLocked();
  }
  *s.mutable_peer() = PeerStatusNow();  // the link's lock, not ours
  return s;
}

absl::StatusOr<v1::ListLayersResponse> Daemon::ListLayers(
    const v1::ListLayersRequest&) {
  absl::MutexLock lock(&mu_);
  v1::ListLayersResponse out;
  for (const Layer& l : layers_) *out.add_layers() = LayerStatusOf(l);
  return out;
}

absl::StatusOr<v1::TelemetryUpdate> Daemon::Snapshot() {
  v1::TelemetryUpdate out;
  {
    absl::MutexLock lock(&mu_);
    *out.mutable_status() = StatusLocked();
    for (const Layer& l : layers_) *out.add_layers() = LayerStatusOf(l);
  }
  *out.mutable_status()->mutable_peer() = PeerStatusNow();
  return out;
}

absl::Status Daemon::ValidateLayerSettings(const Layer& l,
                                           const v1::LayerSettings& s) const {
  if (!v1::Pin_IsValid(s.pin()) || !v1::Transform_IsValid(s.transform()) ||
      !v1::Fp8Format_IsValid(s.format())) {
    return absl::InvalidArgumentError("unknown pin, transform or format value");
  }
  if (s.rank() < 0 || s.rank() > l.d_in || s.rank() > l.r_cap) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d for layer %s must be in [1, %d] (d_in %d, max_rank %d; 0: "
        "the daemon's rank)",
        s.rank(), l.name, l.r_cap, l.d_in, config_.max_rank));
  }
  // 0 keeps the current value; NaN fails both comparisons.
  if (s.beta() != 0 && !(s.beta() >= kMinBeta && s.beta() <= kMaxBeta)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "beta %g for layer %s must be in [%g, %g] (0: the default)", s.beta(),
        l.name, kMinBeta, kMaxBeta));
  }
  if (s.beta_auto() && s.beta() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: beta %g and beta auto together (auto picks beta itself)",
        l.name, s.beta()));
  }
  const bool to_full = s.transform() == v1::TRANSFORM_FULL ||
                       (s.transform() == v1::TRANSFORM_UNSPECIFIED &&
                        l.settings.transform() == v1::TRANSFORM_FULL);
  if (s.beta_auto() && to_full) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s: beta auto is for the low-rank transform (the full "
        "transform's tau takes a fixed beta)",
        l.name));
  }
  if (s.transform() != v1::TRANSFORM_FULL ||
      l.settings.transform() == v1::TRANSFORM_FULL) {
    return absl::OkStatus();
  }
  if (l.d_in > config_.full_max_d_in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s has d_in %d > full_max_d_in %d: the full transform is not "
        "allowed",
        l.name, l.d_in, config_.full_max_d_in));
  }
  // Every rank then gets the layer's full region too.
  std::vector<bool> full = FullLayers();
  full[&l - layers_.data()] = true;
  return SessionShmBytes(Decls(), full, config_.limits).status();
}

absl::StatusOr<v1::SetLayerPolicyResponse> Daemon::SetLayerPolicy(
    const v1::SetLayerPolicyRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_set_layer_policy() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.set_layer_policy();
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Layer * l, FindLayer(r.layer()));
  RETURN_IF_ERROR(ValidateLayerSettings(*l, r.settings()));
  v1::LayerSettings s = l->settings;
  const v1::LayerSettings& in = r.settings();
  if (in.pin() != v1::PIN_UNSPECIFIED) s.set_pin(in.pin());
  if (in.transform() != v1::TRANSFORM_UNSPECIFIED) {
    s.set_transform(in.transform());
  }
  if (in.rank() != 0) s.set_rank(in.rank());
  if (in.beta() != 0) {
    s.set_beta(in.beta());
    s.set_beta_auto(false);  // a β of its own: fixed
  }
  if (in.beta_auto()) s.set_beta_auto(true);  // from the β in use
  if (in.format() != v1::FP8_FORMAT_UNSPECIFIED) s.set_format(in.format());
  const bool changed = s.SerializeAsString() != l->settings.SerializeAsString();
  const bool refactor = s.transform() != l->settings.transform() ||
                        s.rank() != l->settings.rank() ||
                        s.beta() != l->settings.beta();
  l->settings = s;
  if (changed) {
    // A new transform, rank or β takes effect with the next factor: ask the
    // ranks to close their window now rather than wait up to K steps.
    if (refactor) ++l->refresh_seq;
    ApplySelection(/*publish=*/false);  // one epoch for both changes
    NewEpoch(absl::StrFormat("layer %s settings changed", l->name));
  }
  v1::SetLayerPolicyResponse out;
  *out.mutable_layer() = LayerStatusOf(*l);
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::StatusOr<v1::SetRefreshIntervalResponse> Daemon::SetRefreshInterval(
    const v1::SetRefreshIntervalRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_set_refresh_interval() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.set_refresh_interval();
  }
  if (r.steps() < 1 || r.steps() > kMaxRefreshInterval) {
    return absl::InvalidArgumentError(
        absl::StrFormat("refresh interval K must be in [1, %d] steps (got %d)",
                        kMaxRefreshInterval, r.steps()));
  }
  absl::MutexLock lock(&mu_);
  if (r.steps() != planner_.refresh_interval()) {
    planner_.set_refresh_interval(r.steps());
    NewEpoch(absl::StrFormat("refresh interval K = %d",
                             planner_.refresh_interval()));
  }
  v1::SetRefreshIntervalResponse out;
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::StatusOr<v1::SetAuditIntervalResponse> Daemon::SetAuditInterval(
    const v1::SetAuditIntervalRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_set_audit_interval() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.set_audit_interval();
  }
  if (r.steps() < 0 || r.steps() > kMaxAuditInterval) {
    return absl::InvalidArgumentError(
        absl::StrFormat("audit interval must be in [0, %d] steps (got %d)",
                        kMaxAuditInterval, r.steps()));
  }
  absl::MutexLock lock(&mu_);
  if (r.steps() != planner_.audit_interval()) {
    planner_.set_audit_interval(r.steps());
    // A new epoch carries it to the followers; ranks pick it up at once
    // (the per-step agreement makes that safe at any step).
    NewEpoch(absl::StrFormat("audit interval = %d", planner_.audit_interval()));
  }
  v1::SetAuditIntervalResponse out;
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::StatusOr<v1::SetRankResponse> Daemon::SetRank(
    const v1::SetRankRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_set_rank() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.set_rank();
  }
  absl::MutexLock lock(&mu_);
  if (r.rank() < 1 || r.rank() > config_.max_rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank must be in [1, max_rank %d] (got %d); max_rank sizes the "
        "shared factor slots and is set when giftd starts",
        config_.max_rank, r.rank()));
  }
  for (const Layer& l : layers_) {
    if (r.rank() > l.d_in) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d exceeds d_in %d of layer %s", r.rank(), l.d_in, l.name));
    }
  }
  if (r.rank() != planner_.rank()) {
    planner_.SetRank(r.rank(), PlanLayers());
    NewEpoch(absl::StrFormat("rank r = %d", planner_.rank()));
  }
  v1::SetRankResponse out;
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::StatusOr<v1::SetSelectionPolicyResponse> Daemon::SetSelectionPolicy(
    const v1::SetSelectionPolicyRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_set_selection_policy() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.set_selection_policy();
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(SelectorPolicy p,
                   Merge(planner_.selector().policy(), r.policy()));
  RETURN_IF_ERROR(planner_.selector().SetPolicy(p));
  LOG_INFO("selection policy: %s", ToProto(p).ShortDebugString());
  ApplySelection();
  v1::SetSelectionPolicyResponse out;
  *out.mutable_policy() = ToProto(p);
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::StatusOr<v1::TriggerRefreshResponse> Daemon::TriggerRefresh(
    const v1::TriggerRefreshRequest& r) {
  if (IsFollower()) {  // the leader decides; its next plan reaches us
    v1::ForwardControlRequest f;
    *f.mutable_trigger_refresh() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out, Forward(std::move(f)));
    return out.trigger_refresh();
  }
  absl::MutexLock lock(&mu_);
  std::vector<Layer*> targets;
  if (!r.layer().empty()) {
    ASSIGN_OR_RETURN(Layer * l, FindLayer(r.layer()));
    if (!l->candidate) {
      return absl::FailedPreconditionError(
          absl::StrFormat("layer %s is not a candidate (%s): pin it first",
                          l->name, l->score.reason));
    }
    targets.push_back(l);
  } else {
    for (Layer& l : layers_) {
      if (l.candidate) targets.push_back(&l);
    }
  }
  v1::TriggerRefreshResponse out;
  for (Layer* l : targets) {
    ++l->refresh_seq;
    out.add_layers(l->name);
  }
  if (!targets.empty()) NewEpoch("refresh requested by an operator");
  return out;
}

}  // namespace gift::daemon
