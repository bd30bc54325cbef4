// PeerLinkImpl's membership (peer_link_impl.h). The leader admits members
// on Join, refreshes them on ReportTelemetry and drops the silent ones; a
// follower joins, adopts the leader's plans and re-joins when it learns
// that the leader restarted or lost it.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/log.h"
#include "daemon/peer/peer_link_impl.h"
#include "shm/layout.h"

namespace gift::daemon::internal {
namespace {

bool SameMember(const v1::Member& a, const v1::Member& b) {
  return a.node() == b.node() && a.address() == b.address() &&
         a.instance() == b.instance();
}

bool SameList(const std::vector<v1::Member>& a,
              const std::vector<v1::Member>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameMember);
}

// How often the leader looks for silent members.
absl::Duration ReaperTick(absl::Duration member_timeout) {
  return std::clamp(member_timeout / 4, absl::Milliseconds(5),
                    absl::Seconds(1));
}

}  // namespace

// ---- leader

bool PeerLinkImpl::AdmitLocked(const v1::Member& m) {
  // A restarted follower keeps its place (its node or address), so the
  // owners of the other layers do not move.
  auto same_place = [&m](const v1::Member& x) {
    return x.node() == m.node() || x.address() == m.address();
  };
  auto first = std::find_if(members_.begin() + 1, members_.end(), same_place);
  if (first == members_.end()) {
    members_.push_back(m);
    last_seen_.push_back(absl::Now());
    return true;
  }
  size_t index = static_cast<size_t>(first - members_.begin());
  bool changed = !SameMember(*first, m);
  members_[index] = m;
  last_seen_[index] = absl::Now();
  for (size_t i = members_.size() - 1; i > index; --i) {
    if (!same_place(members_[i])) continue;
    members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
    last_seen_.erase(last_seen_.begin() + static_cast<std::ptrdiff_t>(i));
    changed = true;
  }
  return changed;
}

void PeerLinkImpl::CompletePlanLocked(v1::PeerPlan& plan) {
  if (plan.job_id().empty()) plan.set_job_id(options_.job_id);
  plan.clear_members();
  for (const v1::Member& m : members_) *plan.add_members() = m;
  if (plan.layers_size() > 0) {
    window_owners_.Assign(plan);
    owners_ = OwnersOf(plan);
  }
  plan.set_leader_instance(self_.instance());
}

absl::StatusOr<v1::JoinResponse> PeerLinkImpl::Join(const v1::JoinRequest& r) {
  const v1::Member& m = r.self();
  if (m.node().empty() || m.address().empty() || m.instance().empty()) {
    return absl::InvalidArgumentError(
        "Join: self needs a node, an address and an instance");
  }
  if (m.node() == self_.node() || m.address() == self_.address() ||
      m.instance() == self_.instance()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: ", m.node(), " at ", m.address(), " is the leader itself"));
  }
  std::vector<v1::Member> before;
  bool changed;
  {
    absl::MutexLock lock(&mu_);
    before = members_;
    changed = AdmitLocked(m);
  }
  absl::StatusOr<v1::PeerPlan> plan = handler_->OnJoin(r);
  std::vector<v1::PublishFactorRequest> factors;
  if (plan.ok()) factors = handler_->NewestFactors();
  v1::JoinResponse response;
  {
    absl::MutexLock lock(&mu_);
    if (!plan.ok()) {
      // Not admitted after all: the member is taken out again.
      for (size_t i = 1; i < members_.size(); ++i) {
        if (!SameMember(members_[i], m)) continue;
        members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
        last_seen_.erase(last_seen_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      changed = !SameList(before, members_);
    } else {
      ++joins_;
      *response.mutable_plan() = *std::move(plan);
      for (v1::PublishFactorRequest& f : factors) {
        *response.add_factors() = std::move(f);
      }
      CompletePlanLocked(*response.mutable_plan());
      plan_epoch_ = std::max(plan_epoch_, response.plan().plan_epoch());
    }
  }
  if (changed) handler_->OnMembersChanged();
  if (!plan.ok()) return plan.status();
  return response;
}

absl::StatusOr<v1::ReportTelemetryResponse> PeerLinkImpl::Telemetry(
    const v1::ReportTelemetryRequest& r) {
  v1::ReportTelemetryResponse response;
  {
    absl::MutexLock lock(&mu_);
    size_t i = 1;
    while (i < members_.size() && !SameMember(members_[i], r.self())) ++i;
    if (i == members_.size()) {
      // After a leader restart, or after the member was dropped: the
      // follower re-joins on this answer.
      return absl::NotFoundError(
          absl::StrCat("ReportTelemetry: ", r.self().node(), " (instance ",
                       r.self().instance(), ") is not a member; join first"));
    }
    last_seen_[i] = absl::Now();
    response.set_leader_instance(self_.instance());
    response.set_plan_epoch(plan_epoch_);
  }
  RETURN_IF_ERROR(handler_->OnTelemetry(r));
  return response;
}

void PeerLinkImpl::ReaperLoop() {
  const absl::Duration tick = ReaperTick(options_.member_timeout);
  while (!StoppedWithin(tick)) {
    bool dropped = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time cutoff = absl::Now() - options_.member_timeout;
      for (size_t i = members_.size() - 1; i >= 1; --i) {
        if (last_seen_[i] >= cutoff) continue;
        members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
        last_seen_.erase(last_seen_.begin() + static_cast<std::ptrdiff_t>(i));
        dropped = true;
      }
    }
    if (dropped) handler_->OnMembersChanged();
  }
}

bool PeerLinkImpl::StoppedWithin(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return stopping_;
}

// ---- follower

bool PeerLinkImpl::AdoptPlanLocked(const v1::PeerPlan& plan) {
  bool new_leader = !plan.leader_instance().empty() &&
                    plan.leader_instance() != leader_instance_;
  if (!new_leader && plan.plan_epoch() < plan_epoch_) return false;
  plan_epoch_ = plan.plan_epoch();
  if (new_leader) leader_instance_ = plan.leader_instance();
  if (plan.members_size() > 0) {
    members_.assign(plan.members().begin(), plan.members().end());
  }
  if (plan.layers_size() > 0) owners_ = OwnersOf(plan);
  // Kept for the day this daemon is elected: its plans then keep the owners.
  window_owners_.Adopt(plan);
  return true;
}

void PeerLinkImpl::SetPlan(const v1::PeerPlan& plan) {
  if (leader_) return;  // the leader's view is its own
  absl::MutexLock lock(&mu_);
  AdoptPlanLocked(plan);
}

absl::Status PeerLinkImpl::Plan(const v1::PeerPlan& plan) {
  RETURN_IF_ERROR(handler_->OnPlan(plan));
  SetPlan(plan);
  return absl::OkStatus();
}

absl::Status PeerLinkImpl::TryJoin() {
  v1::JoinRequest request = handler_->JoinState();
  request.set_job_id(options_.job_id);
  request.set_layout_version(shm::kLayoutVersion);
  *request.mutable_self() = self_;
  v1::JoinResponse reply;
  absl::Status s = Call(leader_address_, "join", &v1::Peer::Stub::Join, request,
                        &reply, options_.rpc_timeout);
  if (!s.ok()) {
    counters_.Failure();
    // Once per distinct failure: a leader that stays down or keeps refusing
    // this daemon (wrong job id or token) is one line, not one per retry.
    const std::string why = s.ToString();
    if (why != last_join_error_) {
      last_join_error_ = why;
      LOG_WARNING("peer: join %s of job '%s' failed: %s; retrying every %s",
                  leader_address_, options_.job_id, why,
                  absl::FormatDuration(options_.retry_interval));
    }
    return s;
  }
  if (!last_join_error_.empty()) last_join_error_.clear();
  RETURN_IF_ERROR(handler_->OnPlan(reply.plan()));
  for (const v1::PublishFactorRequest& f : reply.factors()) {
    absl::Status st = handler_->OnFactor(f);
    if (!st.ok()) {
      LOG_WARNING("peer: factor of %s from the join: %s", f.factor().layer(),
                  st.ToString());
    }
  }
  absl::MutexLock lock(&mu_);
  AdoptPlanLocked(reply.plan());
  connected_ = true;
  last_leader_ok_ = absl::Now();
  behind_since_ = absl::InfiniteFuture();  // the join brought the plan
  ++joins_;
  LOG_INFO("peer: joined %s (leader instance %s), plan epoch %d",
           leader_address_, leader_instance_, plan_epoch_);
  return absl::OkStatus();
}

void PeerLinkImpl::FollowerLoop() {
  auto stopping_or_detached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !connected_;
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&stopping_or_detached));
      if (stopping_) return;
    }
    if (TryJoin().ok()) continue;
    if (StoppedWithin(options_.retry_interval)) return;
  }
}

void PeerLinkImpl::NoteTelemetryReply(const absl::Status& s,
                                      const v1::ReportTelemetryResponse& reply,
                                      int64_t joins) {
  absl::MutexLock lock(&mu_);
  // Sent before this daemon's last join: a NOT_FOUND or an old instance in
  // it would detach a follower that has just joined, for a second join.
  if (joins != joins_) return;
  const absl::Time now = absl::Now();
  if (s.ok() && reply.leader_instance() == leader_instance_) {
    last_leader_ok_ = now;
    // A plan broadcast can be lost (a send that timed out while this
    // daemon restarted); the leader's epoch in the reply tells. Still
    // behind after a retry interval (not just in flight): join again, which
    // answers with the current plan and changes no membership.
    if (reply.plan_epoch() <= plan_epoch_) {
      behind_since_ = absl::InfiniteFuture();
    } else if (behind_since_ == absl::InfiniteFuture()) {
      behind_since_ = now;
    } else if (now - behind_since_ > options_.retry_interval) {
      behind_since_ = absl::InfiniteFuture();
      connected_ = false;
    }
    return;
  }
  // NOT_FOUND: the leader does not know us (it restarted or dropped us);
  // another instance: the leader restarted. Either way, join again.
  bool lost = absl::IsNotFound(s) || s.ok() ||
              now - last_leader_ok_ > options_.member_timeout;
  if (lost) connected_ = false;
}

}  // namespace gift::daemon::internal
