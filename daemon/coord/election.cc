#include "daemon/coord/election.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/log.h"
#include "nlohmann/json.hpp"

namespace gift::daemon::coord {
namespace {

using json = nlohmann::json;

// Lease deadlines run on the steady clock: a wall-clock step must neither
// keep a cut-off leader leading nor depose a healthy one.
absl::Duration MonotonicNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

std::string ValueOf(const std::string& instance, const std::string& address) {
  return json({{"instance", instance}, {"address", address}}).dump();
}

// A member or leader value as this file writes it; another writer's
// garbage yields `fallback_instance` and no address.
Member ParseValue(const std::string& value, std::string fallback_instance) {
  Member m{std::move(fallback_instance), ""};
  json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return m;
  auto instance = j.find("instance");
  auto address = j.find("address");
  if (instance != j.end() && instance->is_string()) m.instance = *instance;
  if (address != j.end() && address->is_string()) m.address = *address;
  return m;
}

absl::Status CheckOptions(const ElectionOptions& o) {
  for (const std::string* id : {&o.job_id, &o.instance}) {
    if (id->empty() || absl::StrContains(*id, '/')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "election: job_id and instance must be non-empty without '/': '",
          Clip(*id), "'"));
    }
  }
  if (o.address.empty()) {
    return absl::InvalidArgumentError("election: empty address");
  }
  if (o.ttl < absl::Seconds(2) ||
      o.ttl != absl::Trunc(o.ttl, absl::Seconds(1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("election: ttl ", absl::FormatDuration(o.ttl),
                     " must be whole seconds, at least 2 s"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Election::LeaderKey(const std::string& job_id) {
  return absl::StrCat("/gift/jobs/", job_id, "/leader");
}

std::string Election::MembersPrefix(const std::string& job_id) {
  return absl::StrCat("/gift/jobs/", job_id, "/members/");
}

Election::Election(std::unique_ptr<EtcdClient> etcd, ElectionOptions options,
                   OnChange on_change)
    : etcd_(std::move(etcd)),
      options_(std::move(options)),
      on_change_(std::move(on_change)),
      value_(ValueOf(options_.instance, options_.address)) {}

absl::StatusOr<std::unique_ptr<Election>> Election::Start(
    std::unique_ptr<EtcdClient> etcd, ElectionOptions options,
    OnChange on_change) {
  if (etcd == nullptr) return absl::InvalidArgumentError("election: no etcd");
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::unique_ptr<Election> e(
      new Election(std::move(etcd), std::move(options), std::move(on_change)));
  e->run_thread_ = std::thread([p = e.get()] { p->Run(); });
  e->watchdog_thread_ = std::thread([p = e.get()] { p->Watchdog(); });
  return e;
}

Election::~Election() { Stop(); }

ElectionState Election::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void Election::Stop() {
  std::call_once(stop_once_, [this] {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    run_thread_.join();
    watchdog_thread_.join();
    // The threads are gone: nothing else touches the leases now.
    int64_t leases[2];
    {
      absl::MutexLock lock(&mu_);
      leases[0] = lease_;
      leases[1] = stale_lease_;
      lease_ = stale_lease_ = 0;
    }
    for (int64_t lease : leases) {
      if (lease != 0) etcd_->LeaseRevoke(lease).IgnoreError();  // best effort
    }
    absl::MutexLock lock(&mu_);
    if (state_.leader) {
      LOG_INFO("coord: job '%s': %s stops leading (term %d, stopped)",
               options_.job_id, options_.instance, state_.term);
    }
    state_.leader = false;
  });
}

void Election::Run() {
  const absl::Duration tick = options_.ttl / 4;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.Unlock();
    Tick();
    Notify();
    mu_.Lock();
    mu_.AwaitWithTimeout(absl::Condition(this, &Election::Stopping), tick);
  }
}

void Election::Tick() {
  if (!RevokeStale() || !EnsureLease() || !Renew()) return;
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  if (lease == 0) return;  // expired; a new one next round
  auto leader =
      etcd_->CreateIfAbsent(LeaderKey(options_.job_id), value_, lease);
  if (!leader.ok()) {
    LOG_DEBUG("coord: campaign: %s", leader.status().ToString());
    return Unreachable();
  }
  const std::string prefix = MembersPrefix(options_.job_id);
  auto kvs = etcd_->GetPrefix(prefix);
  if (!kvs.ok()) {
    LOG_DEBUG("coord: members: %s", kvs.status().ToString());
    return Unreachable();
  }
  std::vector<Member> members;
  for (const KeyValue& kv : *kvs) {
    members.push_back(ParseValue(kv.value, kv.key.substr(prefix.size())));
  }
  std::sort(
      members.begin(), members.end(),
      [](const Member& a, const Member& b) { return a.instance < b.instance; });
  Observe(lease, *leader, std::move(members));
}

// A lease this daemon gave up on may still hold the leader key (etcd
// restarted and kept it): end it before campaigning with a new one.
bool Election::RevokeStale() {
  int64_t stale;
  {
    absl::MutexLock lock(&mu_);
    stale = stale_lease_;
  }
  if (stale == 0) return true;
  absl::Status s = etcd_->LeaseRevoke(stale);
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
    LOG_DEBUG("coord: revoke: %s", s.ToString());
    Unreachable();
    return false;
  }
  absl::MutexLock lock(&mu_);
  if (stale_lease_ == stale) stale_lease_ = 0;
  return true;
}

bool Election::EnsureLease() {
  {
    absl::MutexLock lock(&mu_);
    if (lease_ != 0) return true;
  }
  const absl::Duration sent = MonotonicNow();
  auto lease = etcd_->LeaseGrant(options_.ttl);
  if (!lease.ok()) {
    LOG_DEBUG("coord: lease: %s", lease.status().ToString());
    Unreachable();
    return false;
  }
  auto put = etcd_->Put(MembersPrefix(options_.job_id) + options_.instance,
                        value_, *lease);
  if (!put.ok()) {
    LOG_DEBUG("coord: register: %s", put.status().ToString());
    {
      absl::MutexLock lock(&mu_);
      stale_lease_ = *lease;
    }
    Unreachable();
    return false;
  }
  absl::MutexLock lock(&mu_);
  lease_ = *lease;
  lease_deadline_ = sent + options_.ttl;
  ++deadline_changes_;
  return true;
}

bool Election::Renew() {
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  const absl::Duration sent = MonotonicNow();
  auto ttl = etcd_->LeaseKeepAlive(lease);
  if (!ttl.ok() && ttl.status().code() != absl::StatusCode::kNotFound) {
    LOG_DEBUG("coord: keepalive: %s", ttl.status().ToString());
    Unreachable();
    return false;
  }
  absl::MutexLock lock(&mu_);
  if (lease_ != lease) return true;  // the watchdog dropped it meanwhile
  if (!ttl.ok() || *ttl <= absl::ZeroDuration()) {
    LOG_WARNING("coord: job '%s': %s lost its lease %d", options_.job_id,
                options_.instance, lease);
    DropLeaseLocked();
    ElectionState next = state_;
    next.leader = false;
    next.coordinator_reachable = true;
    if (state_.leader) next.leader_address = next.leader_instance = "";
    UpdateLocked(std::move(next), "its lease expired");
    return true;
  }
  // etcd restarted the lease's clock when it got the request, after `sent`.
  lease_deadline_ = sent + std::min(*ttl, options_.ttl);
  ++deadline_changes_;
  return true;
}

void Election::Observe(int64_t lease, const TxnResult& leader,
                       std::vector<Member> members) {
  absl::MutexLock lock(&mu_);
  if (lease_ != lease) return;  // dropped while we asked
  ElectionState next = state_;
  next.coordinator_reachable = true;
  next.members = std::move(members);
  if (leader.holder.has_value() &&
      leader.holder->create_revision >= state_.term) {
    Member holder = ParseValue(leader.holder->value, "");
    next.leader_instance = holder.instance;
    next.leader_address = holder.address;
    next.term = leader.holder->create_revision;
    next.leader =
        leader.holder->lease == lease && MonotonicNow() < lease_deadline_;
  }
  UpdateLocked(std::move(next), "another holds the key");
}

void Election::Unreachable() {
  absl::MutexLock lock(&mu_);
  ElectionState next = state_;
  next.coordinator_reachable = false;
  UpdateLocked(std::move(next), "");
}

void Election::DropLeaseLocked() {
  if (lease_ != 0) stale_lease_ = lease_;
  lease_ = 0;
  lease_deadline_ = absl::ZeroDuration();
  ++deadline_changes_;
}

void Election::UpdateLocked(ElectionState next, const char* why) {
  if (next == state_) return;
  const std::string& job = options_.job_id;
  const std::string& me = options_.instance;
  if (next.leader && !state_.leader) {
    LOG_INFO("coord: job '%s': %s leads (term %d)", job, me, next.term);
  } else if (!next.leader && state_.leader) {
    LOG_WARNING("coord: job '%s': %s stops leading (term %d): %s", job, me,
                state_.term, why);
  }
  if (!next.leader && !next.leader_instance.empty() &&
      (next.leader_instance != state_.leader_instance ||
       next.term != state_.term)) {
    LOG_INFO("coord: job '%s': %s follows %s at %s (term %d)", job, me,
             Clip(next.leader_instance), Clip(next.leader_address), next.term);
  }
  state_ = std::move(next);
  ++seq_;
  ++deadline_changes_;
}

void Election::Notify() {
  if (on_change_ == nullptr) return;
  absl::MutexLock notify(&notify_mu_);
  ElectionState s;
  int64_t seq;
  {
    absl::MutexLock lock(&mu_);
    s = state_;
    seq = seq_;
  }
  if (seq <= notified_seq_) return;
  notified_seq_ = seq;
  on_change_(s);
}

bool Election::WatchdogWake() const {
  return stop_ || deadline_changes_ != watchdog_seen_;
}

// A lease not renewed for the TTL may have expired at etcd: stop leading
// (and drop it) without waiting for etcd to say so.
void Election::Watchdog() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    watchdog_seen_ = deadline_changes_;
    if (lease_ == 0) {
      mu_.Await(absl::Condition(this, &Election::WatchdogWake));
      continue;
    }
    const absl::Duration left = lease_deadline_ - MonotonicNow();
    if (left > absl::ZeroDuration()) {
      mu_.AwaitWithTimeout(absl::Condition(this, &Election::WatchdogWake),
                           left);
      continue;
    }
    DropLeaseLocked();
    ElectionState next = state_;
    if (next.leader) next.leader_address = next.leader_instance = "";
    next.leader = false;
    UpdateLocked(std::move(next), "no lease renewal for the ttl");
    mu_.Unlock();
    Notify();
    mu_.Lock();
  }
}

}  // namespace gift::daemon::coord
