// A test double for DaemonCore (daemon/core/core.h): canned answers, a small
// in-memory store and counters of what reached it, so adapters (gRPC
// servers, giftctl) can be tested without the real daemon. Canned rules:
// Register fails FAILED_PRECONDITION unless layout_version == 1 and answers
// session "s<rank>"; Heartbeat answers plan_epoch = step + 1 (NOT_FOUND for
// an empty session); SetRefreshInterval rejects steps < 1 with
// INVALID_ARGUMENT; StoreGet waits min(timeout, max_wait) for the key
// (DEADLINE_EXCEEDED "key <k>"); GetStatus answers node "fake-node";
// Snapshot answers status.step = 1, 2, 3, ...
//
//   FakeCore core;
//   ASSIGN_OR_RETURN(auto server, GrpcServer::Start(options, &core));
//   EXPECT_EQ(core.control_calls(), 0);
//
// Thread safety: thread-safe.
#ifndef GIFT_DAEMON_GRPC_FAKE_CORE_H_
#define GIFT_DAEMON_GRPC_FAKE_CORE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"

namespace gift::daemon {

class FakeCore : public DaemonCore {
 public:
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) override {
    if (request.layout_version() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layout version ", request.layout_version(), " != daemon's 1"));
    }
    absl::MutexLock lock(&mu_);
    ++registered_;
    v1::RegisterResponse response;
    response.set_session_id(absl::StrCat("s", request.rank()));
    return response;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    if (request.session_id().empty()) {
      return absl::NotFoundError("unknown session ''");
    }
    v1::HeartbeatResponse response;
    response.set_plan_epoch(request.step() + 1);
    return response;
  }
  absl::Status Deregister(const v1::DeregisterRequest&) override {
    return absl::OkStatus();
  }
  absl::Status StoreSet(const v1::StoreSetRequest& request) override {
    absl::MutexLock lock(&mu_);
    store_[request.key()] = request.value();
    return absl::OkStatus();
  }
  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration max_wait) override {
    absl::MutexLock lock(&mu_);
    largest_max_wait_ = std::max(largest_max_wait_, max_wait);
    auto has_key = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return store_.count(request.key()) > 0;
    };
    mu_.AwaitWithTimeout(
        absl::Condition(&has_key),
        std::min(max_wait, absl::Milliseconds(request.timeout_ms())));
    if (!has_key()) {
      return absl::DeadlineExceededError("key " + request.key());
    }
    v1::StoreGetResponse response;
    response.set_value(store_[request.key()]);
    return response;
  }
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) override {
    v1::StoreAddResponse response;
    response.set_value(request.delta());
    return response;
  }
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const v1::GetStatusRequest&) override {
    absl::MutexLock lock(&mu_);
    ++control_calls_;
    v1::GetStatusResponse response;
    response.set_node("fake-node");
    response.set_ranks_registered(registered_);
    return response;
  }
  absl::StatusOr<v1::ListLayersResponse> ListLayers(
      const v1::ListLayersRequest&) override {
    return v1::ListLayersResponse();
  }
  absl::StatusOr<v1::SetLayerPolicyResponse> SetLayerPolicy(
      const v1::SetLayerPolicyRequest&) override {
    return v1::SetLayerPolicyResponse();
  }
  absl::StatusOr<v1::SetRefreshIntervalResponse> SetRefreshInterval(
      const v1::SetRefreshIntervalRequest& request) override {
    if (request.steps() < 1) {
      return absl::InvalidArgumentError("steps must be >= 1, got 0");
    }
    return v1::SetRefreshIntervalResponse();
  }
  absl::StatusOr<v1::SetAuditIntervalResponse> SetAuditInterval(
      const v1::SetAuditIntervalRequest& request) override {
    if (request.steps() < 0) {
      return absl::InvalidArgumentError("steps must be >= 0");
    }
    return v1::SetAuditIntervalResponse();
  }
  absl::StatusOr<v1::SetRankResponse> SetRank(
      const v1::SetRankRequest&) override {
    return v1::SetRankResponse();
  }
  absl::StatusOr<v1::SetSelectionPolicyResponse> SetSelectionPolicy(
      const v1::SetSelectionPolicyRequest&) override {
    return v1::SetSelectionPolicyResponse();
  }
  absl::StatusOr<v1::TriggerRefreshResponse> TriggerRefresh(
      const v1::TriggerRefreshRequest&) override {
    return v1::TriggerRefreshResponse();
  }
  absl::StatusOr<v1::TelemetryUpdate> Snapshot() override {
    absl::MutexLock lock(&mu_);
    v1::TelemetryUpdate update;
    update.mutable_status()->set_step(++snapshots_);
    return update;
  }

  int control_calls() {
    absl::MutexLock lock(&mu_);
    return control_calls_;
  }
  absl::Duration largest_max_wait() {
    absl::MutexLock lock(&mu_);
    return largest_max_wait_;
  }

 private:
  absl::Mutex mu_;
  int registered_ ABSL_GUARDED_BY(mu_) = 0;
  int control_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshots_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration largest_max_wait_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_GRPC_FAKE_CORE_H_
