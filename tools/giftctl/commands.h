// giftctl's commands: one Control call each (watch: one stream), printed as
// tables or JSON. The stub is an interface so tests can run commands
// against an in-process fake server.
//
//   ASSIGN_OR_RETURN(auto channel, MakeChannel(inv));
//   auto stub = gift::v1::Control::NewStub(channel);
//   int code = RunCommand(inv, token, *stub, std::cout, std::cerr);
//
// Thread safety: RunCommand may run concurrently on distinct streams; a
// `watch` started by the binary stops on SIGINT/SIGTERM only when those are
// blocked in every thread first (BlockStopSignals, before any gRPC call).
#ifndef GIFT_TOOLS_GIFTCTL_COMMANDS_H_
#define GIFT_TOOLS_GIFTCTL_COMMANDS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "gift/v1/control.grpc.pb.h"
#include "tools/giftctl/cli.h"

namespace gift::giftctl {

// Exit statuses.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// The token in `path` with trailing whitespace trimmed; "" for no path.
// INVALID_ARGUMENT when unreadable or empty.
absl::StatusOr<std::string> ReadToken(const std::string& path);

// Plaintext, or TLS trusting --tls-ca. INVALID_ARGUMENT when the CA file is
// unreadable.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const Invocation& inv);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it
// starts later, so `watch` can take them with sigtimedwait and end cleanly.
void BlockStopSignals();

// Runs the command (any but kHealth, see health.h): output on `out`, "giftctl:
// RPC: CODE: message" on `err`. Returns kExitOk or kExitFailed. `token` ""
// sends no authorization.
int RunCommand(const Invocation& inv, const std::string& token,
               gift::v1::Control::StubInterface& stub, std::ostream& out,
               std::ostream& err);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_COMMANDS_H_
