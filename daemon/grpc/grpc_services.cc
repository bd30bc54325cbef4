#include "daemon/grpc/grpc_services.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace gift::daemon::internal {
namespace {

// Handlers that wait (StoreGet, WatchTelemetry) look at the drain signal and
// the client's cancellation at least this often; the sync API offers no
// cancellation callback, so this bounds how long a gone client holds a thread.
constexpr absl::Duration kPollSlice = absl::Milliseconds(100);

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status Draining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "giftd is shutting down");
}

}  // namespace

void DrainSignal::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

bool DrainSignal::notified() const {
  absl::MutexLock lock(&mu_);
  return notified_;
}

bool DrainSignal::WaitFor(absl::Duration timeout) const {
  bool notified = mu_.LockWhenWithTimeout(absl::Condition(&notified_), timeout);
  mu_.Unlock();
  return notified;
}

bool ConstantTimeEquals(absl::string_view provided,
                        absl::string_view expected) {
  unsigned char diff = provided.size() == expected.size() ? 0 : 1;
  // Always walk `expected`, reading `provided` cyclically, so the time does
  // not depend on where the first mismatch is or on provided's length.
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char p = provided.empty() ? 0 : provided[i % provided.size()];
    diff |= static_cast<unsigned char>(p ^ expected[i]);
  }
  return diff == 0;
}

// ---- Agent -----------------------------------------------------------------

grpc::Status AgentService::Register(grpc::ServerContext*,
                                    const v1::RegisterRequest* request,
                                    v1::RegisterResponse* response) {
  return Reply(core_->Register(*request), response);
}

grpc::Status AgentService::Heartbeat(grpc::ServerContext*,
                                     const v1::HeartbeatRequest* request,
                                     v1::HeartbeatResponse* response) {
  return Reply(core_->Heartbeat(*request), response);
}

grpc::Status AgentService::Deregister(grpc::ServerContext*,
                                      const v1::DeregisterRequest* request,
                                      v1::DeregisterResponse*) {
  return ToGrpcStatus(core_->Deregister(*request));
}

grpc::Status AgentService::StoreSet(grpc::ServerContext*,
                                    const v1::StoreSetRequest* request,
                                    v1::StoreSetResponse*) {
  return ToGrpcStatus(core_->StoreSet(*request));
}

// The core's wait is bounded in short slices rather than one 30 s call, so
// a draining server or a cancelled client frees the thread promptly; the
// total wait is still min(request timeout, kStoreGetMaxWait).
grpc::Status AgentService::StoreGet(grpc::ServerContext* context,
                                    const v1::StoreGetRequest* request,
                                    v1::StoreGetResponse* response) {
  const absl::Duration asked =
      absl::Milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  const absl::Time give_up = absl::Now() + std::min(asked, kStoreGetMaxWait);
  for (;;) {
    if (drain_->notified()) return Draining();
    const absl::Duration slice =
        std::clamp(give_up - absl::Now(), absl::ZeroDuration(), kPollSlice);
    absl::StatusOr<v1::StoreGetResponse> result =
        core_->StoreGet(*request, slice);
    const bool timed_out =
        result.status().code() == absl::StatusCode::kDeadlineExceeded;
    if (!timed_out || slice == absl::ZeroDuration() || absl::Now() >= give_up) {
      return Reply(std::move(result), response);
    }
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
  }
}

grpc::Status AgentService::StoreAdd(grpc::ServerContext*,
                                    const v1::StoreAddRequest* request,
                                    v1::StoreAddResponse* response) {
  return Reply(core_->StoreAdd(*request), response);
}

// ---- Control ---------------------------------------------------------------

grpc::Status ControlService::Authorize(
    const grpc::ServerContext& context) const {
  if (authorization_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end() &&
      ConstantTimeEquals(
          absl::string_view(it->second.data(), it->second.size()),
          authorization_)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or invalid bearer token");
}

#define GIFT_AUTHORIZE(context)                       \
  do {                                                \
    grpc::Status auth_status = Authorize(*(context)); \
    if (!auth_status.ok()) return auth_status;        \
  } while (0)

grpc::Status ControlService::GetStatus(grpc::ServerContext* context,
                                       const v1::GetStatusRequest* request,
                                       v1::GetStatusResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->GetStatus(*request), response);
}

grpc::Status ControlService::ListLayers(grpc::ServerContext* context,
                                        const v1::ListLayersRequest* request,
                                        v1::ListLayersResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->ListLayers(*request), response);
}

grpc::Status ControlService::SetLayerPolicy(
    grpc::ServerContext* context, const v1::SetLayerPolicyRequest* request,
    v1::SetLayerPolicyResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->SetLayerPolicy(*request), response);
}

grpc::Status ControlService::SetRefreshInterval(
    grpc::ServerContext* context, const v1::SetRefreshIntervalRequest* request,
    v1::SetRefreshIntervalResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->SetRefreshInterval(*request), response);
}

grpc::Status ControlService::SetAuditInterval(
    grpc::ServerContext* context, const v1::SetAuditIntervalRequest* request,
    v1::SetAuditIntervalResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->SetAuditInterval(*request), response);
}

grpc::Status ControlService::SetRank(grpc::ServerContext* context,
                                     const v1::SetRankRequest* request,
                                     v1::SetRankResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->SetRank(*request), response);
}

grpc::Status ControlService::SetSelectionPolicy(
    grpc::ServerContext* context, const v1::SetSelectionPolicyRequest* request,
    v1::SetSelectionPolicyResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->SetSelectionPolicy(*request), response);
}

grpc::Status ControlService::TriggerRefresh(
    grpc::ServerContext* context, const v1::TriggerRefreshRequest* request,
    v1::TriggerRefreshResponse* response) {
  GIFT_AUTHORIZE(context);
  return Reply(core_->TriggerRefresh(*request), response);
}

// Ends with UNAVAILABLE when the server drains (so a watcher can tell it from
// a normal end), CANCELLED when the client went away.
grpc::Status ControlService::WatchTelemetry(
    grpc::ServerContext* context, const v1::WatchTelemetryRequest* request,
    grpc::ServerWriter<v1::TelemetryUpdate>* writer) {
  GIFT_AUTHORIZE(context);
  int interval_ms = request->interval_ms();
  if (interval_ms == 0) interval_ms = kWatchDefaultIntervalMs;
  if (interval_ms < kWatchMinIntervalMs || interval_ms > kWatchMaxIntervalMs) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("interval_ms must be 0 (default ", kWatchDefaultIntervalMs,
                     ") or in [", kWatchMinIntervalMs, ", ",
                     kWatchMaxIntervalMs, "], got ", request->interval_ms()));
  }
  const grpc::Status cancelled(grpc::StatusCode::CANCELLED, "client cancelled");
  for (;;) {
    if (drain_->notified()) return Draining();
    if (context->IsCancelled()) return cancelled;
    absl::StatusOr<v1::TelemetryUpdate> update = core_->Snapshot();
    if (!update.ok()) return ToGrpcStatus(update.status());
    if (!writer->Write(*update)) return cancelled;
    const absl::Time next = absl::Now() + absl::Milliseconds(interval_ms);
    for (absl::Time now = absl::Now(); now < next; now = absl::Now()) {
      if (drain_->WaitFor(std::min(next - now, kPollSlice))) return Draining();
      if (context->IsCancelled()) return cancelled;
    }
  }
}

#undef GIFT_AUTHORIZE

}  // namespace gift::daemon::internal
