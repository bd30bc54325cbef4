#include "daemon/core/control_plane.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/request_limits.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "proto/wire_format_proto.h"

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
  out.set_top_k_4bit(p.top_k_4bit);
  out.set_threshold(p.threshold);
  out.set_hysteresis(p.hysteresis);
  out.set_window_steps(p.window_steps);
  out.set_max_layers(p.max_layers);
  out.set_max_extra_flops(p.max_extra_flops);
  out.set_min_gain(p.min_gain);
  out.set_entry_gain(p.entry_gain);
  out.set_entry_probes(p.entry_probes);
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
  if (in.has_top_k_4bit()) p.top_k_4bit = in.top_k_4bit();
  if (in.has_threshold()) p.threshold = in.threshold();
  if (in.has_hysteresis()) p.hysteresis = in.hysteresis();
  if (in.has_window_steps()) p.window_steps = in.window_steps();
  if (in.has_max_layers()) p.max_layers = in.max_layers();
  if (in.has_max_extra_flops()) p.max_extra_flops = in.max_extra_flops();
  if (in.has_min_gain()) p.min_gain = in.min_gain();
  if (in.has_entry_gain()) p.entry_gain = in.entry_gain();
  if (in.has_entry_probes()) p.entry_probes = in.entry_probes();
  if (in.has_gain_hold()) p.gain_hold = in.gain_hold();
  if (in.has_warmup_steps()) p.warmup_steps = in.warmup_steps();
  if (in.has_plan_interval_steps()) {
    p.plan_interval_steps = in.plan_interval_steps();
  }
  if (in.has_audit_window()) p.audit_window = in.audit_window();
  if (in.has_audit_margin()) p.audit_margin = in.audit_margin();
  for (double v : {p.threshold, p.hysteresis, p.max_extra_flops, p.min_gain,
                   p.entry_gain, p.gain_hold, p.audit_margin}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          "selection policy values must be finite");
    }
  }
  RETURN_IF_ERROR(p.Validate());
  return p;
}

}  // namespace

v1::LayerStatus ControlPlane::LayerStatusOf(const JobLayer& l) const {
  v1::LayerStatus s;
  s.set_name(l.name);
  s.set_d_out(l.d_out);
  s.set_d_in(l.d_in);
  *s.mutable_settings() = l.settings;
  s.mutable_settings()->set_rank(
      std::min<int32_t>(l.r_cap, p_.planner->RankOf(l.settings)));
  if (l.settings.beta() <= 0) {
    s.mutable_settings()->set_beta(l.settings.transform() == v1::TRANSFORM_FULL
                                       ? p_.config->full_beta
                                       : p_.config->beta);
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
  const int64_t step = p_.sessions->SlowestStep();
  s.set_factor_age_steps(factor_step < 0
                             ? std::numeric_limits<double>::quiet_NaN()
                             : std::max<int64_t>(0, step - factor_step));
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
  s.set_format_reason(l.format_note);
  s.set_bytes_sent(l.bytes_sent);
  s.set_sketch_period(l.sketch.period());
  s.set_sketched(l.candidate &&
                 shm::SketchWindowDue(step, p_.planner->refresh_interval(),
                                      l.sketch.period()));
  s.set_sketch_reason(l.sketch.reason());
  if (const PeerLink* link = p_.peers->link(); link != nullptr) {
    s.set_owner(link->OwnerOf(p_.layout->IndexOf(l)).node());
  }
  return s;
}

v1::GetStatusResponse ControlPlane::Status() const {
  v1::GetStatusResponse s;
  s.set_node(p_.config->node);
  s.set_daemon_instance(*p_.instance);
  s.set_version(kGiftVersion);
  s.set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - p_.started));
  s.set_job_id(p_.layout->job_id());
  s.set_ranks_registered(static_cast<int>(p_.sessions->size()));
  s.set_world_size(p_.layout->world_size());
  s.set_plan_epoch(p_.planner->epoch());
  s.set_refresh_interval(p_.planner->refresh_interval());
  s.set_audit_interval(p_.planner->audit_interval());
  s.set_sketch_stride(p_.planner->sketch_stride());
  s.set_rank(p_.planner->rank());
  *s.mutable_policy() = ToProto(p_.planner->selector().policy());
  s.set_step(p_.sessions->empty() ? 0 : p_.sessions->SlowestStep());
  s.set_layers(static_cast<int>(p_.layout->layers().size()));
  s.set_selected_layers(p_.layout->SelectedCount());
  s.set_refreshes(p_.factors->refreshes_total());
  s.set_ranks_reaped(p_.registrar->reaped_total());
  return s;
}

v1::ListLayersResponse ControlPlane::Layers() const {
  v1::ListLayersResponse out;
  for (const JobLayer& l : p_.layout->layers()) {
    *out.add_layers() = LayerStatusOf(l);
  }
  return out;
}

absl::Status ControlPlane::ValidateLayerSettings(
    const JobLayer& l, const v1::LayerSettings& s) const {
  if (!v1::Pin_IsValid(s.pin()) || !v1::Transform_IsValid(s.transform())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: unknown pin or transform value", l.name));
  }
  if (s.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    absl::StatusOr<kernels::WireFormat> f = FromProto(s.format());
    if (!f.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %s: %s", l.name, f.status().message()));
    }
    absl::Status fits =
        kernels::CheckFormatFitsShape(*f, l.d_out, l.d_in, /*two_d=*/true);
    if (!fits.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %s cannot take %s: %s", l.name,
                          kernels::WireFormatName(*f), fits.message()));
    }
  }
  if (s.rank() < 0 || s.rank() > l.d_in || s.rank() > l.r_cap) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d for layer %s must be in [1, %d] (d_in %d, max_rank %d; 0: "
        "the daemon's rank)",
        s.rank(), l.name, l.r_cap, l.d_in, p_.config->max_rank));
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
  if (l.d_in > p_.config->full_max_d_in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %s has d_in %d > full_max_d_in %d: the full transform is not "
        "allowed",
        l.name, l.d_in, p_.config->full_max_d_in));
  }
  // Every rank then gets the layer's full region too.
  std::vector<bool> full = p_.layout->FullLayers();
  full[p_.layout->IndexOf(l)] = true;
  return SessionShmBytes(p_.layout->Decls(), full, p_.config->limits).status();
}

absl::StatusOr<v1::SetLayerPolicyResponse> ControlPlane::SetLayerPolicy(
    const v1::SetLayerPolicyRequest& r) {
  ASSIGN_OR_RETURN(JobLayer * l, p_.layout->Find(r.layer()));
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
  if (in.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    s.set_format(in.format());
    l->format_note.clear();  // the operator's choice, not the default's
  }
  const bool changed = s.SerializeAsString() != l->settings.SerializeAsString();
  const bool refactor = s.transform() != l->settings.transform() ||
                        s.rank() != l->settings.rank() ||
                        s.beta() != l->settings.beta();
  l->settings = s;
  if (changed) {
    // A new transform, rank or β takes effect with the next factor: ask the
    // ranks to close their window now rather than wait up to K steps.
    if (refactor) ++l->refresh_seq;
    p_.plans->ApplySelection(/*publish=*/false);  // one epoch for both changes
    p_.plans->NewEpoch(absl::StrFormat("layer %s settings changed", l->name));
  }
  v1::SetLayerPolicyResponse out;
  *out.mutable_layer() = LayerStatusOf(*l);
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::StatusOr<v1::SetRefreshIntervalResponse> ControlPlane::SetRefreshInterval(
    const v1::SetRefreshIntervalRequest& r) {
  if (r.steps() < 1 || r.steps() > kMaxRefreshInterval) {
    return absl::InvalidArgumentError(
        absl::StrFormat("refresh interval K must be in [1, %d] steps (got %d)",
                        kMaxRefreshInterval, r.steps()));
  }
  if (r.steps() != p_.planner->refresh_interval()) {
    p_.planner->set_refresh_interval(r.steps());
    p_.plans->NewEpoch(absl::StrFormat("refresh interval K = %d",
                                       p_.planner->refresh_interval()));
  }
  v1::SetRefreshIntervalResponse out;
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::StatusOr<v1::SetAuditIntervalResponse> ControlPlane::SetAuditInterval(
    const v1::SetAuditIntervalRequest& r) {
  if (r.steps() < 0 || r.steps() > kMaxAuditInterval) {
    return absl::InvalidArgumentError(
        absl::StrFormat("audit interval must be in [0, %d] steps (got %d)",
                        kMaxAuditInterval, r.steps()));
  }
  if (r.steps() != p_.planner->audit_interval()) {
    p_.planner->set_audit_interval(r.steps());
    // A new epoch carries it to the followers; ranks pick it up at once
    // (the per-step agreement makes that safe at any step).
    p_.plans->NewEpoch(
        absl::StrFormat("audit interval = %d", p_.planner->audit_interval()));
  }
  v1::SetAuditIntervalResponse out;
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::StatusOr<v1::SetRankResponse> ControlPlane::SetRank(
    const v1::SetRankRequest& r) {
  if (r.rank() < 1 || r.rank() > p_.config->max_rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank must be in [1, max_rank %d] (got %d); max_rank sizes the "
        "shared factor slots and is set when giftd starts",
        p_.config->max_rank, r.rank()));
  }
  for (const JobLayer& l : p_.layout->layers()) {
    if (r.rank() > l.d_in) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d exceeds d_in %d of layer %s", r.rank(), l.d_in, l.name));
    }
  }
  if (r.rank() != p_.planner->rank()) {
    p_.planner->SetRank(r.rank(), p_.layout->PlanLayers());
    p_.plans->NewEpoch(absl::StrFormat("rank r = %d", p_.planner->rank()));
  }
  v1::SetRankResponse out;
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::StatusOr<v1::SetSelectionPolicyResponse> ControlPlane::SetSelectionPolicy(
    const v1::SetSelectionPolicyRequest& r) {
  ASSIGN_OR_RETURN(SelectorPolicy p,
                   Merge(p_.planner->selector().policy(), r.policy()));
  RETURN_IF_ERROR(p_.planner->selector().SetPolicy(p));
  LOG_INFO("selection policy: %s", ToProto(p).ShortDebugString());
  p_.plans->ApplySelection();
  v1::SetSelectionPolicyResponse out;
  *out.mutable_policy() = ToProto(p);
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::StatusOr<v1::TriggerRefreshResponse> ControlPlane::TriggerRefresh(
    const v1::TriggerRefreshRequest& r) {
  std::vector<JobLayer*> targets;
  if (!r.layer().empty()) {
    ASSIGN_OR_RETURN(JobLayer * l, p_.layout->Find(r.layer()));
    if (!l->candidate) {
      return absl::FailedPreconditionError(
          absl::StrFormat("layer %s is not a candidate (%s): pin it first",
                          l->name, l->score.reason));
    }
    targets.push_back(l);
  } else {
    for (JobLayer& l : p_.layout->layers()) {
      if (l.candidate) targets.push_back(&l);
    }
  }
  v1::TriggerRefreshResponse out;
  for (JobLayer* l : targets) {
    ++l->refresh_seq;
    out.add_layers(l->name);
  }
  if (!targets.empty()) p_.plans->NewEpoch("refresh requested by an operator");
  return out;
}

}  // namespace gift::daemon
