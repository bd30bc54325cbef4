// Every giftctl command against an in-process fake Control server: the
// request that arrives, the token, the printed output, errors and watch.
#include "tools/giftctl/commands.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status_matchers.h"
#include "tools/giftctl/cli.h"

extern char** environ;

namespace gift::giftctl {
namespace {

using ::testing::HasSubstr;

class FakeControl final : public gift::v1::Control::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext* ctx,
                         const gift::v1::GetStatusRequest*,
                         gift::v1::GetStatusResponse* r) override {
    Record(ctx, "GetStatus");
    r->set_node("fake-node");
    r->set_plan_epoch(4);
    return grpc::Status::OK;
  }
  grpc::Status ListLayers(grpc::ServerContext* ctx,
                          const gift::v1::ListLayersRequest*,
                          gift::v1::ListLayersResponse* r) override {
    Record(ctx, "ListLayers");
    r->add_layers()->set_name("blocks.0.fc2");
    return grpc::Status::OK;
  }
  grpc::Status SetLayerPolicy(grpc::ServerContext* ctx,
                              const gift::v1::SetLayerPolicyRequest* req,
                              gift::v1::SetLayerPolicyResponse* r) override {
    Record(ctx, "SetLayerPolicy " + req->ShortDebugString());
    r->mutable_layer()->set_name(req->layer());
    *r->mutable_layer()->mutable_settings() = req->settings();
    r->set_plan_epoch(5);
    return grpc::Status::OK;
  }
  grpc::Status SetRefreshInterval(
      grpc::ServerContext* ctx, const gift::v1::SetRefreshIntervalRequest* req,
      gift::v1::SetRefreshIntervalResponse* r) override {
    Record(ctx, "SetRefreshInterval " + req->ShortDebugString());
    r->set_plan_epoch(6);
    return grpc::Status::OK;
  }
  grpc::Status SetRank(grpc::ServerContext* ctx,
                       const gift::v1::SetRankRequest* req,
                       gift::v1::SetRankResponse*) override {
    Record(ctx, "SetRank " + req->ShortDebugString());
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "rank 999 > max_rank 64");
  }
  grpc::Status SetSelectionPolicy(
      grpc::ServerContext* ctx, const gift::v1::SetSelectionPolicyRequest* req,
      gift::v1::SetSelectionPolicyResponse* r) override {
    Record(ctx, "SetSelectionPolicy " + req->ShortDebugString());
    *r->mutable_policy() = req->policy();
    r->set_plan_epoch(7);
    return grpc::Status::OK;
  }
  grpc::Status TriggerRefresh(grpc::ServerContext* ctx,
                              const gift::v1::TriggerRefreshRequest* req,
                              gift::v1::TriggerRefreshResponse* r) override {
    Record(ctx, "TriggerRefresh " + req->ShortDebugString());
    r->add_layers("a");
    r->add_layers("b");
    return grpc::Status::OK;
  }
  // Streams until the client cancels (the server would otherwise never end).
  grpc::Status WatchTelemetry(
      grpc::ServerContext* ctx, const gift::v1::WatchTelemetryRequest* req,
      grpc::ServerWriter<gift::v1::TelemetryUpdate>* w) override {
    Record(ctx, "WatchTelemetry " + req->ShortDebugString());
    gift::v1::TelemetryUpdate u;
    u.add_layers()->set_name("fc2");
    for (int step = 1; !ctx->IsCancelled(); ++step) {
      u.mutable_status()->set_step(step);
      if (!w->Write(u)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return grpc::Status::CANCELLED;
  }

  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::string last_authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  void Record(grpc::ServerContext* ctx, const std::string& call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(call);
    auto it = ctx->client_metadata().find("authorization");
    authorization_ = it == ctx->client_metadata().end()
                         ? ""
                         : std::string(it->second.data(), it->second.size());
  }

  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs giftctl in-process; returns the exit code, output in out_/err_.
  int Run(std::vector<std::string> args, const std::string& token = "") {
    args.insert(args.begin(), {"--address", address_});
    absl::StatusOr<Invocation> inv = ParseCommandLine(args, "");
    EXPECT_OK(inv);
    auto channel = MakeChannel(*inv);
    EXPECT_OK(channel);
    auto stub = gift::v1::Control::NewStub(*channel);
    out_.str("");
    err_.str("");
    return RunCommand(*inv, token, *stub, out_, err_);
  }

  FakeControl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::ostringstream out_, err_;
};

TEST_F(CommandsTest, StatusSendsTheToken) {
  ASSERT_EQ(Run({"status"}, "s3cret"), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("node              fake-node\n"));
  EXPECT_EQ(service_.last_authorization(), "Bearer s3cret");
  ASSERT_EQ(Run({"status"}), kExitOk);
  EXPECT_EQ(service_.last_authorization(), "");
}

TEST_F(CommandsTest, EachCommandSendsItsRequest) {
  ASSERT_EQ(Run({"layers"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\nblocks.0.fc2  "));
  ASSERT_EQ(Run({"set-interval", "20"}), kExitOk);
  EXPECT_EQ(out_.str(), "plan_epoch 6\n");
  ASSERT_EQ(Run({"pin-out", "fc1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("plan_epoch 5\n"));
  ASSERT_EQ(Run({"layer", "fc2", "--rank", "8"}), kExitOk);
  ASSERT_EQ(Run({"policy", "--kind", "elbow"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("policy elbow k=0"));
  ASSERT_EQ(Run({"refresh", "fc2"}), kExitOk);
  EXPECT_EQ(out_.str(), "scheduled a, b\n");
  EXPECT_THAT(service_.calls(),
              ::testing::ElementsAre(
                  "ListLayers", "SetRefreshInterval steps: 20",
                  "SetLayerPolicy layer: \"fc1\" settings { pin: PIN_OUT }",
                  "SetLayerPolicy layer: \"fc2\" settings { rank: 8 }",
                  "SetSelectionPolicy policy { kind: SELECTION_KIND_ELBOW }",
                  "TriggerRefresh layer: \"fc2\""));
}

TEST_F(CommandsTest, JsonUsesProtoFieldNames) {
  ASSERT_EQ(Run({"--json", "status"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"plan_epoch\": \"4\""));  // int64
  EXPECT_THAT(out_.str(), HasSubstr("\"node\": \"fake-node\""));
}

TEST_F(CommandsTest, ServerErrorNamesRpcAndCode) {
  EXPECT_EQ(Run({"set-rank", "999"}), kExitFailed);
  EXPECT_EQ(err_.str(),
            "giftctl: SetRank: INVALID_ARGUMENT: rank 999 > max_rank 64\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CommandsTest, WatchStopsAfterCount) {
  ASSERT_EQ(Run({"watch", "--interval", "50", "--count", "3"}), kExitOk)
      << err_.str();
  std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("step 1 "));
  EXPECT_THAT(out, HasSubstr("step 3 "));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("step 4 ")));
  EXPECT_EQ(service_.calls()[0], "WatchTelemetry interval_ms: 50");
  ASSERT_EQ(Run({"watch", "--json", "--count", "2"}), kExitOk);
  std::string json = out_.str();
  EXPECT_EQ(std::count(json.begin(), json.end(), '\n'), 2) << json;
  EXPECT_EQ(json.rfind("{\"status\":{", 0), 0u) << json;
}

TEST_F(CommandsTest, BinaryReadsTokenFileAndStopsWatchOnSigint) {
  std::string token_file = ::testing::TempDir() + "/giftctl_token";
  std::ofstream(token_file) << "tok\n\n";
  std::string args = " --address " + address_ + " --token-file " + token_file;
  FILE* p = popen((GIFTCTL_BINARY + args + " status").c_str(), "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf), p);
  EXPECT_EQ(WEXITSTATUS(pclose(p)), 0);
  EXPECT_THAT(std::string(buf, n), HasSubstr("fake-node"));
  EXPECT_EQ(service_.last_authorization(), "Bearer tok");

  // watch runs until SIGINT, then exits 0.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> argv_s = {GIFTCTL_BINARY, "--address", address_,
                                     "watch", "--json"};
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, GIFTCTL_BINARY, &actions, nullptr, argv.data(),
                        environ),
            0);
  close(pipe_fds[1]);
  FILE* out = fdopen(pipe_fds[0], "r");
  char line[4096];
  ASSERT_NE(fgets(line, sizeof(line), out), nullptr);  // the stream is live
  EXPECT_THAT(std::string(line), HasSubstr("\"step\":\"1\""));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fclose(out);
  posix_spawn_file_actions_destroy(&actions);
}

}  // namespace
}  // namespace gift::giftctl
