// giftctl health: one grpc.health.v1.Health/Check call against giftd's
// Control address, for readiness and liveness checks (systemd's
// ExecStartPost, Kubernetes exec probes, the Slurm wrapper, the container's
// HEALTHCHECK). The Health protocol is called through a generic stub with
// hand-encoded messages, so no health .proto has to be compiled.
//
//   auto channel = MakeChannel(inv).value();
//   int code = RunHealth(inv, token, channel, std::cout, std::cerr);
//
// Exit status: kExitOk when the service is SERVING; kExitFailed otherwise
// (NOT_SERVING, an unknown service, unreachable, past --timeout).
//
// Thread safety: RunHealth may run concurrently on distinct streams.
#ifndef GIFT_TOOLS_GIFTCTL_HEALTH_H_
#define GIFT_TOOLS_GIFTCTL_HEALTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <ostream>
#include <string>

#include "tools/giftctl/cli.h"

namespace gift::giftctl {

// grpc.health.v1.HealthCheckResponse.ServingStatus by name, e.g. "SERVING";
// "STATUS_<n>" for a value the protocol does not define.
std::string ServingStatusName(int status);

// Checks inv.health_service ("" = the whole server) within
// inv.timeout_seconds. Prints the serving status (or {"status": ...} with
// --json) on `out`; a failed call as "giftctl: Health/Check: CODE: message"
// on `err`. `token` "" sends no authorization.
int RunHealth(const Invocation& inv, const std::string& token,
              const std::shared_ptr<grpc::ChannelInterface>& channel,
              std::ostream& out, std::ostream& err);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_HEALTH_H_
