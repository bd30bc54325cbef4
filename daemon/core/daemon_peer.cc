// giftd as one member of a multi-node job (DESIGN §4): the PeerHandler side
// of Daemon and what the poll cycle hands to the peer link. The leader alone
// decides plans (from the whole job's telemetry) and serves the job's
// rendezvous store; a layer's owner sums the nodes' sketch windows and
// broadcasts the factor, which every member installs with InstallFactor.
#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/core/request_limits.h"
#include "daemon/limits.h"
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

// Field-wise sum of two reports of one layer (steps: the max, like the
// ranks of one node).
void MergeSample(const v1::LayerSample& s, v1::LayerSample* to) {
  to->set_name(s.name());
  to->set_steps(std::max(to->steps(), s.steps()));
  to->set_n(to->n() + s.n());
  to->set_upper(to->upper() + s.upper());
  to->set_lower(to->lower() + s.lower());
  to->set_probes(to->probes() + s.probes());
  to->set_probe_euclid_sum(to->probe_euclid_sum() + s.probe_euclid_sum());
  to->set_probe_gift_sum(to->probe_gift_sum() + s.probe_gift_sum());
  to->set_err_sq(to->err_sq() + s.err_sq());
  to->set_x_sq(to->x_sq() + s.x_sq());
  to->set_xhat_x(to->xhat_x() + s.xhat_x());
  to->set_audits_gift(to->audits_gift() + s.audits_gift());
  to->set_audit_gift_rel_l2_sum(to->audit_gift_rel_l2_sum() +
                                s.audit_gift_rel_l2_sum());
  to->set_audits_euclid(to->audits_euclid() + s.audits_euclid());
  to->set_audit_euclid_rel_l2_sum(to->audit_euclid_rel_l2_sum() +
                                  s.audit_euclid_rel_l2_sum());
  to->set_beta_probes(to->beta_probes() + s.beta_probes());
  for (int b = 0; b < s.probe_beta_sum_size(); ++b) {
    while (to->probe_beta_sum_size() <= b) to->add_probe_beta_sum(0);
    to->set_probe_beta_sum(b, to->probe_beta_sum(b) + s.probe_beta_sum(b));
  }
}

}  // namespace

absl::Status Daemon::CheckPeerJob(const std::string& job_id) const {
  if (job_id == config_.job_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "this giftd serves job '%s', not '%s'", config_.job_id, Clip(job_id)));
}

// ---- start-up -------------------------------------------------------------

absl::Status Daemon::StartPeerLink(PeerLinkFactory factory) {
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
  {
    // A follower publishes epoch 0 (which ranks ignore) until the leader's
    // first plan: every epoch its ranks see is the leader's.
    absl::MutexLock lock(&mu_);
    job_id_ = c.job_id;
    planner_.set_epoch(0);
    // At 0 from the start, so that increase() over it has a series to read
    // (a peered daemon's labels never change: its job is the configured one).
    metrics_.peer_leader_changes->Add(Labels({}));
  }
  if (!factory) factory = PeerLink::Create;
  link_options_ = o;
  link_factory_ = factory;
  {
    absl::MutexLock coord(&coord_mu_);
    leader_address_ = o.leader_address;
  }
  if (coordinated_) return StartElection();  // it builds the link
  ASSIGN_OR_RETURN(link_owner_, factory(o, this));
  link_.store(link_owner_.get(), std::memory_order_release);
  absl::MutexLock lock(&mu_);
  if (link_owner_->is_leader()) planner_.RaiseEpoch(1);
  return absl::OkStatus();
}

std::string Daemon::PeerRole() const {
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

v1::PeerStatus Daemon::PeerStatusNow() const {
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

// ---- plans ----------------------------------------------------------------

v1::PeerPlan Daemon::PlanLocked() const {
  v1::PeerPlan p =
      planner_.BuildPlan(config_.job_id, world_size_, PlanLayers());
  if (PeerLink* link = this->link(); link != nullptr) {
    for (const v1::Member& m : link->members()) *p.add_members() = m;
  }
  p.set_leader_instance(instance_);
  p.set_term(term_.load());
  return p;
}

absl::Status Daemon::OnPlan(const v1::PeerPlan& plan) {
  RETURN_IF_ERROR(CheckPeerJob(plan.job_id()));
  PeerLink* link = this->link();
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  if (link != nullptr && link->is_leader() && !IsFollower()) {
    return absl::FailedPreconditionError("this giftd is the job's leader");
  }
  RETURN_IF_ERROR(CheckTerm(plan.term(), "plan"));
  // A late or repeated plan is ignored (a newer term's may repeat an epoch).
  if (!planner_.HoldLeaderPlan(plan)) return absl::OkStatus();
  if (link != nullptr) link->SetPlan(plan);
  planner_.ApplyPlan(plan, &world_size_, PlanLayers());
  absl::Status st = EnsureFullRegions();
  if (!st.ok()) LOG_ERROR("creating full-transform regions: %s", st.ToString());
  PublishPlanToAll();
  LOG_INFO("plan epoch %d from the leader", planner_.epoch());
  return absl::OkStatus();
}

void Daemon::OnMembersChanged() {
  absl::MutexLock lock(&mu_);
  if (stopped_ || IsFollower()) return;
  // The new member list changes the layers' owners: a new epoch tells
  // every member. (A joining member gets the newest factors with its Join
  // answer: NewestFactors.)
  NewEpoch("the job's daemons changed");
}

// ---- join -----------------------------------------------------------------

absl::StatusOr<v1::PeerPlan> Daemon::OnJoin(const v1::JoinRequest& r) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  if (r.layout_version() != shm::kLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("layout version %d, this giftd speaks %d",
                        r.layout_version(), shm::kLayoutVersion));
  }
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  if (IsFollower()) {
    return absl::FailedPreconditionError("this giftd is not the job's leader");
  }
  if (r.term() > term_.load()) {
    metrics_.peer_refused->Add(Labels({{"kind", "join"}})).Increment();
    return absl::FailedPreconditionError(absl::StrFormat(
        "this giftd leads term %d; %s has seen term %d: a newer leader exists",
        term_.load(), r.self().node(), r.term()));
  }
  if (!r.layers().empty()) {
    // As a rank's layer list.
    RETURN_IF_ERROR(CheckLayerShapes(r.layers(), config_.limits));
    if (layers_.empty()) {
      if (r.world_size() < 1 || r.world_size() > kMaxWorldSize) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a follower with layers needs a world size in [1, %d] (got %d)",
            kMaxWorldSize, r.world_size()));
      }
      RETURN_IF_ERROR(AdoptLayers(config_.job_id, r.world_size(), r.layers()));
      job_id_ = config_.job_id;
    } else {
      RETURN_IF_ERROR(CheckSameJob(r.world_size(), r.layers()));
    }
  }
  // The follower's plan is newer than anything here: this leader restarted
  // and rebuilds from it.
  if (r.has_plan() && !layers_.empty()) {
    absl::Status st =
        planner_.TakeOverFollowerPlan(r.plan(), &world_size_, PlanLayers());
    if (!st.ok()) {
      LOG_WARNING("resuming the follower's plan: %s", st.ToString());
    }
  }
  // Continue above the epochs and versions the follower's ranks hold.
  const int64_t held = std::max(r.plan_epoch(), r.plan().plan_epoch());
  for (const auto& [name, version] : r.factor_version()) {
    for (Layer& l : layers_) {
      if (l.name == name) l.factors.ContinueAbove(version);
    }
  }
  if (planner_.JoinerHolds(held)) {
    NewEpoch(
        absl::StrFormat("%s joined holding epoch %d", r.self().node(), held));
  }
  LOG_INFO("daemon %s (%s) joined job %s", r.self().node(), r.self().address(),
           config_.job_id);
  return PlanLocked();
}

v1::JoinRequest Daemon::JoinState() {
  absl::MutexLock lock(&mu_);
  v1::JoinRequest j;
  j.set_job_id(config_.job_id);
  j.set_layout_version(shm::kLayoutVersion);
  j.mutable_self()->set_node(config_.node);
  j.mutable_self()->set_instance(instance_);
  j.mutable_self()->set_address(config_.peer_advertise_address.empty()
                                    ? config_.peer_address
                                    : config_.peer_advertise_address);
  if (!layers_.empty()) {
    j.set_world_size(world_size_);
    for (const Layer& l : layers_) {
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
  j.set_plan_epoch(planner_.HeldEpoch());
  if (planner_.have_plan()) *j.mutable_plan() = planner_.last_plan();
  j.set_term(term_.load());
  return j;
}

// ---- telemetry ------------------------------------------------------------

void Daemon::SendTelemetryReport(const std::vector<SelectorSample>& samples,
                                 const std::vector<double>& err,
                                 const std::vector<double>& xsq,
                                 const std::vector<double>& xhx) {
  v1::ReportTelemetryRequest r;
  r.set_job_id(config_.job_id);
  r.mutable_self()->set_node(config_.node);
  r.mutable_self()->set_instance(instance_);
  r.set_plan_epoch(planner_.HeldEpoch());
  r.set_local_ranks(static_cast<int>(sessions_.size()));
  r.set_slowest_step(sessions_.SlowestStep());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const SelectorSample& s = samples[i];
    if (s.steps == 0 && s.n == 0 && s.probes == 0) continue;
    v1::LayerSample* x = r.add_layers();
    x->set_name(layers_[i].name);
    x->set_steps(s.steps);
    x->set_n(s.n);
    x->set_upper(s.upper);
    x->set_lower(s.lower);
    x->set_probes(s.probes);
    x->set_probe_euclid_sum(s.probe_euclid_sum);
    x->set_probe_gift_sum(s.probe_gift_sum);
    x->set_err_sq(err[i]);
    x->set_x_sq(xsq[i]);
    x->set_xhat_x(xhx[i]);
    x->set_audits_gift(s.audits_gift);
    x->set_audit_gift_rel_l2_sum(s.audit_gift_rel_l2_sum);
    x->set_audits_euclid(s.audits_euclid);
    x->set_audit_euclid_rel_l2_sum(s.audit_euclid_rel_l2_sum);
    if (s.beta_probes > 0) {
      x->set_beta_probes(s.beta_probes);
      *x->mutable_probe_beta_sum() = {s.probe_beta_sum.begin(),
                                      s.probe_beta_sum.end()};
    }
  }
  link()->SendTelemetry(std::move(r));  // also the follower's liveness
}

absl::Status Daemon::OnTelemetry(const v1::ReportTelemetryRequest& r) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  if (IsFollower()) {
    return absl::FailedPreconditionError("this giftd is not the job's leader");
  }
  for (const v1::LayerSample& s : r.layers()) {
    if (s.steps() < 0 || s.n() < 0 || s.upper() < 0 || s.lower() < 0 ||
        s.probes() < 0 || s.audits_gift() < 0 || s.audits_euclid() < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("negative counts for layer %s", s.name()));
    }
    for (double v : {s.audit_gift_rel_l2_sum(), s.audit_euclid_rel_l2_sum()}) {
      if (!std::isfinite(v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "audit sums of layer %s must be finite and >= 0", s.name()));
      }
    }
  }
  for (const v1::LayerSample& s : r.layers()) {
    if (!planner_.selector().HasLayer(s.name())) continue;  // not adopted yet
    MergeSample(s, &remote_samples_[s.name()]);
  }
  if (planner_.ReporterHolds(r.plan_epoch())) {
    // A follower's ranks hold an epoch of an earlier leader: go above it.
    NewEpoch(
        absl::StrFormat("%s holds epoch %d", r.self().node(), r.plan_epoch()));
  }
  return absl::OkStatus();
}

void Daemon::AddSample(const v1::LayerSample& s, SelectorSample* to,
                       double* err_sq, double* x_sq, double* xhat_x) {
  to->steps = std::max(to->steps, s.steps());
  to->n += s.n();
  to->upper += s.upper();
  to->lower += s.lower();
  to->probes += s.probes();
  to->probe_euclid_sum += s.probe_euclid_sum();
  to->probe_gift_sum += s.probe_gift_sum();
  *err_sq += s.err_sq();
  *x_sq += s.x_sq();
  *xhat_x += s.xhat_x();
  to->audits_gift += s.audits_gift();
  to->audit_gift_rel_l2_sum += s.audit_gift_rel_l2_sum();
  to->audits_euclid += s.audits_euclid();
  to->audit_euclid_rel_l2_sum += s.audit_euclid_rel_l2_sum();
  // β grid sums: only the grid's length (a follower's are checked by the
  // selector like a rank's).
  if (s.probe_beta_sum_size() == kBetaGrid) {
    to->beta_probes += s.beta_probes();
    for (int b = 0; b < kBetaGrid; ++b) {
      to->probe_beta_sum[b] += s.probe_beta_sum(b);
    }
  }
}

void Daemon::TakeRemoteSamples(std::vector<SelectorSample>* samples,
                               std::vector<double>* err,
                               std::vector<double>* xsq,
                               std::vector<double>* xhx) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto it = remote_samples_.find(layers_[i].name);
    if (it == remote_samples_.end()) continue;
    AddSample(it->second, &(*samples)[i], &(*err)[i], &(*xsq)[i], &(*xhx)[i]);
  }
  remote_samples_.clear();
}

// ---- control and store ----------------------------------------------------

absl::StatusOr<v1::ForwardControlResponse> Daemon::Forward(
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

absl::StatusOr<v1::ForwardControlResponse> Daemon::OnControl(
    const v1::ForwardControlRequest& r) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  if (IsFollower()) {
    return absl::FailedPreconditionError("this giftd is not the job's leader");
  }
  v1::ForwardControlResponse out;
  switch (r.request_case()) {
    case v1::ForwardControlRequest::kSetLayerPolicy: {
      ASSIGN_OR_RETURN(auto x, SetLayerPolicy(r.set_layer_policy()));
      *out.mutable_set_layer_policy() = std::move(x);
      break;
    }
    case v1::ForwardControlRequest::kSetRefreshInterval: {
      ASSIGN_OR_RETURN(auto x, SetRefreshInterval(r.set_refresh_interval()));
      *out.mutable_set_refresh_interval() = std::move(x);
      break;
    }
    case v1::ForwardControlRequest::kSetAuditInterval: {
      ASSIGN_OR_RETURN(auto x, SetAuditInterval(r.set_audit_interval()));
      *out.mutable_set_audit_interval() = std::move(x);
      break;
    }
    case v1::ForwardControlRequest::kSetRank: {
      ASSIGN_OR_RETURN(auto x, SetRank(r.set_rank()));
      *out.mutable_set_rank() = std::move(x);
      break;
    }
    case v1::ForwardControlRequest::kSetSelectionPolicy: {
      ASSIGN_OR_RETURN(auto x, SetSelectionPolicy(r.set_selection_policy()));
      *out.mutable_set_selection_policy() = std::move(x);
      break;
    }
    case v1::ForwardControlRequest::kTriggerRefresh: {
      ASSIGN_OR_RETURN(auto x, TriggerRefresh(r.trigger_refresh()));
      *out.mutable_trigger_refresh() = std::move(x);
      break;
    }
    default:
      return absl::InvalidArgumentError("empty forwarded Control request");
  }
  return out;
}

// The leader serves the job's store from its own KvStore: the same calls
// as its local ranks make (a follower would forward them, but the link
// sends these only to the leader).
absl::Status Daemon::OnStoreSet(const v1::StoreSetRequest& r) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  return StoreSet(r);
}

absl::StatusOr<v1::StoreGetResponse> Daemon::OnStoreGet(
    const v1::StoreGetRequest& r, absl::Duration max_wait) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  return StoreGet(r, max_wait);
}

absl::StatusOr<v1::StoreAddResponse> Daemon::OnStoreAdd(
    const v1::StoreAddRequest& r) {
  RETURN_IF_ERROR(CheckPeerJob(r.job_id()));
  return StoreAdd(r);
}

}  // namespace gift::daemon
