// PeerService (peer_link_internal.h): the Peer gRPC service in front of the
// link and the daemon. Every call is admitted in the same order: token
// (UNAUTHENTICATED), job id (PERMISSION_DENIED), then the call's own
// preconditions; only an admitted call reaches the handler.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/grpc_status.h"
#include "daemon/grpc/grpc_services.h"
#include "daemon/peer/peer_link_internal.h"
#include "shm/layout.h"

namespace gift::daemon::internal {
namespace {

constexpr char kJoin[] = "join";
constexpr char kTelemetry[] = "telemetry";
constexpr char kPlan[] = "plan";
constexpr char kSketch[] = "sketch";
constexpr char kFactor[] = "factor";
constexpr char kControl[] = "control";
constexpr char kStore[] = "store";

// How long a StoreGet may wait in the handler: what the caller asked for,
// within the server's cap and the call's deadline.
absl::Duration StoreWait(const grpc::ServerContext& context,
                         int64_t timeout_ms) {
  absl::Duration wait = std::min(
      absl::Milliseconds(std::max<int64_t>(timeout_ms, 0)), kStoreGetMaxWait);
  absl::Duration left = absl::FromChrono(context.deadline()) - absl::Now();
  return std::max(absl::ZeroDuration(), std::min(wait, left));
}

}  // namespace

PeerService::PeerService(const PeerLinkOptions& options, PeerHandler* handler,
                         PeerServerBackend* backend, PeerCounters* counters)
    : authorization_(absl::StrCat("Bearer ", options.token)),
      job_id_(options.job_id),
      handler_(handler),
      backend_(backend),
      counters_(counters) {}

grpc::Status PeerService::Admit(const grpc::ServerContext& context,
                                const std::string& job_id,
                                const google::protobuf::Message& request,
                                const char* kind) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end() ||
      !ConstantTimeEquals(
          absl::string_view(it->second.data(), it->second.size()),
          authorization_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or invalid job token");
  }
  if (job_id != job_id_) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("this daemon serves job '", job_id_,
                                     "', not '", job_id, "'"));
  }
  counters_->Received(kind, static_cast<int64_t>(request.ByteSizeLong()));
  return grpc::Status::OK;
}

grpc::Status PeerService::LeaderOnly() const {
  if (backend_->is_leader()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon is not the job's leader");
}

template <typename T>
grpc::Status PeerService::Reply(absl::StatusOr<T> result, T* response,
                                const char* kind) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  counters_->Sent(kind, static_cast<int64_t>(response->ByteSizeLong()));
  return grpc::Status::OK;
}

// Admission in order; returns from the handler on the first refusal.
#define GIFT_PEER_ADMIT(job_id, kind)                                  \
  do {                                                                 \
    grpc::Status admit_status = Admit(*context, (job_id), *r, (kind)); \
    if (!admit_status.ok()) return admit_status;                       \
  } while (0)
#define GIFT_PEER_LEADER_ONLY()                    \
  do {                                             \
    grpc::Status leader_status = LeaderOnly();     \
    if (!leader_status.ok()) return leader_status; \
  } while (0)

grpc::Status PeerService::Join(grpc::ServerContext* context,
                               const v1::JoinRequest* r,
                               v1::JoinResponse* response) {
  GIFT_PEER_ADMIT(r->job_id(), kJoin);
  GIFT_PEER_LEADER_ONLY();
  if (r->layout_version() != shm::kLayoutVersion) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("shared-memory layout version ", r->layout_version(),
                     " differs from the leader's ", shm::kLayoutVersion));
  }
  return Reply(backend_->Join(*r), response, kJoin);
}

grpc::Status PeerService::ReportTelemetry(
    grpc::ServerContext* context, const v1::ReportTelemetryRequest* r,
    v1::ReportTelemetryResponse* response) {
  GIFT_PEER_ADMIT(r->job_id(), kTelemetry);
  GIFT_PEER_LEADER_ONLY();
  return Reply(backend_->Telemetry(*r), response, kTelemetry);
}

grpc::Status PeerService::PublishPlan(grpc::ServerContext* context,
                                      const v1::PublishPlanRequest* r,
                                      v1::PublishPlanResponse*) {
  GIFT_PEER_ADMIT(r->plan().job_id(), kPlan);
  if (backend_->is_leader()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the leader does not take plans from peers");
  }
  return ToGrpcStatus(backend_->Plan(r->plan()));
}

grpc::Status PeerService::PushSketch(grpc::ServerContext* context,
                                     const v1::PushSketchRequest* r,
                                     v1::PushSketchResponse*) {
  GIFT_PEER_ADMIT(r->job_id(), kSketch);
  return ToGrpcStatus(handler_->OnSketch(*r));
}

grpc::Status PeerService::PublishFactor(grpc::ServerContext* context,
                                        const v1::PublishFactorRequest* r,
                                        v1::PublishFactorResponse*) {
  GIFT_PEER_ADMIT(r->job_id(), kFactor);
  return ToGrpcStatus(handler_->OnFactor(*r));
}

grpc::Status PeerService::ForwardControl(grpc::ServerContext* context,
                                         const v1::ForwardControlRequest* r,
                                         v1::ForwardControlResponse* response) {
  GIFT_PEER_ADMIT(r->job_id(), kControl);
  GIFT_PEER_LEADER_ONLY();
  return Reply(handler_->OnControl(*r), response, kControl);
}

grpc::Status PeerService::StoreSet(grpc::ServerContext* context,
                                   const v1::StoreSetRequest* r,
                                   v1::StoreSetResponse*) {
  GIFT_PEER_ADMIT(r->job_id(), kStore);
  GIFT_PEER_LEADER_ONLY();
  return ToGrpcStatus(handler_->OnStoreSet(*r));
}

grpc::Status PeerService::StoreGet(grpc::ServerContext* context,
                                   const v1::StoreGetRequest* r,
                                   v1::StoreGetResponse* response) {
  GIFT_PEER_ADMIT(r->job_id(), kStore);
  GIFT_PEER_LEADER_ONLY();
  return Reply(handler_->OnStoreGet(*r, StoreWait(*context, r->timeout_ms())),
               response, kStore);
}

grpc::Status PeerService::StoreAdd(grpc::ServerContext* context,
                                   const v1::StoreAddRequest* r,
                                   v1::StoreAddResponse* response) {
  GIFT_PEER_ADMIT(r->job_id(), kStore);
  GIFT_PEER_LEADER_ONLY();
  return Reply(handler_->OnStoreAdd(*r), response, kStore);
}

#undef GIFT_PEER_LEADER_ONLY
#undef GIFT_PEER_ADMIT

}  // namespace gift::daemon::internal
