// Internal to gift_grpc_server (daemon/grpc/grpc_server.h): the thin adapters
// that map the gift.v1 Agent and Control services onto a DaemonCore. Each
// handler calls one core method, copies the response and converts the status
// with gift::ToGrpcStatus (the only conversion). Control handlers first check
// the bearer token when one is configured.
//
//   DrainSignal drain;
//   AgentService agent(&core, &drain);
//   ControlService control(&core, &drain, token);  // token "" = no auth
//   builder.RegisterService(&agent);
//   ...
//   drain.Notify();  // wakes WatchTelemetry / StoreGet waits at shutdown
//
// Thread safety: all classes are thread-safe; gRPC calls the handlers from
// its own threads concurrently.
#ifndef GIFT_DAEMON_GRPC_GRPC_SERVICES_H_
#define GIFT_DAEMON_GRPC_GRPC_SERVICES_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "gift/v1/agent.grpc.pb.h"
#include "gift/v1/control.grpc.pb.h"

namespace gift::daemon::internal {

// Longest a single StoreGet may hold a server thread (DaemonCore::StoreGet's
// max_wait), whatever timeout the client asked for.
inline constexpr absl::Duration kStoreGetMaxWait = absl::Seconds(30);

// WatchTelemetry interval bounds (ms): 0 selects the default.
inline constexpr int kWatchDefaultIntervalMs = 1000;
inline constexpr int kWatchMinIntervalMs = 50;
inline constexpr int kWatchMaxIntervalMs = 60000;

// Set once when the server starts draining. Long waits in handlers sleep on
// it, so shutdown wakes them at once instead of after their timeout.
class DrainSignal {
 public:
  void Notify();
  bool notified() const;
  // Blocks up to `timeout`; true when the signal is (or becomes) set.
  bool WaitFor(absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

// Compares in time that depends only on `expected`'s length, so a remote
// caller cannot learn the token byte by byte.
bool ConstantTimeEquals(absl::string_view provided, absl::string_view expected);

class AgentService final : public v1::Agent::Service {
 public:
  // REQUIRES: core and drain outlive the service.
  AgentService(DaemonCore* core, const DrainSignal* drain)
      : core_(core), drain_(drain) {}

  grpc::Status Register(grpc::ServerContext* context,
                        const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context,
                          const v1::DeregisterRequest* request,
                          v1::DeregisterResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext* context,
                        const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context,
                        const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override;
  grpc::Status StoreAdd(grpc::ServerContext* context,
                        const v1::StoreAddRequest* request,
                        v1::StoreAddResponse* response) override;

 private:
  DaemonCore* const core_;
  const DrainSignal* const drain_;
};

class ControlService final : public v1::Control::Service {
 public:
  // `token` empty: no authentication (loopback without a token file).
  // REQUIRES: core and drain outlive the service.
  ControlService(DaemonCore* core, const DrainSignal* drain,
                 const std::string& token)
      : core_(core),
        drain_(drain),
        authorization_(token.empty() ? "" : "Bearer " + token) {}

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  grpc::Status ListLayers(grpc::ServerContext* context,
                          const v1::ListLayersRequest* request,
                          v1::ListLayersResponse* response) override;
  grpc::Status SetLayerPolicy(grpc::ServerContext* context,
                              const v1::SetLayerPolicyRequest* request,
                              v1::SetLayerPolicyResponse* response) override;
  grpc::Status SetRefreshInterval(
      grpc::ServerContext* context,
      const v1::SetRefreshIntervalRequest* request,
      v1::SetRefreshIntervalResponse* response) override;
  grpc::Status SetAuditInterval(
      grpc::ServerContext* context, const v1::SetAuditIntervalRequest* request,
      v1::SetAuditIntervalResponse* response) override;
  grpc::Status SetRank(grpc::ServerContext* context,
                       const v1::SetRankRequest* request,
                       v1::SetRankResponse* response) override;
  grpc::Status SetSelectionPolicy(
      grpc::ServerContext* context,
      const v1::SetSelectionPolicyRequest* request,
      v1::SetSelectionPolicyResponse* response) override;
  grpc::Status TriggerRefresh(grpc::ServerContext* context,
                              const v1::TriggerRefreshRequest* request,
                              v1::TriggerRefreshResponse* response) override;
  grpc::Status WatchTelemetry(
      grpc::ServerContext* context, const v1::WatchTelemetryRequest* request,
      grpc::ServerWriter<v1::TelemetryUpdate>* writer) override;

 private:
  // OK when no token is configured or the call carries
  // "authorization: Bearer <token>"; UNAUTHENTICATED otherwise.
  grpc::Status Authorize(const grpc::ServerContext& context) const;

  DaemonCore* const core_;
  const DrainSignal* const drain_;
  // The expected "authorization" metadata value; empty = no check.
  const std::string authorization_;
};

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_GRPC_GRPC_SERVICES_H_
