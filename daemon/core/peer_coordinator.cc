#include "daemon/core/peer_coordinator.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/log.h"

namespace gift::daemon {
namespace {

// Stripped as the config check strips it (CheckTokenFile).
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path, "job_token_file"));
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job_token_file '%s' is empty", path));
  }
  return token;
}

// This daemon leads, or another daemon's address holds the key.
bool KnowsLeader(const coord::ElectionState& s, const std::string& self) {
  return s.leader || (!s.leader_address.empty() && s.leader_address != self);
}

}  // namespace

PeerCoordinator::PeerCoordinator(const DaemonConfig& config,
                                 const std::string& instance,
                                 absl::Mutex* daemon_mu)
    : config_(config),
      instance_(instance),
      daemon_mu_(daemon_mu),
      peered_(!config.peer_address.empty()),
      coordinated_(!config.coordinator.empty()) {}

bool PeerCoordinator::IsFollower() const {
  if (coordinated_) return !coord_leader_.load(std::memory_order_acquire);
  PeerLink* l = link();
  return l != nullptr && !l->is_leader();
}

absl::Status PeerCoordinator::CheckPeerJob(const std::string& job_id) const {
  if (job_id == config_.job_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "this giftd serves job '%s', not '%s'", config_.job_id, Clip(job_id)));
}

std::string PeerCoordinator::LeaderAddress() const {
  absl::MutexLock lock(&coord_mu_);
  return leader_address_;
}

// ---- start and stop ---------------------------------------------------------

absl::Status PeerCoordinator::Prepare(PeerLinkFactory factory) {
  const DaemonConfig& c = config_;
  if (c.job_id.empty() || (c.leader_address.empty() && !coordinated_) ||
      c.job_token_file.empty()) {
    return absl::InvalidArgumentError(
        "peer_address needs job_id, leader_address (or a coordinator) and "
        "job_token_file");
  }
  PeerLinkOptions o;
  o.job_id = c.job_id;
  o.node = c.node;
  o.instance = instance_;
  o.listen_address = c.peer_address;
  o.advertise_address = c.peer_advertise_address;
  o.leader_address = c.leader_address;
  ASSIGN_OR_RETURN(o.token, ReadToken(c.job_token_file));
  o.tls_cert_file = c.peer_tls_cert_file;
  o.tls_key_file = c.peer_tls_key_file;
  o.tls_ca_file = c.peer_tls_ca_file;
  o.member_timeout = absl::Milliseconds(c.peer_timeout_ms);
  if (!factory) factory = PeerLink::Create;
  link_options_ = o;
  link_factory_ = factory;
  absl::MutexLock coord(&coord_mu_);
  leader_address_ = o.leader_address;
  return absl::OkStatus();
}

absl::Status PeerCoordinator::Connect(PeerHandler* handler, Hooks hooks) {
  handler_ = handler;
  hooks_ = std::move(hooks);
  if (coordinated_) return StartElection();  // it builds the link
  ASSIGN_OR_RETURN(link_owner_, link_factory_(link_options_, handler_));
  link_.store(link_owner_.get(), std::memory_order_release);
  return absl::OkStatus();
}

void PeerCoordinator::StopElection() {
  if (election_ != nullptr) election_->Stop();
}

void PeerCoordinator::StopLinks() {
  if (link_owner_ != nullptr) link_owner_->Stop();
  retired_links_.clear();  // stopped when they were replaced
}

// ---- the election
// -------------------------------------------------------------

absl::Status PeerCoordinator::StartElection() {
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

void PeerCoordinator::OnElection(const coord::ElectionState& s) {
  if (!s.leader && coord_leader_.exchange(false)) {
    LOG_WARNING("no longer the job's leader (term %d): %s", s.term,
                s.coordinator_reachable ? "another daemon holds the key"
                                        : "the coordinator is unreachable");
  }
  RaiseTerm(s.term);
  absl::MutexLock lock(&coord_mu_);
  coord_pending_ = s;
}

bool PeerCoordinator::ApplyElection() {
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
      absl::MutexLock lock(daemon_mu_);
      hooks_.on_leads_again(s->term);
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

absl::Status PeerCoordinator::RebuildLink(const coord::ElectionState& s) {
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
  absl::StatusOr<std::unique_ptr<PeerLink>> fresh = link_factory_(o, handler_);
  if (!fresh.ok()) return fresh.status();
  RaiseTerm(s.term);
  absl::MutexLock lock(daemon_mu_);
  link_owner_ = *std::move(fresh);
  {
    absl::MutexLock coord(&coord_mu_);  // read by Status without the daemon's
    leader_address_ = o.leader_address;
  }
  link_leader_ = o.leader_address;
  link_.store(link_owner_.get(), std::memory_order_release);
  leader_changes_.fetch_add(1);
  hooks_.on_new_link(s);
  return absl::OkStatus();
}

// ---- terms ------------------------------------------------------------------

absl::Status PeerCoordinator::CheckTerm(int64_t term, const char* kind) {
  const int64_t newest = term_.load();
  if (term < newest) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s of leader term %d refused: this giftd has seen term %d (a deposed "
        "leader's)",
        kind, term, newest));
  }
  RaiseTerm(term);
  return absl::OkStatus();
}

void PeerCoordinator::RaiseTerm(int64_t term) {
  int64_t t = term_.load();
  while (term > t && !term_.compare_exchange_weak(t, term)) {
  }
}

// ---- messages
// -----------------------------------------------------------------

absl::StatusOr<v1::ForwardControlResponse> PeerCoordinator::Forward(
    v1::ForwardControlRequest r) const {
  r.set_job_id(config_.job_id);
  const int want = static_cast<int>(r.request_case());
  PeerLink* link = this->link();
  if (link == nullptr || (coordinated_ && link->is_leader())) {
    return absl::UnavailableError(
        "no leader of the job is known yet (the election on the coordinator "
        "has not settled); retry");
  }
  ASSIGN_OR_RETURN(v1::ForwardControlResponse out, link->ForwardControl(r));
  if (static_cast<int>(out.response_case()) != want) {
    return absl::InternalError(
        "the leader answered a forwarded Control request with another kind");
  }
  return out;
}

std::string PeerCoordinator::PeerRole() const {
  PeerLink* link = this->link();
  if (link == nullptr) return "";
  if (link->is_leader()) {
    return absl::StrFormat("leader of job %s at %s", config_.job_id,
                           link->bound_address());
  }
  return absl::StrFormat("follower of %s in job %s (peer server at %s)%s",
                         LeaderAddress(), config_.job_id, link->bound_address(),
                         coordinated_ ? ", elected on the coordinator" : "");
}

v1::PeerStatus PeerCoordinator::Status() const {
  v1::PeerStatus p;
  PeerLink* link = this->link();
  p.set_term(term_.load());
  p.set_coordinator(config_.coordinator);
  p.set_leader_changes(leader_changes_.load());
  if (link == nullptr) {
    p.set_role(coordinated_ ? v1::PEER_ROLE_FOLLOWER
                            : v1::PEER_ROLE_STANDALONE);
    p.set_job_id(config_.job_id);
    return p;
  }
  const bool leader = link->is_leader() && !IsFollower();
  const PeerLinkStats stats = link->stats();
  p.set_role(leader ? v1::PEER_ROLE_LEADER : v1::PEER_ROLE_FOLLOWER);
  p.set_job_id(config_.job_id);
  p.set_leader_address(LeaderAddress());
  if (coordinated_ && !leader && link->is_leader()) {
    p.set_leader_address("");  // stepped down; no new leader known yet
  }
  p.set_leader_instance(leader ? instance_ : stats.leader_instance);
  p.set_bound_address(link->bound_address());
  p.set_connected(leader || stats.connected);
  p.set_seconds_since_leader(leader ? 0.0 : stats.leader_silence_seconds);
  for (const v1::Member& m : link->members()) {
    v1::PeerMemberStatus* out = p.add_members();
    out->set_node(m.node());
    out->set_address(m.address());
    out->set_instance(m.instance());
    out->set_self(link->IsSelf(m));
    out->set_seconds_since_seen(-1.0);
    for (const auto& [instance, seconds] : stats.member_silence_seconds) {
      if (instance == m.instance()) out->set_seconds_since_seen(seconds);
    }
  }
  return p;
}

}  // namespace gift::daemon
