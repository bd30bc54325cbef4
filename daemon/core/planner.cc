#include "daemon/core/planner.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "daemon/limits.h"
#include "kernels/wire_format.h"
#include "proto/wire_format_proto.h"

namespace gift::daemon {
namespace {

// A factor version a plan carries: -1 (none) when absent or negative (an
// older leader's plan, or one with none).
int64_t PlanVersion(bool present, int64_t version) {
  return present && version >= 0 ? version : -1;
}

}  // namespace

Planner::Planner(const PlannerOptions& options)
    : beta_(options.beta),
      peered_(options.peered),
      refresh_interval_(options.refresh_interval),
      sketch_stride_(options.sketch_stride),
      max_sketch_period_(options.max_sketch_period),
      staleness_limit_(options.staleness_limit),
      audit_interval_(options.audit_interval),
      rank_(options.rank),
      selector_(options.selection) {}

void Planner::SetRank(int rank, const std::vector<PlanLayer*>& layers) {
  rank_ = rank;
  for (PlanLayer* l : layers) {
    if (l->settings.rank() == 0) ++l->refresh_seq;
  }
}

// ---- leader -----------------------------------------------------------------

std::map<std::string, SelectorSettings> Planner::SelectorSettingsByLayer(
    const std::vector<const PlanLayer*>& layers) const {
  std::map<std::string, SelectorSettings> out;
  for (const PlanLayer* l : layers) {
    SelectorSettings s;
    s.pin = l->settings.pin() == v1::PIN_IN    ? PinState::kIn
            : l->settings.pin() == v1::PIN_OUT ? PinState::kOut
                                               : PinState::kAuto;
    s.full = l->settings.transform() == v1::TRANSFORM_FULL;
    s.rank = RankOf(l->settings);
    const absl::StatusOr<kernels::WireFormat> format =
        FromProto(l->settings.format());
    s.four_bit = format.ok() && format->is_fp4();
    out[l->name] = s;
  }
  return out;
}

Planner::Selection Planner::ApplySelection(
    const std::vector<PlanLayer*>& layers) {
  SelectionDecision d = selector_.Decide(SelectorSettingsByLayer(
      std::vector<const PlanLayer*>(layers.begin(), layers.end())));
  Selection out;
  for (PlanLayer* lp : layers) {
    PlanLayer& l = *lp;
    l.score = d.scores[l.name];
    const bool cand = l.score.candidate, sel = l.score.selected;
    if (cand != l.candidate || sel != l.selected) {
      out.moves.push_back(absl::StrFormat("%s %s", l.name,
                                          sel    ? "selected"
                                          : cand ? "candidate"
                                                 : "dropped"));
      out.changed = true;
    }
    l.candidate = cand;
    l.selected = sel;
    l.proven_version = l.score.proven_version;  // rides with the next plan
    if (l.score.accepted_version != l.accepted_version) {
      l.accepted_version = l.score.accepted_version;
      out.accepted_changed = true;
      if (peered_ && sel) {
        out.moves.push_back(absl::StrFormat("%s accepts factor v%d", l.name,
                                            l.accepted_version));
        out.changed = true;
      }
    }
    // β auto: the β of the layer's next factor, from the probes' β grid
    // (a factor switch applies it on every rank at once; the plan carries
    // it to the other nodes' owners).
    if (l.settings.beta_auto() &&
        l.settings.transform() != v1::TRANSFORM_FULL) {
      const double now = l.settings.beta() > 0 ? l.settings.beta() : beta_;
      const double next = ChooseBeta(l.score, now);
      if (next != now) {
        l.settings.set_beta(next);
        const std::string why = absl::StrFormat(
            "%s beta %g -> %g for its next factor (probe RelL2 %.4g with the "
            "factors in use, %.4g with beta %g, over %d grid probes on %d "
            "probe steps)",
            l.name, now, next, l.score.probe_gift_rel_l2,
            l.score.beta_rel_l2[BetaIndex(next)], next, l.score.beta_probes,
            l.score.beta_probe_steps);
        out.beta_changes.push_back(why);
        // Followers learn it from the plan; ranks from the factor.
        if (peered_) {
          out.moves.push_back(why);
          out.changed = true;
        }
      }
    }
  }
  for (const std::string& name : d.early_refresh) {
    for (PlanLayer* l : layers) {
      if (l->name != name) continue;
      ++l->refresh_seq;
      out.changed = true;
      out.moves.push_back(name + " early refresh (gain decayed)");
    }
  }
  // Which windows each layer is sketched in (after the moves above: a
  // layer's period follows its place and its early refresh).
  const int max_period =
      MaxSketchPeriod(max_sketch_period_, staleness_limit_, refresh_interval_);
  for (PlanLayer* l : layers) {
    if (l->sketch.Decide(l->candidate, l->selected && l->accepted_version >= 0,
                         l->refresh_seq, max_period)) {
      out.changed = true;
      out.moves.push_back(l->name + " " + l->sketch.reason());
    }
  }
  return out;
}

v1::PeerPlan Planner::BuildPlan(
    const std::string& job_id, int world_size,
    const std::vector<const PlanLayer*>& layers) const {
  v1::PeerPlan p;
  p.set_job_id(job_id);
  p.set_plan_epoch(epoch_);
  p.set_refresh_interval(refresh_interval_);
  p.set_audit_interval(audit_interval_);
  p.set_rank(rank_);
  p.set_world_size(world_size);
  p.set_sketch_stride(sketch_stride());
  for (const PlanLayer* l : layers) {
    v1::PeerLayerPlan* x = p.add_layers();
    x->set_name(l->name);
    x->set_candidate(l->candidate);
    x->set_selected(l->selected);
    // As the leader holds them (rank 0 = the plan's rank), so that a
    // follower's plan view is exactly the leader's.
    *x->mutable_settings() = l->settings;
    x->set_refresh_seq(l->refresh_seq);
    x->set_accepted_version(l->accepted_version);
    x->set_proven_version(l->proven_version);
    x->set_sketch_period(l->sketch.period());
  }
  return p;
}

bool Planner::ContinueAbove(int64_t epoch) {
  const bool raise = epoch >= epoch_;
  epoch_ = std::max(epoch_, epoch + 1);
  return raise;
}

bool Planner::JoinerHolds(int64_t epoch) {
  if (epoch < epoch_) return false;
  epoch_ = epoch;
  return true;
}

bool Planner::ReporterHolds(int64_t epoch) {
  if (epoch <= epoch_) return false;
  epoch_ = epoch;
  return true;
}

absl::Status Planner::TakeOverFollowerPlan(
    const v1::PeerPlan& plan, int* world_size,
    const std::vector<PlanLayer*>& layers) {
  if (plan.plan_epoch() < epoch_) return absl::OkStatus();
  ApplyPlan(plan, world_size, layers);
  return ResumeSelection(layers);
}

absl::Status Planner::TakeLead(const std::vector<PlanLayer*>& layers) {
  epoch_ = std::max({epoch_, int64_t{1}, rank_epoch_floor_,
                     have_plan_ ? last_plan_.plan_epoch() : 0});
  return ResumeSelection(layers);
}

absl::Status Planner::ResumeSelection(const std::vector<PlanLayer*>& layers) {
  // The versions of the plan in use go on: the rebuilt leader's path keeps
  // the factor every rank uses, not the newest one no probe judged.
  std::vector<std::string> selected;
  std::map<std::string, LayerSelector::Versions> versions;
  for (const PlanLayer* l : layers) {
    if (!l->selected) continue;
    selected.push_back(l->name);
    versions[l->name] = {l->accepted_version, l->proven_version};
  }
  return selector_.Resume(selected, versions);
}

// ---- follower ---------------------------------------------------------------

bool Planner::HoldLeaderPlan(const v1::PeerPlan& plan) {
  // A newer term's leader continues the epochs above what the job holds;
  // its first plan may repeat an epoch of the deposed leader's.
  const bool new_term = have_plan_ && plan.term() > last_plan_.term();
  if (have_plan_ && !new_term && plan.plan_epoch() <= last_plan_.plan_epoch()) {
    return false;  // a late or repeated plan
  }
  last_plan_ = plan;
  have_plan_ = true;
  return true;
}

void Planner::ApplyPlan(const v1::PeerPlan& plan, int* world_size,
                        const std::vector<PlanLayer*>& layers) {
  epoch_ = plan.plan_epoch();
  if (plan.refresh_interval() >= 1) refresh_interval_ = plan.refresh_interval();
  if (plan.has_audit_interval() && plan.audit_interval() >= 0 &&
      plan.audit_interval() <= kMaxAuditInterval) {
    audit_interval_ = plan.audit_interval();
  }
  if (plan.rank() >= 1) rank_ = plan.rank();
  // An older leader's plan has no stride: every step, as it sketched.
  sketch_stride_ = plan.has_sketch_stride() && plan.sketch_stride() >= 1
                       ? plan.sketch_stride()
                       : 1;
  if (*world_size == 0) *world_size = plan.world_size();
  for (const v1::PeerLayerPlan& x : plan.layers()) {
    for (PlanLayer* l : layers) {
      if (l->name != x.name()) continue;
      l->candidate = x.candidate();
      l->selected = x.selected();
      // A plan without a layer format (an older leader's) keeps the layer's.
      const v1::WireFormat format = l->settings.format();
      l->settings = x.settings();
      if (x.settings().format() == v1::WIRE_FORMAT_UNSPECIFIED) {
        l->settings.set_format(format);
      }
      l->refresh_seq = x.refresh_seq();
      // An older leader's plan has none: the layer's path stays Euclidean
      // until an accepted version arrives.
      l->accepted_version =
          PlanVersion(x.has_accepted_version(), x.accepted_version());
      l->proven_version =
          PlanVersion(x.has_proven_version(), x.proven_version());
      l->sketch.Follow(l->candidate,
                       x.has_sketch_period() ? x.sketch_period() : 1);
    }
  }
}

void Planner::ApplyHeldPlan(int* world_size,
                            const std::vector<PlanLayer*>& layers) {
  if (have_plan_) ApplyPlan(last_plan_, world_size, layers);
}

}  // namespace gift::daemon
