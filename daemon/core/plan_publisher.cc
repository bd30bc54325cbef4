#include "daemon/core/plan_publisher.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "daemon/log.h"
#include "proto/wire_format_proto.h"

namespace gift::daemon {

void PlanPublisher::PublishTo(RankSession& s) {
  const DaemonConfig& c = *p_.config;
  const Planner& planner = *p_.planner;
  shm::PlanView plan;
  plan.plan_epoch = planner.epoch();
  plan.refresh_interval = planner.refresh_interval();
  plan.probe_interval = c.probe_interval;
  plan.audit_interval = planner.audit_interval();
  plan.staleness_limit = c.staleness_limit;
  plan.omega_seed = c.omega_seed;
  plan.sketch_rows = c.sketch_rows;
  plan.sketch_stride = planner.sketch_stride();
  for (const JobLayer& l : p_.layout->layers()) {
    shm::PlanView::Layer p;
    p.path = l.selected ? 1 : 0;
    p.transform = l.settings.transform() == v1::TRANSFORM_FULL ? 1 : 0;
    // The full code (kernels::WireFormat::code()); settings always hold a
    // valid format (Adopt, SetLayerPolicy and the leader's plan check it).
    p.format = static_cast<uint8_t>(FromProto(l.settings.format())
                                        .value_or(kernels::Fp8Format::kE4M3)
                                        .code());
    p.candidate = l.candidate ? 1 : 0;
    p.rank = std::min<int32_t>(l.r_cap, planner.RankOf(l.settings));
    p.refresh_seq = l.refresh_seq;
    p.accepted_version = l.selected ? l.accepted_version : -1;
    p.sketch_period = l.sketch.period();
    plan.layers.push_back(p);
  }
  shm::PublishPlan(s.block(), plan);
}

void PlanPublisher::PublishToAll() {
  for (auto& [id, s] : *p_.sessions) PublishTo(*s);
  PeerLink* link = p_.peers->link();
  if (link != nullptr && link->is_leader()) link->BroadcastPlan(Plan());
  const metrics::Labels labels = p_.layout->Labels({});
  p_.metrics->plan_epoch->Add(labels).Set(p_.planner->epoch());
  p_.metrics->refresh_interval->Add(labels).Set(p_.planner->refresh_interval());
}

void PlanPublisher::NewEpoch(const std::string& why) {
  p_.planner->NextEpoch();
  absl::Status st = EnsureFullRegions();
  if (!st.ok()) LOG_ERROR("creating full-transform regions: %s", st.ToString());
  PublishToAll();
  LOG_INFO("plan epoch %d: %s", p_.planner->epoch(), why);
}

absl::Status PlanPublisher::EnsureFullRegions() {
  return p_.sessions->EnsureFullRegions(p_.layout->FullLayers());
}

bool PlanPublisher::ApplySelection(bool publish) {
  Planner::Selection d = p_.planner->ApplySelection(p_.layout->PlanLayers());
  for (const std::string& why : d.beta_changes) {
    Log(LogLevel::kInfo, "%s", why);
  }
  if (d.changed && publish) {
    NewEpoch(absl::StrJoin(d.moves, ", "));
  } else if (d.accepted_changed && publish) {
    PublishToAll();  // the ranks agree on it per step: no new epoch
  }
  return d.changed;
}

v1::PeerPlan PlanPublisher::Plan() const {
  const JobLayout& layout = *p_.layout;
  v1::PeerPlan p = p_.planner->BuildPlan(p_.config->job_id, layout.world_size(),
                                         layout.PlanLayers());
  if (PeerLink* link = p_.peers->link(); link != nullptr) {
    for (const v1::Member& m : link->members()) *p.add_members() = m;
  }
  if (!layout.empty()) p.set_format(ToProto(layout.format()));
  p.set_leader_instance(*p_.instance);
  p.set_term(p_.peers->term());
  return p;
}

}  // namespace gift::daemon
