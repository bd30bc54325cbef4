#include "daemon/core/peer_messages.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/core/request_limits.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "proto/wire_format_proto.h"
#include "shm/protocol.h"

namespace gift::daemon {

namespace {

// Windows of different widths or bases never sum, and factors of another
// width do not fit: a follower that sketches another r + p, derives another
// Ω₀ or holds another max_rank cannot join.
absl::Status CheckJoinSketches(const v1::JoinRequest& r,
                               const DaemonConfig& c) {
  if (r.has_sketch_oversample() &&
      r.sketch_oversample() != c.sketch_oversample) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "join of %s: its sketch_oversample p = %d differs from the leader's "
        "%d; every node of a job must sketch the same r + p columns",
        r.self().node(), r.sketch_oversample(), c.sketch_oversample));
  }
  if (r.has_omega_seed() && r.omega_seed() != c.omega_seed) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "join of %s: its omega_seed 0x%016x differs from the leader's "
        "0x%016x; every node of a job must derive the same sketch basis Ω₀",
        r.self().node(), r.omega_seed(), c.omega_seed));
  }
  if (r.has_max_rank() && r.max_rank() != c.max_rank) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "join of %s: its max_rank %d differs from the leader's %d; every "
        "node of a job must hold factors and sketch bases of the same width",
        r.self().node(), r.max_rank(), c.max_rank));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJoinLayout(const v1::JoinRequest& r) {
  if (r.layout_version() == shm::kLayoutVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("layout version %d, this giftd speaks %d",
                      r.layout_version(), shm::kLayoutVersion));
}

absl::Status PeerMessages::CheckTerm(int64_t term, const char* kind) {
  absl::Status st = p_.peers->CheckTerm(term, kind);
  if (!st.ok()) {
    p_.metrics->peer_refused->Add(p_.layout->Labels({{"kind", kind}}))
        .Increment();
  }
  return st;
}

absl::StatusOr<v1::PeerPlan> PeerMessages::Join(const v1::JoinRequest& r) {
  const DaemonConfig& c = *p_.config;
  JobLayout& layout = *p_.layout;
  if (p_.peers->IsFollower()) {
    return absl::FailedPreconditionError("this giftd is not the job's leader");
  }
  if (r.term() > p_.peers->term()) {
    p_.metrics->peer_refused->Add(layout.Labels({{"kind", "join"}}))
        .Increment();
    return absl::FailedPreconditionError(absl::StrFormat(
        "this giftd leads term %d; %s has seen term %d: a newer leader exists",
        p_.peers->term(), r.self().node(), r.term()));
  }
  // Every check before anything changes.
  RETURN_IF_ERROR(CheckJoinSketches(r, c));
  if (r.has_plan()) {
    RETURN_IF_ERROR(layout.CheckPlanFormats(r.plan(), r.self().node()));
  }
  kernels::WireFormat format = layout.ConfigFormat();
  if (!r.layers().empty() && r.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    absl::StatusOr<kernels::WireFormat> f = FromProto(r.format());
    if (!f.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "join of %s: job format: %s", r.self().node(), f.status().message()));
    }
    format = *f;
  }
  if (!r.layers().empty()) {
    // As a rank's layer list.
    RETURN_IF_ERROR(CheckLayerShapes(r.layers(), c.limits));
    if (layout.empty()) {
      if (r.world_size() < 1 || r.world_size() > kMaxWorldSize) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a follower with layers needs a world size in [1, %d] (got %d)",
            kMaxWorldSize, r.world_size()));
      }
      // As the first rank's ask on one node: the follower's job format (its
      // first rank's) becomes the job's. The plan brings it to every node.
      RETURN_IF_ERROR(p_.registrar->AdoptLayers(c.job_id, r.world_size(),
                                                r.layers(), format));
      layout.set_job_id(c.job_id);
    } else {
      RETURN_IF_ERROR(layout.CheckSameJob(r.world_size(), r.layers()));
    }
  }
  // The follower's plan is newer than anything here: this leader restarted
  // and rebuilds from it.
  if (r.has_plan() && !layout.empty()) {
    const bool newer = r.plan().plan_epoch() >= p_.planner->epoch();
    absl::Status st = p_.planner->TakeOverFollowerPlan(
        r.plan(), layout.mutable_world_size(), layout.PlanLayers());
    if (!st.ok()) {
      LOG_WARNING("resuming the follower's plan: %s", st.ToString());
    }
    // The plan was this job's leader's: so is its format (checked above).
    if (newer && r.plan().format() != v1::WIRE_FORMAT_UNSPECIFIED) {
      layout.TakeFormat(*FromProto(r.plan().format()));
    }
  }
  // Continue above the epochs and versions the follower's ranks hold.
  const int64_t held = std::max(r.plan_epoch(), r.plan().plan_epoch());
  for (const auto& [name, version] : r.factor_version()) {
    for (JobLayer& l : layout.layers()) {
      if (l.name == name) l.factors.ContinueAbove(version);
    }
  }
  if (p_.planner->JoinerHolds(held)) {
    p_.plans->NewEpoch(
        absl::StrFormat("%s joined holding epoch %d", r.self().node(), held));
  }
  LOG_INFO("daemon %s (%s) joined job %s", r.self().node(), r.self().address(),
           c.job_id);
  return p_.plans->Plan();
}

absl::Status PeerMessages::Report(const v1::ReportTelemetryRequest& r) {
  if (p_.peers->IsFollower()) {
    return absl::FailedPreconditionError("this giftd is not the job's leader");
  }
  RETURN_IF_ERROR(p_.telemetry->AcceptReport(r));
  if (p_.planner->ReporterHolds(r.plan_epoch())) {
    // A follower's ranks hold an epoch of an earlier leader: go above it.
    p_.plans->NewEpoch(
        absl::StrFormat("%s holds epoch %d", r.self().node(), r.plan_epoch()));
  }
  return absl::OkStatus();
}

absl::Status PeerMessages::Plan(const v1::PeerPlan& plan, PeerLink* link) {
  if (link != nullptr && link->is_leader() && !p_.peers->IsFollower()) {
    return absl::FailedPreconditionError("this giftd is the job's leader");
  }
  // Refused before anything changes (the term included).
  RETURN_IF_ERROR(p_.layout->CheckPlanFormats(plan, "the leader"));
  RETURN_IF_ERROR(CheckTerm(plan.term(), "plan"));
  // A late or repeated plan is ignored (a newer term's may repeat an epoch).
  if (!p_.planner->HoldLeaderPlan(plan)) return absl::OkStatus();
  if (link != nullptr) link->SetPlan(plan);
  p_.planner->ApplyPlan(plan, p_.layout->mutable_world_size(),
                        p_.layout->PlanLayers());
  // The leader decides the job's format: this node's later ranks are
  // checked against it (Registrar::CheckRegister).
  if (plan.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    p_.layout->TakeFormat(*FromProto(plan.format()));
  }
  absl::Status st = p_.plans->EnsureFullRegions();
  if (!st.ok()) LOG_ERROR("creating full-transform regions: %s", st.ToString());
  p_.plans->PublishToAll();
  LOG_INFO("plan epoch %d from the leader", p_.planner->epoch());
  return absl::OkStatus();
}

void PeerMessages::MembersChanged() {
  if (p_.peers->IsFollower()) return;
  // The new member list changes the layers' owners: a new epoch tells
  // every member. (A joining member gets the newest factors with its Join
  // answer: NewestFactors.)
  p_.plans->NewEpoch("the job's daemons changed");
}

v1::JoinRequest PeerMessages::JoinState() const {
  const DaemonConfig& c = *p_.config;
  const JobLayout& layout = *p_.layout;
  v1::JoinRequest j;
  j.set_job_id(c.job_id);
  j.set_layout_version(shm::kLayoutVersion);
  j.set_sketch_oversample(c.sketch_oversample);
  j.set_omega_seed(c.omega_seed);
  j.set_max_rank(c.max_rank);
  j.mutable_self()->set_node(c.node);
  j.mutable_self()->set_instance(*p_.instance);
  j.mutable_self()->set_address(c.peer_advertise_address.empty()
                                    ? c.peer_address
                                    : c.peer_advertise_address);
  if (!layout.empty()) {
    j.set_world_size(layout.world_size());
    j.set_format(ToProto(layout.format()));
    for (const JobLayer& l : layout.layers()) {
      v1::LayerShape* s = j.add_layers();
      s->set_name(l.name);
      s->set_d_out(l.d_out);
      s->set_d_in(l.d_in);
      const int64_t v =
          std::max<int64_t>(std::max<int64_t>(l.factors.newest_version(), 0),
                            l.factors.next_version() - 1);
      if (v > 0) (*j.mutable_factor_version())[l.name] = v;
    }
  }
  j.set_plan_epoch(p_.planner->HeldEpoch());
  if (p_.planner->have_plan()) *j.mutable_plan() = p_.planner->last_plan();
  j.set_term(p_.peers->term());
  return j;
}

void PeerMessages::NewLink(const coord::ElectionState& s) {
  p_.gauges->ResetLinkCounts();
  p_.metrics->peer_leader_changes->Add(p_.layout->Labels({})).Increment();
  if (s.leader) {
    // Continue above every epoch the job has seen, from the plan in use:
    // the followers' joins raise it further (Join).
    absl::Status st = p_.planner->TakeLead(p_.layout->PlanLayers());
    if (!st.ok()) LOG_WARNING("resuming the plan in use: %s", st.ToString());
    p_.peers->set_leading(true);
    p_.plans->NewEpoch(absl::StrFormat("elected leader of job %s (term %d)",
                                       p_.config->job_id, s.term));
  } else {
    LOG_INFO("following the elected leader %s of job %s (term %d)",
             s.leader_address, p_.config->job_id, s.term);
  }
}

void PeerMessages::LeadsAgain(int64_t term) {
  p_.plans->NewEpoch(absl::StrFormat("leads again (term %d)", term));
}

}  // namespace gift::daemon
