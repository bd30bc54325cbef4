// giftd with an elected leader (config.coordinator, issue 16): the job's
// daemons campaign on etcd (daemon/coord/election.h) and follow whoever
// holds the job's leader key. The election's callback only records what it
// saw (and steps a lost leader down at once); the poll thread rebuilds the
// Peer link to lead or to follow the new leader, outside the daemon's lock.
// Every plan, join and factor carries the term (the leader key's etcd
// create_revision), and a daemon refuses those of a term older than the
// newest it has seen, so a deposed or partitioned leader cannot split the
// job; the ranks' in-band agreement still decides what every rank uses.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/log.h"

namespace gift::daemon {
namespace {

// This daemon leads, or another daemon's address holds the key.
bool KnowsLeader(const coord::ElectionState& s, const std::string& self) {
  return s.leader || (!s.leader_address.empty() && s.leader_address != self);
}

}  // namespace

absl::Status Daemon::StartElection() {
  const DaemonConfig& c = config_;
  coord::EtcdOptions eo;
  ASSIGN_OR_RETURN(eo.endpoints, coord::ParseCoordinator(c.coordinator));
  eo.user = c.coordinator_user;
  if (!c.coordinator_password_file.empty()) {
    ASSIGN_OR_RETURN(eo.password, ReadSecretFile(c.coordinator_password_file,
                                                 "coordinator_password_file"));
    // The newline an editor leaves; the rest is the password.
    eo.password = std::string(absl::StripTrailingAsciiWhitespace(eo.password));
  }
  eo.ca_file = c.coordinator_ca_file;
  eo.cert_file = c.coordinator_cert_file;
  eo.key_file = c.coordinator_key_file;
  absl::StatusOr<std::unique_ptr<coord::EtcdClient>> etcd =
      coord::EtcdClient::Create(eo);
  if (!etcd.ok()) {
    return absl::Status(etcd.status().code(),
                        absl::StrCat("coordinator ", c.coordinator, ": ",
                                     etcd.status().message()));
  }
  coord::ElectionOptions o;
  o.job_id = c.job_id;
  o.instance = instance_;
  o.address = c.peer_advertise_address.empty() ? c.peer_address
                                               : c.peer_advertise_address;
  o.ttl = absl::Seconds(c.coordinator_ttl_s);
  absl::StatusOr<std::unique_ptr<coord::Election>> e = coord::Election::Start(
      *std::move(etcd), o,
      [this](const coord::ElectionState& s) { OnElection(s); });
  if (!e.ok()) {
    return absl::Status(e.status().code(),
                        absl::StrCat("coordinator ", c.coordinator, ": ",
                                     e.status().message()));
  }
  election_ = *std::move(e);
  // Serve only once a leader is known: the first link decides the role.
  const absl::Time deadline =
      absl::Now() + absl::Seconds(c.coordinator_ttl_s + 5);
  while (true) {
    const coord::ElectionState s = election_->state();
    if (KnowsLeader(s, o.address)) {
      {
        absl::MutexLock lock(&coord_mu_);
        coord_pending_ = s;
      }
      if (ApplyElection()) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrFormat(
          "coordinator %s: no leader of job %s was elected within %d s "
          "(coordinator reachable: %s)",
          c.coordinator, c.job_id, c.coordinator_ttl_s + 5,
          s.coordinator_reachable ? "yes" : "no"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void Daemon::OnElection(const coord::ElectionState& s) {
  if (!s.leader && coord_leader_.exchange(false)) {
    LOG_WARNING("no longer the job's leader (term %d): %s", s.term,
                s.coordinator_reachable ? "another daemon holds the key"
                                        : "the coordinator is unreachable");
  }
  RaiseTerm(s.term);
  absl::MutexLock lock(&coord_mu_);
  coord_pending_ = s;
}

bool Daemon::ApplyElection() {
  std::optional<coord::ElectionState> s;
  {
    absl::MutexLock lock(&coord_mu_);
    s.swap(coord_pending_);
  }
  if (!s.has_value()) return true;
  const std::string self = link_options_.advertise_address.empty()
                               ? link_options_.listen_address
                               : link_options_.advertise_address;
  // No leader known (etcd unreachable, or between two holders): keep the
  // link; a daemon that led has stepped down in OnElection already.
  if (!KnowsLeader(*s, self)) return true;
  const std::string want = s->leader ? self : s->leader_address;
  if (link() != nullptr && want == link_leader_) {
    if (s->leader && !coord_leader_.exchange(true)) {
      absl::MutexLock lock(&mu_);
      NewEpoch(absl::StrFormat("leads again (term %d)", s->term));
    }
    return true;
  }
  absl::Status st = RebuildLink(*s);
  if (st.ok()) return true;
  LOG_WARNING("peer link to %s: %s (retried)", want, st.ToString());
  absl::MutexLock lock(&coord_mu_);
  if (!coord_pending_.has_value()) coord_pending_ = *s;
  return false;
}

absl::Status Daemon::RebuildLink(const coord::ElectionState& s) {
  PeerLinkOptions o = link_options_;
  const std::string self =
      o.advertise_address.empty() ? o.listen_address : o.advertise_address;
  o.leader_address = s.leader ? self : s.leader_address;
  // The old link first: the new one listens on the same address.
  if (link_owner_ != nullptr) {
    link_owner_->Stop();
    retired_links_.push_back(std::move(link_owner_));
  }
  link_.store(nullptr, std::memory_order_release);
  coord_leader_.store(false);
  absl::StatusOr<std::unique_ptr<PeerLink>> fresh = link_factory_(o, this);
  if (!fresh.ok()) return fresh.status();
  RaiseTerm(s.term);
  absl::MutexLock lock(&mu_);
  link_owner_ = *std::move(fresh);
  {
    absl::MutexLock coord(&coord_mu_);  // read by PeerStatusNow without mu_
    leader_address_ = o.leader_address;
  }
  link_leader_ = o.leader_address;
  peer_bytes_seen_.clear();  // the new link counts from 0
  joins_seen_ = 0;
  link_.store(link_owner_.get(), std::memory_order_release);
  leader_changes_.fetch_add(1);
  metrics_.peer_leader_changes->Add(Labels({})).Increment();
  if (s.leader) {
    // Continue above every epoch the job has seen, from the plan in use:
    // the followers' joins raise it further (OnJoin).
    absl::Status st = planner_.TakeLead(PlanLayers());
    if (!st.ok()) LOG_WARNING("resuming the plan in use: %s", st.ToString());
    coord_leader_.store(true, std::memory_order_release);
    NewEpoch(absl::StrFormat("elected leader of job %s (term %d)",
                             config_.job_id, s.term));
  } else {
    LOG_INFO("following the elected leader %s of job %s (term %d)",
             o.leader_address, config_.job_id, s.term);
  }
  return absl::OkStatus();
}

absl::Status Daemon::CheckTerm(int64_t term, const char* kind) {
  const int64_t newest = term_.load();
  if (term < newest) {
    metrics_.peer_refused->Add(Labels({{"kind", kind}})).Increment();
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s of leader term %d refused: this giftd has seen term %d (a deposed "
        "leader's)",
        kind, term, newest));
  }
  RaiseTerm(term);
  return absl::OkStatus();
}

void Daemon::RaiseTerm(int64_t term) {
  int64_t t = term_.load();
  while (term > t && !term_.compare_exchange_weak(t, term)) {
  }
}

}  // namespace gift::daemon
