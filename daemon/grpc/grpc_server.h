// giftd's gRPC servers around a DaemonCore (DESIGN §6):
//  * Agent on a unix socket (`unix:/path`), created owner-only (the
//    directory 0700 if giftd creates it, the socket 0600);
//  * Control on TCP. Bound to loopback (localhost, 127.0.0.0/8 or ::1:
//    net::IsLoopbackHost) it needs no credentials. Bound anywhere else it
//    requires a bearer token (read from a file, never from the command
//    line: "authorization: Bearer <token>" metadata, compared in constant
//    time; UNAUTHENTICATED otherwise) and, when cert and key files are
//    given, serves TLS;
//  * both with the standard health service (grpc.health.v1, "" and each
//    service name SERVING while up, NOT_SERVING while draining) and server
//    reflection.
// WatchTelemetry streams DaemonCore::Snapshot() every interval until the
// client cancels or the server shuts down.
//
//   ASSIGN_OR_RETURN(auto server, GrpcServer::Start(options, &core));
//   ... SIGTERM ...
//   server->Shutdown(absl::Seconds(5));
//
// Thread safety: Start/Shutdown from one thread; the core is called from
// gRPC's threads.
#ifndef GIFT_DAEMON_GRPC_GRPC_SERVER_H_
#define GIFT_DAEMON_GRPC_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "daemon/grpc/grpc_metrics.h"

namespace gift::daemon {

struct GrpcServerOptions {
  std::string agent_socket;     // path (no "unix:" prefix); REQUIRES: set
  std::string control_address;  // host:port (port 0 = any)
  std::string control_token_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Request counters and durations of both servers; null: none.
  GrpcMetrics* metrics = nullptr;
};

// UNAVAILABLE "agent_socket P is in use by a running process" when a process
// accepts connections on the unix socket at `path` (another giftd); OK when
// there is nothing there or a stale socket (Start replaces it). giftd checks
// this before it touches any shared memory.
absl::Status CheckAgentSocket(const std::string& path);

class GrpcServer {
 public:
  // INVALID_ARGUMENT when Control is bound off loopback without a token
  // file, for an unreadable/empty token or TLS file, or only one of cert and
  // key; UNAVAILABLE when a listener cannot bind. A stale socket file at
  // agent_socket is replaced. REQUIRES: core outlives the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const GrpcServerOptions& options, DaemonCore* core);
  virtual ~GrpcServer() = default;

  // The Control port actually bound.
  virtual int control_port() const = 0;
  // Health NOT_SERVING, ends watch streams, waits for in-flight calls up to
  // `deadline`, then cancels the rest. Removes the socket file. Idempotent.
  virtual void Shutdown(absl::Duration deadline) = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_GRPC_GRPC_SERVER_H_
