// The Daemon façade: wiring, start and stop, the poll cycle, and the
// DaemonCore calls routed to the components under the daemon's mutex.
#include "daemon/core/daemon.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
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
      metrics_(registry),
      store_(StoreLimits{config.limits.max_store_value_bytes,
                         config.limits.max_store_job_bytes,
                         config.limits.max_store_jobs}),
      peers_(config_, instance_, &mu_),
      layout_(config_),
      planner_(PlannerOptions{config.refresh_interval, config.audit_interval,
                              config.rank, config.selection, config.beta,
                              !config.peer_address.empty(),
                              config.sketch_stride, config.max_sketch_period,
                              config.staleness_limit}),
      series_(&metrics_, &layout_),
      core_{&config_,  &instance_, &layout_,  &sessions_,
            &planner_, &peers_,    &metrics_, &series_},
      plans_(core_),
      telemetry_(core_),
      factors_({core_, &telemetry_}),
      gauges_({core_, &factors_}),
      registrar_({core_, &plans_, &factors_, &store_}),
      control_({core_, started_, &plans_, &factors_, &registrar_}),
      messages_({core_, &plans_, &telemetry_, &registrar_, &gauges_}),
      poll_gate_(absl::Milliseconds(config.poll_interval_ms),
                 MaxQuiet(config)) {}

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
  {
    absl::MutexLock l(&d->mu_);
    d->factors_.set_refresher(d->refresher_.get());
  }
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
  if (d->peers_.peered()) d->store_.KeepJob(config.job_id);
  if (d->peers_.peered()) {
    RETURN_IF_ERROR(d->StartPeers(std::move(peer_link_factory)));
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
  peers_.StopElection();
  store_.Close();  // wakes Gets, including peers' (the link waits for them)
  if (poll_thread_.joinable()) poll_thread_.join();
  // No handler runs after this (they answer UNAVAILABLE once stopped_).
  peers_.StopLinks();
  refresher_.reset();
  absl::MutexLock lock(&mu_);
  registrar_.DropAll("giftd stopping");
}

void Daemon::PollLoop() {
  const absl::Duration interval = absl::Milliseconds(config_.poll_interval_ms);
  absl::Duration wait = interval;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    if (peers_.coordinated()) peers_.ApplyElection();  // may rebuild the link
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      sessions_.ExchangeBeats(absl::Now());
      const bool quiet = Quiet();
      wait = quiet ? poll_gate_.wait() : interval;
      if (!sessions_.empty()) series_.Polls(quiet).Increment();
      if (quiet) {
        registrar_.ReapDead();
        continue;
      }
    }
    PollOnce();
  }
}

absl::Duration Daemon::MaxQuiet(const DaemonConfig& c) {
  const absl::Duration interval = absl::Milliseconds(c.poll_interval_ms);
  if (c.peer_address.empty()) return std::max(absl::Seconds(1), interval);
  // A follower's report is also its liveness: four within the leader's
  // peer_timeout_ms (never quiet when that leaves less than one interval).
  return std::clamp(absl::Milliseconds(c.peer_timeout_ms) / 4, interval,
                    std::max(absl::Seconds(1), interval));
}

bool Daemon::Quiet() {
  if (sessions_.empty()) return false;
  PollGate::Activity now;
  now.sessions = sessions_.size();
  now.peer_messages = peer_messages_;
  now.term = peers_.term();
  now.follower = peers_.IsFollower();
  for (const auto& [id, s] : sessions_) {
    // The rank's own word (untrusted): only compared, so wrapping is fine.
    now.steps += static_cast<uint64_t>(
        s->header()->step.load(std::memory_order_acquire));
  }
  now.refreshes = refresher_ != nullptr ? refresher_->Pending() : 0;
  return poll_gate_.Quiet(now, absl::Now());
}

void Daemon::PollOnce() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  registrar_.ReapDead();
  // A member of a multi-node job goes on without local ranks: the leader
  // decides from the followers' telemetry, an owner refreshes their windows.
  if (sessions_.empty() && (!peers_.peered() || layout_.empty())) {
    // The election's gauges also before any rank (GiftJobWithoutLeader).
    if (peers_.peered()) gauges_.UpdatePeer();
    return;
  }
  telemetry_.Read();
  if (!peers_.IsFollower()) plans_.ApplySelection();
  factors_.Collect();
  telemetry_.DisconnectMalformed(
      [this](const std::string& id, const std::string& why) {
        mu_.AssertHeld();
        registrar_.Reap(id, why);
      });
  factors_.PublishResults();
  gauges_.Update();
}

// ---- Agent ------------------------------------------------------------------

absl::StatusOr<v1::RegisterResponse> Daemon::Register(
    const v1::RegisterRequest& r) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  return registrar_.Register(r);
}

absl::StatusOr<v1::HeartbeatResponse> Daemon::Heartbeat(
    const v1::HeartbeatRequest& r) {
  RETURN_IF_ERROR(CheckCount("step", r.step()));
  absl::MutexLock lock(&mu_);
  return registrar_.Heartbeat(r);
}

absl::Status Daemon::Deregister(const v1::DeregisterRequest& r) {
  absl::MutexLock lock(&mu_);
  return registrar_.Deregister(r);
}

absl::Status Daemon::StoreSet(const v1::StoreSetRequest& r) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), config_.limits));
  // A follower's ranks share the job's store on the leader (no lock held:
  // the link blocks).
  if (peers_.IsFollower()) return peers_.link()->StoreSet(r);
  return store_.Set(r.job_id(), r.key(), r.value());
}

absl::StatusOr<v1::StoreGetResponse> Daemon::StoreGet(
    const v1::StoreGetRequest& r, absl::Duration max_wait) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), config_.limits));
  if (r.timeout_ms() < 0) {
    return absl::InvalidArgumentError("store: timeout_ms must be >= 0");
  }
  if (peers_.IsFollower()) {
    v1::StoreGetRequest bounded = r;
    bounded.set_timeout_ms(
        std::min<int64_t>(r.timeout_ms(), absl::ToInt64Milliseconds(max_wait)));
    return peers_.link()->StoreGet(bounded);
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
  if (peers_.IsFollower()) return peers_.link()->StoreAdd(r);
  ASSIGN_OR_RETURN(int64_t v, store_.Add(r.job_id(), r.key(), r.delta()));
  v1::StoreAddResponse out;
  out.set_value(v);
  return out;
}

// ---- Control ----------------------------------------------------------------

absl::StatusOr<v1::GetStatusResponse> Daemon::GetStatus(
    const v1::GetStatusRequest&) {
  v1::GetStatusResponse s;
  {
    absl::MutexLock lock(&mu_);
    s = control_.Status();
  }
  *s.mutable_peer() = peers_.Status();  // the link's lock, not ours
  return s;
}

absl::StatusOr<v1::ListLayersResponse> Daemon::ListLayers(
    const v1::ListLayersRequest&) {
  absl::MutexLock lock(&mu_);
  return control_.Layers();
}

absl::StatusOr<v1::TelemetryUpdate> Daemon::Snapshot() {
  v1::TelemetryUpdate out;
  {
    absl::MutexLock lock(&mu_);
    *out.mutable_status() = control_.Status();
    *out.mutable_layers() = std::move(*control_.Layers().mutable_layers());
  }
  *out.mutable_status()->mutable_peer() = peers_.Status();
  return out;
}

absl::StatusOr<v1::SetLayerPolicyResponse> Daemon::SetLayerPolicy(
    const v1::SetLayerPolicyRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_set_layer_policy() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.set_layer_policy();
  }
  absl::MutexLock lock(&mu_);
  return control_.SetLayerPolicy(r);
}

absl::StatusOr<v1::SetRefreshIntervalResponse> Daemon::SetRefreshInterval(
    const v1::SetRefreshIntervalRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_set_refresh_interval() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.set_refresh_interval();
  }
  absl::MutexLock lock(&mu_);
  return control_.SetRefreshInterval(r);
}

absl::StatusOr<v1::SetAuditIntervalResponse> Daemon::SetAuditInterval(
    const v1::SetAuditIntervalRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_set_audit_interval() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.set_audit_interval();
  }
  absl::MutexLock lock(&mu_);
  return control_.SetAuditInterval(r);
}

absl::StatusOr<v1::SetRankResponse> Daemon::SetRank(
    const v1::SetRankRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_set_rank() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.set_rank();
  }
  absl::MutexLock lock(&mu_);
  return control_.SetRank(r);
}

absl::StatusOr<v1::SetSelectionPolicyResponse> Daemon::SetSelectionPolicy(
    const v1::SetSelectionPolicyRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_set_selection_policy() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.set_selection_policy();
  }
  absl::MutexLock lock(&mu_);
  return control_.SetSelectionPolicy(r);
}

absl::StatusOr<v1::TriggerRefreshResponse> Daemon::TriggerRefresh(
    const v1::TriggerRefreshRequest& r) {
  if (peers_.IsFollower()) {
    v1::ForwardControlRequest f;
    *f.mutable_trigger_refresh() = r;
    ASSIGN_OR_RETURN(v1::ForwardControlResponse out,
                     peers_.Forward(std::move(f)));
    return out.trigger_refresh();
  }
  absl::MutexLock lock(&mu_);
  return control_.TriggerRefresh(r);
}

}  // namespace gift::daemon
