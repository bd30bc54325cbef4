// The Daemon façade as one member of a multi-node job (DESIGN §4): its
// start-up with peers and the PeerHandler calls, routed to PeerMessages,
// FactorPipeline, Telemetry and the rendezvous store under the daemon's
// mutex.
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/core/daemon.h"
#include "daemon/log.h"

namespace gift::daemon {

absl::Status Daemon::StartPeers(PeerLinkFactory factory) {
  RETURN_IF_ERROR(peers_.Prepare(std::move(factory)));
  {
    // A follower publishes epoch 0 (which ranks ignore) until the leader's
    // first plan: every epoch its ranks see is the leader's.
    absl::MutexLock lock(&mu_);
    layout_.set_job_id(config_.job_id);
    planner_.set_epoch(0);
    // At 0 from the start, so that increase() over it has a series to read
    // (a peered daemon's labels never change: its job is the configured one).
    metrics_.peer_leader_changes->Add(layout_.Labels({}));
  }
  PeerCoordinator::Hooks hooks;
  hooks.on_new_link = [this](const coord::ElectionState& s) {
    mu_.AssertHeld();
    messages_.NewLink(s);
  };
  hooks.on_leads_again = [this](int64_t term) {
    mu_.AssertHeld();
    messages_.LeadsAgain(term);
  };
  RETURN_IF_ERROR(peers_.Connect(this, std::move(hooks)));
  if (peers_.coordinated()) return absl::OkStatus();  // the election's link
  absl::MutexLock lock(&mu_);
  if (peers_.link()->is_leader()) planner_.RaiseEpoch(1);
  return absl::OkStatus();
}

absl::StatusOr<v1::PeerPlan> Daemon::OnJoin(const v1::JoinRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  RETURN_IF_ERROR(CheckJoinLayout(r));
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  return messages_.Join(r);
}

v1::JoinRequest Daemon::JoinState() {
  absl::MutexLock lock(&mu_);
  return messages_.JoinState();
}

absl::Status Daemon::OnPlan(const v1::PeerPlan& plan) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(plan.job_id()));
  PeerLink* link = peers_.link();
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  return messages_.Plan(plan, link);
}

void Daemon::OnMembersChanged() {
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return;
  messages_.MembersChanged();
}

absl::Status Daemon::OnTelemetry(const v1::ReportTelemetryRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  return messages_.Report(r);
}

absl::Status Daemon::OnSketch(const v1::PushSketchRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  return factors_.AcceptSketch(r);
}

absl::Status Daemon::OnFactor(const v1::PublishFactorRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  absl::MutexLock lock(&mu_);
  ++peer_messages_;
  if (stopped_) return absl::UnavailableError("giftd is stopping");
  RETURN_IF_ERROR(messages_.CheckTerm(r.term(), "factor"));
  return factors_.AcceptFactor(r);
}

std::vector<v1::PublishFactorRequest> Daemon::NewestFactors() {
  absl::MutexLock lock(&mu_);
  return factors_.NewestFactors();
}

absl::StatusOr<v1::ForwardControlResponse> Daemon::OnControl(
    const v1::ForwardControlRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  if (peers_.IsFollower()) {
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
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  return StoreSet(r);
}

absl::StatusOr<v1::StoreGetResponse> Daemon::OnStoreGet(
    const v1::StoreGetRequest& r, absl::Duration max_wait) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  return StoreGet(r, max_wait);
}

absl::StatusOr<v1::StoreAddResponse> Daemon::OnStoreAdd(
    const v1::StoreAddRequest& r) {
  RETURN_IF_ERROR(peers_.CheckPeerJob(r.job_id()));
  return StoreAdd(r);
}

}  // namespace gift::daemon
