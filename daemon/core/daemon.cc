#include "daemon/core/daemon.h"

#include <algorithm>
#include <random>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "daemon/core/request_limits.h"
#include "daemon/log.h"
#include "shm/prefix_lock.h"

namespace gift::daemon {
namespace {

std::string NewInstanceId() {
  std::random_device rd;
  return absl::StrFormat("%08x", rd());
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config, metrics::Registry* registry)
    : config_(config),
      instance_(NewInstanceId()),
      started_(absl::Now()),
      registry_(registry),
      metrics_(registry),
      store_(StoreLimits{config.limits.max_store_value_bytes,
                         config.limits.max_store_job_bytes,
                         config.limits.max_store_jobs}),
      planner_(PlannerOptions{config.refresh_interval, config.audit_interval,
                              config.rank, config.selection, config.beta,
                              !config.peer_address.empty()}),
      peered_(!config.peer_address.empty()),
      coordinated_(!config.coordinator.empty()) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(
    const DaemonConfig& config, metrics::Registry* registry,
    PeerLinkFactory peer_link_factory) {
  RETURN_IF_ERROR(ValidateConfig(config));
  // Before any shared memory is touched: a second giftd with this prefix
  // would remove the first one's objects below.
  ASSIGN_OR_RETURN(std::unique_ptr<shm::PrefixLock> lock,
                   shm::PrefixLock::Acquire(config.shm_prefix));
  std::unique_ptr<Daemon> d(new Daemon(config, registry));
  d->prefix_lock_ = std::move(lock);
  ASSIGN_OR_RETURN(d->refresher_, Refresher::Create(config.refresh_threads,
                                                    config.refresher_device));
  // A giftd that crashed left its objects behind; ranks that still map them
  // keep their mappings, and re-register with this instance.
  ASSIGN_OR_RETURN(std::vector<std::string> stale,
                   shm::ListPosixObjects(config.shm_prefix + "-"));
  for (const std::string& name : stale) {
    RETURN_IF_ERROR(shm::UnlinkPosix(name));
  }
  if (!stale.empty()) {
    LOG_INFO("removed %d shared-memory objects left by an earlier giftd",
             stale.size());
  }
  d->metrics_.info
      ->Add({{"job_id", ""},
             {"node", config.node},
             {"version", kGiftVersion},
             {"daemon_instance", d->instance_}})
      .Set(1);
  // A member of a multi-node job serves that job's store whatever else
  // local processes put there.
  if (d->peered_) d->store_.KeepJob(config.job_id);
  if (d->peered_) {
    RETURN_IF_ERROR(d->StartPeerLink(std::move(peer_link_factory)));
  }
  d->poll_thread_ = std::thread([p = d.get()] { p->PollLoop(); });
  LOG_INFO("giftd %s instance %s on node %s", kGiftVersion, d->instance_,
           config.node);
  return d;
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.Notify();
  // A graceful handover: the lease is revoked, another daemon leads at once.
  if (election_ != nullptr) election_->Stop();
  store_.Close();  // wakes Gets, including peers' (the link waits for them)
  if (poll_thread_.joinable()) poll_thread_.join();
  // No handler runs after this (they answer UNAVAILABLE once stopped_).
  if (link_owner_ != nullptr) link_owner_->Stop();
  retired_links_.clear();  // stopped when they were replaced
  refresher_.reset();
  absl::MutexLock lock(&mu_);
  while (!sessions_.empty()) {
    DropSession(sessions_.begin()->first, "giftd stopping");
  }
  sessions_.ClearGraveyard();
}

void Daemon::PollLoop() {
  const absl::Duration period = absl::Milliseconds(config_.poll_interval_ms);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    if (coordinated_) ApplyElection();  // outside mu_: may rebuild the link
    PollOnce();
  }
}

metrics::Labels Daemon::Labels(
    std::initializer_list<std::pair<const std::string, std::string>> extra)
    const {
  metrics::Labels labels(extra);
  labels.emplace("job_id", job_id_);
  labels.emplace("node", config_.node);
  return labels;
}

// ---- Register ---------------------------------------------------------------

absl::Status Daemon::CheckRegister(const v1::RegisterRequest& r) const {
  RETURN_IF_ERROR(CheckRegisterRequest(r, config_.limits));
  if (peered_ && r.job_id() != config_.job_id) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "giftd serves job '%s' (its job_id); a rank of job '%s' cannot "
        "register here",
        config_.job_id, r.job_id()));
  }
  if (peered_) {
    return layers_.empty() ? absl::OkStatus()
                           : CheckSameJob(r.world_size(), r.layers());
  }
  if (job_id_.empty() || sessions_.empty()) return absl::OkStatus();
  if (r.job_id() != job_id_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "giftd serves job '%s'; a rank of job '%s' cannot register until it "
        "ends",
        job_id_, r.job_id()));
  }
  return CheckSameJob(r.world_size(), r.layers());
}

absl::Status Daemon::CheckCapacity(const v1::RegisterRequest& r,
                                   const std::string& replaced) const {
  RETURN_IF_ERROR(sessions_.CheckCapacity(r.pid(), replaced, config_.limits));
  const int node = sessions_.CountWithout(replaced);
  // The job's layers and transforms stay when it goes on; otherwise the
  // rank's layers become the job's, with the default transform.
  const bool keeps =
      !layers_.empty() && (peered_ || (r.job_id() == job_id_ && node > 0));
  if (keeps) {
    return SessionShmBytes(Decls(), FullLayers(), config_.limits).status();
  }
  std::vector<shm::LayerDecl> decls;
  std::vector<bool> full;
  for (const v1::LayerShape& l : r.layers()) {
    decls.push_back({l.name(), l.d_out(), l.d_in(), RankCap(l.d_in())});
    full.push_back(DefaultFull(l.d_in()));
  }
  return SessionShmBytes(decls, full, config_.limits).status();
}

int32_t Daemon::RankCap(int64_t d_in) const {
  return static_cast<int32_t>(std::min<int64_t>(config_.max_rank, d_in));
}

bool Daemon::DefaultFull(int64_t d_in) const {
  return config_.transform == "full" && d_in <= config_.full_max_d_in;
}

std::vector<shm::LayerDecl> Daemon::Decls() const {
  std::vector<shm::LayerDecl> out;
  for (const Layer& l : layers_) {
    out.push_back({l.name, l.d_out, l.d_in, l.r_cap});
  }
  return out;
}

std::vector<bool> Daemon::FullLayers() const {
  std::vector<bool> out;
  for (const Layer& l : layers_) {
    out.push_back(l.settings.transform() == v1::TRANSFORM_FULL);
  }
  return out;
}

absl::Status Daemon::CheckSameJob(
    int world_size,
    const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers) const {
  if (world_size != world_size_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "world size %d differs from the job's %d", world_size, world_size_));
  }
  bool same = layers.size() == static_cast<int>(layers_.size());
  for (int i = 0; same && i < layers.size(); ++i) {
    same = layers.Get(i).name() == layers_[i].name &&
           layers.Get(i).d_out() == layers_[i].d_out &&
           layers.Get(i).d_in() == layers_[i].d_in;
  }
  if (!same) {
    return absl::FailedPreconditionError(
        "the rank's layer list differs from the job's (every rank must "
        "declare the same layers, in the same order)");
  }
  return absl::OkStatus();
}

absl::Status Daemon::AdoptJob(const v1::RegisterRequest& r) {
  if (peered_) {
    // A multi-node job keeps its layers, epochs and versions while local
    // ranks come and go (the other nodes go on).
    if (!layers_.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(AdoptLayers(r.job_id(), r.world_size(), r.layers()));
    planner_.ApplyHeldPlan(&world_size_, PlanLayers());
    InstallPendingFactors();
    return absl::OkStatus();
  }
  if (!sessions_.empty() && r.job_id() == job_id_) return absl::OkStatus();
  if (r.job_id() != job_id_) store_.DropJob(job_id_);
  return AdoptLayers(r.job_id(), r.world_size(), r.layers());
}

absl::Status Daemon::AdoptLayers(
    const std::string& job_id, int world_size,
    const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers) {
  job_id_ = job_id;
  store_.KeepJob(job_id_);
  world_size_ = world_size;
  layers_.clear();
  planner_.ResetSelector();
  for (const v1::LayerShape& s : layers) {
    Layer l;
    l.name = s.name();
    l.d_out = s.d_out();
    l.d_in = s.d_in();
    l.r_cap = RankCap(l.d_in);
    l.k_cap = static_cast<int32_t>(
        std::min<int64_t>(l.d_in, l.r_cap + shm::kOversample));
    l.settings.set_pin(v1::PIN_AUTO);
    // A layer wider than full_max_d_in stays low-rank whatever the default.
    l.settings.set_transform(DefaultFull(l.d_in) ? v1::TRANSFORM_FULL
                                                 : v1::TRANSFORM_LOWRANK);
    l.settings.set_format(config_.format == "e5m2" ? v1::FP8_FORMAT_E5M2
                                                   : v1::FP8_FORMAT_E4M3);
    // beta: auto is the default policy of the low-rank layers.
    l.settings.set_beta_auto(config_.beta_auto &&
                             l.settings.transform() != v1::TRANSFORM_FULL);
    l.factors = FactorStore({l.d_in, l.r_cap, l.k_cap});
    l.omega0 = InitialOmega(l.d_in, l.k_cap, config_.omega_seed);
    RETURN_IF_ERROR(planner_.selector().AddLayer({l.name, l.d_out, l.d_in}));
    // Counters exist from the start (0), so rates and alerts see them.
    metrics_.refresh_failures->Add(Labels({{"layer", l.name}}));
    layers_.push_back(std::move(l));
  }
  metrics_.ranks_reaped->Add(Labels({}));
  LOG_INFO("job '%s': world size %d, %d candidate layers", job_id_, world_size_,
           layers_.size());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RankSession>> Daemon::CreateSession(
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

absl::StatusOr<v1::RegisterResponse> Daemon::Register(
    const v1::RegisterRequest& r) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  RETURN_IF_ERROR(CheckRegister(r));
  // The same rank again (a restarted process, or a re-attach): replace it.
  std::string replaced;
  if (const RankSession* s = sessions_.FindRank(r.rank()); s != nullptr) {
    if (s->spec().pid != r.pid() && !ProcessGone(s->spec().pid)) {
      return absl::AlreadyExistsError(
          absl::StrFormat("rank %d is already registered by live pid %d",
                          r.rank(), s->spec().pid));
    }
    replaced = s->id();
  }
  // Every limit before anything is dropped or allocated.
  RETURN_IF_ERROR(CheckCapacity(r, replaced));
  if (!replaced.empty())
    DropSession(replaced, "replaced by a new registration");
  RETURN_IF_ERROR(AdoptJob(r));
  const std::vector<std::string> resumed(r.resumed_gift_layers().begin(),
                                         r.resumed_gift_layers().end());
  for (const std::string& name : resumed) {
    if (!planner_.selector().HasLayer(name)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "resumed GIFT layer '%s' is not a declared layer", Clip(name)));
    }
  }
  SessionSpec spec;
  std::tie(spec.session_id, spec.name_prefix) =
      sessions_.NextIds(instance_, config_.shm_prefix);
  spec.daemon_instance = instance_;
  spec.rank = r.rank();
  spec.world_size = r.world_size();
  spec.local_rank = r.local_rank();
  spec.pid = r.pid();
  spec.data_kind = r.memory() == v1::MEMORY_KIND_DEVICE
                       ? shm::RegionKind::kCudaIpc
                       : shm::RegionKind::kPosix;
  spec.device = r.device();
  spec.layers = Decls();
  ASSIGN_OR_RETURN(std::unique_ptr<RankSession> s, CreateSession(r, spec));
  for (int i = 0; i < s->layers(); ++i) {
    RETURN_IF_ERROR(
        shm::WriteOmega0(s->geometry(i), s->data(i), layers_[i].omega0));
  }
  ASSIGN_OR_RETURN(const bool raise, ContinueAbove(r));
  s->last_seen = absl::Now();
  s->last_step = r.step();
  RankSession& session = sessions_.Add(std::move(s));
  RETURN_IF_ERROR(EnsureFullRegions());
  for (int i = 0; i < session.layers(); ++i) {
    if (const shm::FactorData* f = layers_[i].factors.newest(); f != nullptr) {
      absl::Status st =
          shm::PublishFactor(session.entry(i), session.geometry(i),
                             session.data(i), session.full(i), *f);
      if (!st.ok()) LOG_WARNING("publishing to a new rank: %s", st.ToString());
    }
  }
  if (raise) {
    PublishPlanToAll();
  } else {
    PublishPlanTo(session);
  }
  metrics_.ranks_registered->Add(Labels({})).Set(sessions_.size());
  LOG_INFO("registered rank %d/%d of job '%s' (pid %d, %s memory): session %s",
           r.rank(), r.world_size(), r.job_id(), r.pid(),
           r.memory() == v1::MEMORY_KIND_DEVICE ? "device" : "host",
           spec.session_id);
  v1::RegisterResponse out;
  out.set_session_id(spec.session_id);
  out.set_daemon_instance(instance_);
  out.set_control_block(session.control_desc().name);
  out.set_control_block_bytes(session.control_desc().bytes);
  out.set_heartbeat_interval_ms(config_.heartbeat_interval_ms);
  return out;
}

absl::StatusOr<bool> Daemon::ContinueAbove(const v1::RegisterRequest& r) {
  const std::vector<std::string> resumed(r.resumed_gift_layers().begin(),
                                         r.resumed_gift_layers().end());
  for (Layer& l : layers_) {
    auto it = r.last_factor_version().find(l.name);
    if (it != r.last_factor_version().end()) {
      l.factors.ContinueAbove(it->second);
    }
  }
  if (IsFollower()) {
    // The leader decides epochs: it learns this floor from the next
    // telemetry report (and JoinState) and continues above it.
    planner_.NoteRankEpoch(r.last_plan_epoch());
    return false;
  }
  // A re-attaching rank holds epochs and versions of an earlier giftd:
  // continue above them so that its switch logic keeps working.
  bool raise = planner_.ContinueAbove(r.last_plan_epoch());
  if (!resumed.empty()) {
    // A job resumed from a checkpoint holds factors of these layers: keep
    // them on the GIFT path; a changed selection is a new epoch.
    RETURN_IF_ERROR(planner_.selector().Resume(resumed));
    if (ApplySelection(/*publish=*/false) && !raise) {
      planner_.NextEpoch();
      raise = true;
    }
    LOG_INFO("rank %d resumed with %d GIFT layers (%s)", r.rank(),
             resumed.size(), absl::StrJoin(resumed, ", "));
  }
  return raise;
}

absl::StatusOr<v1::HeartbeatResponse> Daemon::Heartbeat(
    const v1::HeartbeatRequest& r) {
  RETURN_IF_ERROR(CheckCount("step", r.step()));
  absl::MutexLock lock(&mu_);
  if (!sessions_.Heartbeat(r.session_id(), r.step(), absl::Now())) {
    return absl::NotFoundError(absl::StrFormat(
        "unknown session '%s' (reaped, or giftd restarted): register again",
        Clip(r.session_id())));
  }
  v1::HeartbeatResponse out;
  out.set_plan_epoch(planner_.epoch());
  return out;
}

absl::Status Daemon::Deregister(const v1::DeregisterRequest& r) {
  absl::MutexLock lock(&mu_);
  if (!sessions_.contains(r.session_id())) {
    return absl::NotFoundError(
        absl::StrFormat("unknown session '%s'", Clip(r.session_id())));
  }
  DropSession(r.session_id(), "deregistered");
  return absl::OkStatus();
}

void Daemon::DropSession(const std::string& session_id,
                         const std::string& why) {
  // A copy: callers often pass the map's own key, which erase() frees.
  const std::string id = session_id;
  const RankSession* s = sessions_.Find(id);
  if (s == nullptr) return;
  const int rank = s->rank();
  for (const Layer& l : layers_) {
    for (const char* path : {"euclid", "gift"}) {
      const std::string r = absl::StrCat(rank);
      metrics::RemoveSeries(
          metrics_.rel_l2,
          Labels({{"rank", r}, {"layer", l.name}, {"path", path}}));
      metrics::RemoveSeries(
          metrics_.cosine,
          Labels({{"rank", r}, {"layer", l.name}, {"path", path}}));
    }
  }
  metrics::RemoveSeries(metrics_.heartbeat_age,
                        Labels({{"rank", absl::StrCat(rank)}}));
  // Unmaps and unlinks the rank's shared memory (a live device rank's: once
  // its process is gone).
  sessions_.Remove(id);
  metrics_.ranks_registered->Add(Labels({})).Set(sessions_.size());
  LOG_INFO("rank %d left (session %s): %s", rank, id, why);
  if (sessions_.empty()) {
    for (Layer& l : layers_) l.windows.ClearLocal();
  }
}

void Daemon::ReapDead() {
  sessions_.ReapGraveyard();
  const absl::Duration timeout = absl::Milliseconds(config_.rank_timeout_ms);
  for (auto& [id, why] : sessions_.Dead(absl::Now(), timeout)) Reap(id, why);
}

void Daemon::Reap(const std::string& id, const std::string& why) {
  ++reaped_total_;
  metrics_.ranks_reaped->Add(Labels({})).Increment();
  DropSession(id, "reaped: " + why);
}

// ---- plan
// ---------------------------------------------------------------------

void Daemon::PublishPlanTo(RankSession& s) {
  shm::PlanView plan;
  plan.plan_epoch = planner_.epoch();
  plan.refresh_interval = planner_.refresh_interval();
  plan.probe_interval = config_.probe_interval;
  plan.audit_interval = planner_.audit_interval();
  plan.staleness_limit = config_.staleness_limit;
  plan.omega_seed = config_.omega_seed;
  plan.sketch_rows = config_.sketch_rows;
  for (const Layer& l : layers_) {
    shm::PlanView::Layer p;
    p.path = l.selected ? 1 : 0;
    p.transform = l.settings.transform() == v1::TRANSFORM_FULL ? 1 : 0;
    p.format = l.settings.format() == v1::FP8_FORMAT_E5M2 ? 1 : 0;
    p.candidate = l.candidate ? 1 : 0;
    p.rank = std::min<int32_t>(l.r_cap, planner_.RankOf(l.settings));
    p.refresh_seq = l.refresh_seq;
    plan.layers.push_back(p);
  }
  shm::PublishPlan(s.block(), plan);
}

void Daemon::PublishPlanToAll() {
  for (auto& [id, s] : sessions_) PublishPlanTo(*s);
  PeerLink* link = this->link();
  if (link != nullptr && link->is_leader()) link->BroadcastPlan(PlanLocked());
  metrics_.plan_epoch->Add(Labels({})).Set(planner_.epoch());
  metrics_.refresh_interval->Add(Labels({})).Set(planner_.refresh_interval());
}

void Daemon::NewEpoch(const std::string& why) {
  planner_.NextEpoch();
  absl::Status st = EnsureFullRegions();
  if (!st.ok()) LOG_ERROR("creating full-transform regions: %s", st.ToString());
  PublishPlanToAll();
  LOG_INFO("plan epoch %d: %s", planner_.epoch(), why);
}

std::vector<PlanLayer*> Daemon::PlanLayers() {
  std::vector<PlanLayer*> out;
  out.reserve(layers_.size());
  for (Layer& l : layers_) out.push_back(&l);
  return out;
}

std::vector<const PlanLayer*> Daemon::PlanLayers() const {
  std::vector<const PlanLayer*> out;
  out.reserve(layers_.size());
  for (const Layer& l : layers_) out.push_back(&l);
  return out;
}

absl::Status Daemon::EnsureFullRegions() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].settings.transform() != v1::TRANSFORM_FULL) continue;
    for (auto& [id, s] : sessions_) {
      RETURN_IF_ERROR(s->EnsureFullRegion(static_cast<int>(i)));
    }
  }
  return absl::OkStatus();
}

// ---- store
// --------------------------------------------------------------------

absl::Status Daemon::StoreSet(const v1::StoreSetRequest& r) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), config_.limits));
  // A follower's ranks share the job's store on the leader (no lock held:
  // the link blocks).
  if (IsFollower()) return link()->StoreSet(r);
  return store_.Set(r.job_id(), r.key(), r.value());
}

absl::StatusOr<v1::StoreGetResponse> Daemon::StoreGet(
    const v1::StoreGetRequest& r, absl::Duration max_wait) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), config_.limits));
  if (r.timeout_ms() < 0) {
    return absl::InvalidArgumentError("store: timeout_ms must be >= 0");
  }
  if (IsFollower()) {
    v1::StoreGetRequest bounded = r;
    bounded.set_timeout_ms(
        std::min<int64_t>(r.timeout_ms(), absl::ToInt64Milliseconds(max_wait)));
    return link()->StoreGet(bounded);
  }
  ASSIGN_OR_RETURN(
      std::string v,
      store_.Get(r.job_id(), r.key(),
                 std::min(absl::Milliseconds(r.timeout_ms()), max_wait)));
  v1::StoreGetResponse out;
  out.set_value(std::move(v));
  return out;
}

absl::StatusOr<v1::StoreAddResponse> Daemon::StoreAdd(
    const v1::StoreAddRequest& r) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), config_.limits));
  if (IsFollower()) return link()->StoreAdd(r);
  ASSIGN_OR_RETURN(int64_t v, store_.Add(r.job_id(), r.key(), r.delta()));
  v1::StoreAddResponse out;
  out.set_value(v);
  return out;
}

}  // namespace gift::daemon
