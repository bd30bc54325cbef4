// giftctl health against an in-process server running gRPC's default health
// service: SERVING, NOT_SERVING, a named service, an unknown one, an
// unreachable address within --timeout, and the binary's exit codes.
#include "tools/giftctl/health.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gift/v1/control.grpc.pb.h"
#include "tools/giftctl/cli.h"
#include "tools/giftctl/commands.h"

namespace gift::giftctl {
namespace {

using ::testing::HasSubstr;

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    // A server needs one synchronous service besides health.
    builder.RegisterService(&control_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(server_->GetHealthCheckService(), nullptr);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // Runs `giftctl health` in-process; returns the exit code.
  int Run(std::vector<std::string> args, const std::string& address = "") {
    args.insert(args.begin(),
                {"--address", address.empty() ? address_ : address, "health"});
    absl::StatusOr<Invocation> inv = ParseCommandLine(args, "");
    EXPECT_OK(inv);
    auto channel = MakeChannel(*inv);
    EXPECT_OK(channel);
    out_.str("");
    err_.str("");
    return RunHealth(*inv, "", *channel, out_, err_);
  }

  grpc::HealthCheckServiceInterface* health() {
    return server_->GetHealthCheckService();
  }

  // Registered so that its name has a health status; the tests call only
  // the health service.
  gift::v1::Control::Service control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::ostringstream out_, err_;
};

TEST_F(HealthTest, ServingExitsZero) {
  ASSERT_EQ(Run({}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "SERVING\n");
  EXPECT_EQ(err_.str(), "");
  ASSERT_EQ(Run({"--json"}), kExitOk);
  EXPECT_EQ(out_.str(), "{\"status\": \"SERVING\"}\n");
}

TEST_F(HealthTest, NotServingExitsOne) {
  health()->SetServingStatus(false);
  EXPECT_EQ(Run({}), kExitFailed);
  EXPECT_EQ(out_.str(), "NOT_SERVING\n");
}

TEST_F(HealthTest, NamedService) {
  health()->SetServingStatus("gift.v1.Control", true);
  EXPECT_EQ(Run({"--service", "gift.v1.Control"}), kExitOk) << err_.str();
  health()->SetServingStatus("gift.v1.Control", false);
  EXPECT_EQ(Run({"--service", "gift.v1.Control"}), kExitFailed);
  EXPECT_EQ(out_.str(), "NOT_SERVING\n");
  // The whole server is still serving.
  EXPECT_EQ(Run({}), kExitOk);
}

TEST_F(HealthTest, UnknownServiceExitsOneWithCode) {
  EXPECT_EQ(Run({"--service", "no.such.Service"}), kExitFailed);
  EXPECT_EQ(out_.str(), "");
  EXPECT_THAT(err_.str(), HasSubstr("giftctl: Health/Check: NOT_FOUND: "));
}

TEST_F(HealthTest, UnreachableFailsWithinTimeout) {
  server_->Shutdown();
  server_.reset();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Run({"--timeout", "0.5"}), kExitFailed);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(seconds, 3.0);
  EXPECT_THAT(err_.str(), HasSubstr("giftctl: Health/Check: "));
  EXPECT_THAT(err_.str(), ::testing::AnyOf(HasSubstr("UNAVAILABLE"),
                                           HasSubstr("DEADLINE_EXCEEDED")));
}

TEST(ServingStatusNameTest, AllValues) {
  EXPECT_EQ(ServingStatusName(0), "UNKNOWN");
  EXPECT_EQ(ServingStatusName(1), "SERVING");
  EXPECT_EQ(ServingStatusName(2), "NOT_SERVING");
  EXPECT_EQ(ServingStatusName(3), "SERVICE_UNKNOWN");
  EXPECT_EQ(ServingStatusName(9), "STATUS_9");
}

int RunBinary(const std::string& args) {
  std::string cmd =
      std::string(GIFTCTL_BINARY) + " " + args + " >/dev/null 2>&1";
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(HealthTest, BinaryExitCodes) {
  EXPECT_EQ(RunBinary("--address " + address_ + " health"), 0);
  EXPECT_EQ(RunBinary("--address " + address_ + " health --service x.Y"), 1);
  health()->SetServingStatus(false);
  EXPECT_EQ(RunBinary("--address " + address_ + " health"), 1);
  EXPECT_EQ(RunBinary("--address 127.0.0.1:1 --timeout 1 health"), 1);
  EXPECT_EQ(RunBinary("health extra"), 2);
}

}  // namespace
}  // namespace gift::giftctl
