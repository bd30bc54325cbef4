// giftctl: the operator's command-line client of giftd's Control service.
// `giftctl --help` lists the commands; see tools/giftctl/cli.cc.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu_baseline.h"
#include "tools/giftctl/cli.h"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/health.h"

int main(int argc, char** argv) {
  using namespace gift::giftctl;  // NOLINT
  if (absl::Status cpu = gift::kernels::CheckCpuBaseline(); !cpu.ok()) {
    std::cerr << "giftctl: " << cpu.message() << "\n";
    return kExitFailed;
  }
  const char* env = std::getenv("GIFT_CONTROL_ADDRESS");
  absl::StatusOr<Invocation> inv = ParseCommandLine(
      std::vector<std::string>(argv + 1, argv + argc), env ? env : "");
  if (!inv.ok()) {
    std::cerr << "giftctl: " << inv.status().message() << "\n" << kUsageLine;
    return kExitUsage;
  }
  if (inv->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  absl::StatusOr<std::string> token = ReadToken(inv->token_file);
  if (!token.ok()) {
    std::cerr << "giftctl: " << token.status().message() << "\n";
    return kExitFailed;
  }
  // Before the channel starts gRPC's threads, so they inherit the mask.
  if (inv->command == Command::kWatch) BlockStopSignals();
  auto channel = MakeChannel(*inv);
  if (!channel.ok()) {
    std::cerr << "giftctl: " << channel.status().message() << "\n";
    return kExitFailed;
  }
  if (inv->command == Command::kHealth) {
    return RunHealth(*inv, *token, *channel, std::cout, std::cerr);
  }
  auto stub = gift::v1::Control::NewStub(*channel);
  return RunCommand(*inv, *token, *stub, std::cout, std::cerr);
}
