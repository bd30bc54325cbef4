// giftctl's command line: global options, the command and its arguments,
// parsed into the Control request to send. Pure (no gRPC calls), so the
// whole grammar is unit-tested.
//
//   absl::StatusOr<Invocation> inv =
//       ParseCommandLine({"--json", "layer", "fc2", "--rank", "16"}, "");
//   if (!inv.ok()) { std::cerr << inv.status().message() << kUsage; exit(2); }
//
// Global options may stand before or after the command; the command's own
// options after it. Both `--opt=value` and `--opt value` are accepted.
//
// Thread safety: plain data and pure functions.
#ifndef GIFT_TOOLS_GIFTCTL_CLI_H_
#define GIFT_TOOLS_GIFTCTL_CLI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gift/v1/control.pb.h"

namespace gift::giftctl {

// The one-line usage printed with every usage error.
extern const char kUsageLine[];
// Full --help text.
extern const char kUsage[];

enum class Command {
  kStatus,
  kLayers,
  kSetInterval,
  kSetAuditInterval,
  kSetRank,
  kSetLayerPolicy,  // pin, unpin, pin-out, layer
  kPolicy,
  kRefresh,
  kWatch,
  kHealth,  // grpc.health.v1 Check, not a Control call
};

struct Invocation {
  // Default: 127.0.0.1:50151, or $GIFT_CONTROL_ADDRESS.
  std::string address = "127.0.0.1:50151";
  std::string token_file;  // Default: "" (no token).
  std::string tls_ca;      // Default: "" (plaintext).
  bool json = false;
  double timeout_seconds = 5;  // per unary call. REQUIRES: > 0.
  bool help = false;           // --help: print kUsage, nothing else

  Command command = Command::kStatus;
  std::string command_name;  // as typed, e.g. "pin-out"
  // The request of the command (the one matching `command` is filled).
  gift::v1::SetRefreshIntervalRequest set_interval;
  gift::v1::SetAuditIntervalRequest set_audit_interval;
  gift::v1::SetRankRequest set_rank;
  gift::v1::SetLayerPolicyRequest set_layer_policy;
  gift::v1::SetSelectionPolicyRequest set_policy;
  gift::v1::TriggerRefreshRequest refresh;
  gift::v1::WatchTelemetryRequest watch;
  int watch_count = 0;  // updates to print; 0 = until interrupted
  // health --service: the service checked. Default: "" (the whole server).
  std::string health_service;
};

// args: argv without argv[0]. env_address: $GIFT_CONTROL_ADDRESS or "".
// INVALID_ARGUMENT (a usage error) with a one-line reason.
absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, const std::string& env_address);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_CLI_H_
