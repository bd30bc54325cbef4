// The service logic of giftd as a plain C++ interface (no gRPC types: the
// request and response messages are the gift.v1 protobufs, which are plain
// data). daemon/grpc/grpc_server.h adapts it to the Agent and Control services;
// tests can drive it directly.
//
// Every method validates its request and returns INVALID_ARGUMENT (with a
// message, state unchanged) for bad input; NOT_FOUND for an unknown
// session; FAILED_PRECONDITION for a request that conflicts with the state
// (another job on this node, a shared-memory layout version mismatch).
//
// Thread safety: implementations are thread-safe; the gRPC threads call in
// concurrently.
#ifndef GIFT_DAEMON_CORE_CORE_H_
#define GIFT_DAEMON_CORE_CORE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gift/v1/agent.pb.h"
#include "gift/v1/control.pb.h"

namespace gift::daemon {

class DaemonCore {
 public:
  virtual ~DaemonCore() = default;

  // ---- Agent (local ranks)
  virtual absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  virtual absl::Status Deregister(const v1::DeregisterRequest& request) = 0;
  virtual absl::Status StoreSet(const v1::StoreSetRequest& request) = 0;
  // Waits up to the request's timeout (bounded by `max_wait`, so a server
  // shutting down is not held up): DEADLINE_EXCEEDED naming the key.
  virtual absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration max_wait) = 0;
  virtual absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) = 0;

  // ---- Control (operators)
  virtual absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const v1::GetStatusRequest& request) = 0;
  virtual absl::StatusOr<v1::ListLayersResponse> ListLayers(
      const v1::ListLayersRequest& request) = 0;
  virtual absl::StatusOr<v1::SetLayerPolicyResponse> SetLayerPolicy(
      const v1::SetLayerPolicyRequest& request) = 0;
  virtual absl::StatusOr<v1::SetRefreshIntervalResponse> SetRefreshInterval(
      const v1::SetRefreshIntervalRequest& request) = 0;
  virtual absl::StatusOr<v1::SetAuditIntervalResponse> SetAuditInterval(
      const v1::SetAuditIntervalRequest& request) = 0;
  virtual absl::StatusOr<v1::SetRankResponse> SetRank(
      const v1::SetRankRequest& request) = 0;
  virtual absl::StatusOr<v1::SetSelectionPolicyResponse> SetSelectionPolicy(
      const v1::SetSelectionPolicyRequest& request) = 0;
  virtual absl::StatusOr<v1::TriggerRefreshResponse> TriggerRefresh(
      const v1::TriggerRefreshRequest& request) = 0;
  // One WatchTelemetry update (status and every layer) as of now.
  virtual absl::StatusOr<v1::TelemetryUpdate> Snapshot() = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_CORE_H_
