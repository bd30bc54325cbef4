#include "daemon/core/registrar.h"

#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "daemon/core/request_limits.h"
#include "daemon/core/series.h"
#include "daemon/log.h"
#include "proto/wire_format_proto.h"

namespace gift::daemon {

absl::Status Registrar::CheckRegister(const v1::RegisterRequest& r) const {
  const DaemonConfig& c = *p_.config;
  const JobLayout& layout = *p_.layout;
  RETURN_IF_ERROR(CheckRegisterRequest(r, c.limits));
  if (p_.peers->peered() && r.job_id() != c.job_id) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "giftd serves job '%s' (its job_id); a rank of job '%s' cannot "
        "register here",
        c.job_id, r.job_id()));
  }
  // An unknown format value is refused whether or not the job exists yet.
  if (r.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    RETURN_IF_ERROR(FromProto(r.format()).status());
  }
  if (p_.peers->peered()) {
    // The leader decides the format: once a follower holds it (even before
    // its own first rank), a rank asking another is refused as on one node.
    if (layout.empty() && !LeaderDecidedFormat()) return absl::OkStatus();
    if (!layout.empty()) {
      RETURN_IF_ERROR(layout.CheckSameJob(r.world_size(), r.layers()));
    }
    return layout.CheckFormat(r.rank(), r.format());
  }
  if (layout.job_id().empty() || p_.sessions->empty()) return absl::OkStatus();
  if (r.job_id() != layout.job_id()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "giftd serves job '%s'; a rank of job '%s' cannot register until it "
        "ends",
        layout.job_id(), r.job_id()));
  }
  RETURN_IF_ERROR(layout.CheckSameJob(r.world_size(), r.layers()));
  return layout.CheckFormat(r.rank(), r.format());
}

absl::Status Registrar::CheckCapacity(const v1::RegisterRequest& r,
                                      const std::string& replaced) const {
  const Limits& limits = p_.config->limits;
  const JobLayout& layout = *p_.layout;
  RETURN_IF_ERROR(p_.sessions->CheckCapacity(r.pid(), replaced, limits));
  const int node = p_.sessions->CountWithout(replaced);
  // The job's layers and transforms stay when it goes on; otherwise the
  // rank's layers become the job's, with the default transform.
  const bool keeps =
      !layout.empty() &&
      (p_.peers->peered() || (r.job_id() == layout.job_id() && node > 0));
  if (keeps) {
    return SessionShmBytes(layout.Decls(), layout.FullLayers(), limits)
        .status();
  }
  std::vector<shm::LayerDecl> decls;
  std::vector<bool> full;
  for (const v1::LayerShape& l : r.layers()) {
    decls.push_back({l.name(), l.d_out(), l.d_in(), layout.RankCap(l.d_in())});
    full.push_back(layout.DefaultFull(l.d_in()));
  }
  return SessionShmBytes(decls, full, limits).status();
}

absl::Status Registrar::AdoptJob(const v1::RegisterRequest& r) {
  // The first rank's ask, checked in CheckRegister; else the config's.
  const kernels::WireFormat format =
      r.format() == v1::WIRE_FORMAT_UNSPECIFIED
          ? p_.layout->ConfigFormat()
          : FromProto(r.format()).value_or(p_.layout->ConfigFormat());
  if (p_.peers->peered()) {
    // A multi-node job keeps its layers, epochs and versions while local
    // ranks come and go (the other nodes go on).
    if (!p_.layout->empty()) return absl::OkStatus();
    RETURN_IF_ERROR(
        AdoptLayers(r.job_id(), r.world_size(), r.layers(),
                    LeaderDecidedFormat() ? p_.layout->format() : format));
    // The held plan was checked against no layers: a layer format its
    // shape cannot take keeps it from these (logged; the next plan heals).
    absl::Status fits =
        p_.planner->have_plan()
            ? p_.layout->CheckPlanFormats(p_.planner->last_plan(), "the leader")
            : absl::OkStatus();
    if (fits.ok()) {
      p_.planner->ApplyHeldPlan(p_.layout->mutable_world_size(),
                                p_.layout->PlanLayers());
    } else {
      LOG_ERROR("the held plan is not applied to the new layers: %s",
                fits.message());
    }
    p_.factors->InstallPending();
    // The leader's job (and format) is a new epoch on every node: the
    // ranks of a follower that came first (with their own ask) move to the
    // leader's formats with it, and the leader's ranks never hold an epoch
    // decided before the job's format.
    if (!p_.peers->IsFollower()) {
      p_.plans->NewEpoch(absl::StrFormat(
          "job %s: %d layers, format %s", Clip(p_.layout->job_id()),
          p_.layout->size(), kernels::WireFormatName(p_.layout->format())));
    }
    return absl::OkStatus();
  }
  if (!p_.sessions->empty() && r.job_id() == p_.layout->job_id()) {
    return absl::OkStatus();
  }
  if (r.job_id() != p_.layout->job_id()) p_.store->DropJob(p_.layout->job_id());
  return AdoptLayers(r.job_id(), r.world_size(), r.layers(), format);
}

bool Registrar::LeaderDecidedFormat() const {
  return p_.peers->IsFollower() && p_.planner->have_plan() &&
         p_.planner->last_plan().format() != v1::WIRE_FORMAT_UNSPECIFIED;
}

absl::Status Registrar::AdoptLayers(const std::string& job_id, int world_size,
                                    const LayerShapes& layers,
                                    kernels::WireFormat format) {
  JobLayout& layout = *p_.layout;
  p_.store->KeepJob(job_id);
  p_.planner->ResetSelector();
  RETURN_IF_ERROR(layout.Adopt(
      job_id, world_size, layers, format,
      [&](const JobLayer& l) -> absl::Status {
        RETURN_IF_ERROR(
            p_.planner->selector().AddLayer({l.name, l.d_out, l.d_in}));
        // Counters exist from the start (0), so rates and alerts see them.
        p_.metrics->refresh_failures->Add(layout.Labels({{"layer", l.name}}));
        return absl::OkStatus();
      }));
  p_.metrics->ranks_reaped->Add(layout.Labels({}));
  LOG_INFO("job '%s': world size %d, %d candidate layers, format %s",
           layout.job_id(), layout.world_size(), layout.size(),
           kernels::WireFormatName(layout.format()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RankSession>> Registrar::CreateSession(
    const v1::RegisterRequest& r, SessionSpec spec) {
  if (spec.data_kind == shm::RegionKind::kCudaIpc) {
    if (!r.device_pci_bus_id().empty()) {
      absl::StatusOr<int> device =
          shm::CudaDeviceByPciBusId(r.device_pci_bus_id());
      if (device.ok()) spec.device = *device;
    }
    absl::StatusOr<std::unique_ptr<RankSession>> s = RankSession::Create(spec);
    if (s.ok() || !absl::IsFailedPrecondition(s.status())) return s;
    // The rank copies sketches and factors through the host anyway: host
    // shared memory serves it too when this giftd cannot use its GPU.
    LOG_WARNING("rank %d: no CUDA IPC memory (%s); using host shared memory",
                r.rank(), s.status().message());
    spec.data_kind = shm::RegionKind::kPosix;
  }
  return RankSession::Create(spec);
}

SessionSpec Registrar::SpecOf(const v1::RegisterRequest& r) {
  SessionSpec spec;
  std::tie(spec.session_id, spec.name_prefix) =
      p_.sessions->NextIds(*p_.instance, p_.config->shm_prefix);
  spec.daemon_instance = *p_.instance;
  spec.rank = r.rank();
  spec.world_size = r.world_size();
  spec.local_rank = r.local_rank();
  spec.pid = r.pid();
  spec.data_kind = r.memory() == v1::MEMORY_KIND_DEVICE
                       ? shm::RegionKind::kCudaIpc
                       : shm::RegionKind::kPosix;
  spec.device = r.device();
  spec.layers = p_.layout->Decls();
  return spec;
}

absl::StatusOr<v1::RegisterResponse> Registrar::Register(
    const v1::RegisterRequest& r) {
  RETURN_IF_ERROR(CheckRegister(r));
  // The same rank again (a restarted process, or a re-attach): replace it.
  std::string replaced;
  if (const RankSession* s = p_.sessions->FindRank(r.rank()); s != nullptr) {
    if (s->spec().pid != r.pid() && !ProcessGone(s->spec().pid)) {
      return absl::AlreadyExistsError(
          absl::StrFormat("rank %d is already registered by live pid %d",
                          r.rank(), s->spec().pid));
    }
    replaced = s->id();
  }
  // Every limit before anything is dropped or allocated.
  RETURN_IF_ERROR(CheckCapacity(r, replaced));
  if (!replaced.empty()) {
    DropSession(replaced, "replaced by a new registration");
  }
  RETURN_IF_ERROR(AdoptJob(r));
  for (const std::string& name : r.resumed_gift_layers()) {
    if (!p_.planner->selector().HasLayer(name)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "resumed GIFT layer '%s' is not a declared layer", Clip(name)));
    }
  }
  const SessionSpec spec = SpecOf(r);
  ASSIGN_OR_RETURN(std::unique_ptr<RankSession> s, CreateSession(r, spec));
  for (int i = 0; i < s->layers(); ++i) {
    RETURN_IF_ERROR(shm::WriteOmega0(s->geometry(i), s->data(i),
                                     p_.layout->layers()[i].omega0));
  }
  ASSIGN_OR_RETURN(const bool raise, ContinueAbove(r));
  s->last_seen = absl::Now();
  s->last_step = r.step();
  RankSession& session = p_.sessions->Add(std::move(s));
  RETURN_IF_ERROR(Attach(session, raise));
  p_.metrics->ranks_registered->Add(p_.layout->Labels({}))
      .Set(p_.sessions->size());
  LOG_INFO("registered rank %d/%d of job '%s' (pid %d, %s memory): session %s",
           r.rank(), r.world_size(), r.job_id(), r.pid(),
           r.memory() == v1::MEMORY_KIND_DEVICE ? "device" : "host",
           spec.session_id);
  v1::RegisterResponse out;
  out.set_session_id(spec.session_id);
  out.set_daemon_instance(*p_.instance);
  out.set_control_block(session.control_desc().name);
  out.set_control_block_bytes(session.control_desc().bytes);
  out.set_heartbeat_interval_ms(p_.config->heartbeat_interval_ms);
  return out;
}

absl::Status Registrar::Attach(RankSession& session, bool raise) {
  RETURN_IF_ERROR(p_.plans->EnsureFullRegions());
  for (int i = 0; i < session.layers(); ++i) {
    const shm::FactorData* f = p_.layout->layers()[i].factors.newest();
    if (f == nullptr) continue;
    absl::Status st = shm::PublishFactor(session.entry(i), session.geometry(i),
                                         session.data(i), session.full(i), *f);
    if (!st.ok()) LOG_WARNING("publishing to a new rank: %s", st.ToString());
  }
  if (raise) {
    p_.plans->PublishToAll();
  } else {
    p_.plans->PublishTo(session);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Registrar::ContinueAbove(const v1::RegisterRequest& r) {
  const std::vector<std::string> resumed(r.resumed_gift_layers().begin(),
                                         r.resumed_gift_layers().end());
  for (JobLayer& l : p_.layout->layers()) {
    auto it = r.last_factor_version().find(l.name);
    if (it != r.last_factor_version().end()) {
      l.factors.ContinueAbove(it->second);
    }
  }
  Planner& planner = *p_.planner;
  if (p_.peers->IsFollower()) {
    // The leader decides epochs: it learns this floor from the next
    // telemetry report (and JoinState) and continues above it.
    planner.NoteRankEpoch(r.last_plan_epoch());
    return false;
  }
  // A re-attaching rank holds epochs and versions of an earlier giftd:
  // continue above them so that its switch logic keeps working.
  bool raise = planner.ContinueAbove(r.last_plan_epoch());
  if (!resumed.empty()) {
    // A job resumed from a checkpoint holds factors of these layers: keep
    // them on the GIFT path; a changed selection is a new epoch.
    RETURN_IF_ERROR(planner.selector().Resume(resumed));
    if (p_.plans->ApplySelection(/*publish=*/false) && !raise) {
      planner.NextEpoch();
      raise = true;
    }
    LOG_INFO("rank %d resumed with %d GIFT layers (%s)", r.rank(),
             resumed.size(), absl::StrJoin(resumed, ", "));
  }
  return raise;
}

absl::StatusOr<v1::HeartbeatResponse> Registrar::Heartbeat(
    const v1::HeartbeatRequest& r) {
  if (!p_.sessions->Heartbeat(r.session_id(), r.step(), absl::Now())) {
    return absl::NotFoundError(absl::StrFormat(
        "unknown session '%s' (reaped, or giftd restarted): register again",
        Clip(r.session_id())));
  }
  v1::HeartbeatResponse out;
  out.set_plan_epoch(p_.planner->epoch());
  return out;
}

absl::Status Registrar::Deregister(const v1::DeregisterRequest& r) {
  if (!p_.sessions->contains(r.session_id())) {
    return absl::NotFoundError(
        absl::StrFormat("unknown session '%s'", Clip(r.session_id())));
  }
  DropSession(r.session_id(), "deregistered");
  return absl::OkStatus();
}

void Registrar::DropSession(const std::string& session_id,
                            const std::string& why) {
  // A copy: callers often pass the map's own key, which erase() frees.
  const std::string id = session_id;
  const RankSession* s = p_.sessions->Find(id);
  if (s == nullptr) return;
  const int rank = s->rank();
  JobLayout& layout = *p_.layout;
  DaemonMetrics& m = *p_.metrics;
  // The handles first: the series they point to are removed below.
  p_.series->ForgetRank(rank);
  for (const JobLayer& l : layout.layers()) {
    for (const char* path : {"euclid", "gift"}) {
      const std::string r = absl::StrCat(rank);
      metrics::RemoveSeries(
          m.rel_l2,
          layout.Labels({{"rank", r}, {"layer", l.name}, {"path", path}}));
      metrics::RemoveSeries(
          m.cosine,
          layout.Labels({{"rank", r}, {"layer", l.name}, {"path", path}}));
    }
  }
  metrics::RemoveSeries(m.heartbeat_age,
                        layout.Labels({{"rank", absl::StrCat(rank)}}));
  // Unmaps and unlinks the rank's shared memory (a live device rank's: once
  // its process is gone).
  p_.sessions->Remove(id);
  m.ranks_registered->Add(layout.Labels({})).Set(p_.sessions->size());
  LOG_INFO("rank %d left (session %s): %s", rank, id, why);
  if (p_.sessions->empty()) {
    for (JobLayer& l : layout.layers()) l.windows.ClearLocal();
  }
}

void Registrar::ReapDead() {
  p_.sessions->ReapGraveyard();
  const absl::Duration timeout = absl::Milliseconds(p_.config->rank_timeout_ms);
  for (auto& [id, why] : p_.sessions->Dead(absl::Now(), timeout)) {
    Reap(id, why);
  }
}

void Registrar::Reap(const std::string& id, const std::string& why) {
  ++reaped_total_;
  p_.metrics->ranks_reaped->Add(p_.layout->Labels({})).Increment();
  DropSession(id, "reaped: " + why);
}

void Registrar::DropAll(const std::string& why) {
  while (!p_.sessions->empty()) {
    DropSession(p_.sessions->begin()->first, why);
  }
  p_.sessions->ClearGraveyard();
}

}  // namespace gift::daemon
