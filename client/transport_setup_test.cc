#include "client/transport_setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/agent_socket.h"
#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

class TransportSetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    options_.rank = 0;
    options_.world_size = 1;
    options_.timeout = absl::Seconds(5);
    options_.store_dir = dir_ + "/store";
    options_.key_prefix = "job/grad/";
    options_.socket_ifname = "lo";
  }

  gift::testing::TempDir tmp_{"gift_setup_test"};
  std::string dir_;
  TransportSetupOptions options_;
};

TEST_F(TransportSetupTest, FileStoreAndTheChosenInterface) {
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->comm, nullptr);
  EXPECT_EQ(s->comm->rank(), 0);
  EXPECT_EQ(s->comm->world_size(), 1);
  EXPECT_EQ(s->endpoint, "127.0.0.1 on lo, chosen by socket_ifname=lo");
  // The store it opened, on store_dir, and the namespace over it.
  ASSERT_NE(s->store, nullptr);
  ASSERT_NE(s->prefixed, nullptr);
  EXPECT_TRUE(std::filesystem::is_directory(options_.store_dir));
  ASSERT_TRUE(s->prefixed->Set("k", "v").ok());
  absl::StatusOr<std::string> v =
      s->store->Get("job/grad/k", absl::ZeroDuration());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
  EXPECT_TRUE(s->comm->Barrier().ok());
}

TEST_F(TransportSetupTest, TheCallersHostname) {
  options_.hostname = "127.0.0.1";
  options_.socket_ifname = "nope0";  // not consulted
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->endpoint, "127.0.0.1, set by the caller");
}

TEST_F(TransportSetupTest, TheJobsStoreServesAndStaysTheCallers) {
  absl::StatusOr<std::unique_ptr<FileStore>> job =
      FileStore::Create(dir_ + "/job");
  ASSERT_TRUE(job.ok()) << job.status();
  options_.job_store = job->get();
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->store, nullptr);  // nothing opened: the caller's served
  EXPECT_FALSE(std::filesystem::exists(options_.store_dir));
  ASSERT_TRUE(s->prefixed->Set("k", "v").ok());
  EXPECT_TRUE((*job)->Get("job/grad/k", absl::ZeroDuration()).ok());
}

TEST_F(TransportSetupTest, GlooFailureNamesTheAddressAndTheRemedy) {
  options_.world_size = 2;  // rank 1 never comes
  options_.timeout = absl::Milliseconds(300);
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr(" [gloo address 127.0.0.1 on lo, chosen by "
                        "socket_ifname=lo; ranks on other hosts must reach "
                        "it: set GLOO_SOCKET_IFNAME or socket_ifname to the "
                        "interface they share]"));
}

TEST_F(TransportSetupTest, ErrorsBeforeGlooHaveNoHint) {
  options_.backend = "mpi";
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("mpi"));
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::Not(HasSubstr("gloo address")));

  options_.backend = "gloo";
  options_.hostname = "";
  options_.socket_ifname = "nope0";
  s = SetUpTransport(options_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("nope0"));
}

TEST_F(TransportSetupTest, DaemonStoreNeedsAJobId) {
  options_.daemon_store = true;
  options_.agent_socket = dir_ + "/none.sock";
  absl::StatusOr<TransportSetup> s = SetUpTransport(options_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("agent socket and job id must be set"));
  EXPECT_FALSE(std::filesystem::exists(options_.store_dir));
}

TEST(AgentSocketTest, EnvironmentElseTheDaemonsDefault) {
  const char* saved = std::getenv(kAgentSocketEnv);
  const std::string restore = saved != nullptr ? saved : "";
  ASSERT_EQ(::setenv(kAgentSocketEnv, "/run/gift/agent.sock", 1), 0);
  EXPECT_EQ(DefaultAgentSocket(), "/run/gift/agent.sock");
  ASSERT_EQ(::setenv(kAgentSocketEnv, "", 1), 0);
  EXPECT_EQ(DefaultAgentSocket(), "/tmp/gift/agent.sock");
  ASSERT_EQ(::unsetenv(kAgentSocketEnv), 0);
  EXPECT_EQ(DefaultAgentSocket(), std::string(kDefaultAgentSocket));
  if (saved != nullptr) ::setenv(kAgentSocketEnv, restore.c_str(), 1);
}

}  // namespace
}  // namespace gift::client
