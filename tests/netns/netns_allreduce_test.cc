// The quantized allreduce across network namespaces: three ranks, each in a
// namespace of its own (scripts/netns.sh) with its own veth address, joined
// by a bridge, run fp8 steps with a GIFT layer (netns_allreduce_worker). The
// workers check the error bound and the payload; this side checks that they
// ran in three distinct namespaces (not ours) on their own addresses and
// ended bit-identical. Skipped, and says why, when namespaces cannot be made
// here (not root, no iproute2, `ip netns add` refused). The namespaces carry
// this process's pid (parallel runs do not collide), are removed in
// TearDown, and stale ones of dead processes are removed first.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "tests/multiprocess/harness.h"

namespace gift::multiprocess {
namespace {

constexpr int kWorld = 3;
constexpr char kBase[] = "gnt";

struct Shell {
  int exit_code = -1;
  std::string output;
};

// Runs `cmd` through sh with a 20 s bound; stdout and stderr together.
Shell Sh(const std::string& cmd) {
  Shell r;
  FILE* p = ::popen(absl::StrCat("timeout 20 ", cmd, " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Field(const std::string& report, absl::string_view key) {
  for (absl::string_view f : absl::StrSplit(report, ' ')) {
    if (absl::ConsumePrefix(&f, key) && absl::ConsumePrefix(&f, "=")) {
      return std::string(f);
    }
  }
  return "";
}

class NetnsAllReduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Sh(absl::StrCat(GIFT_NETNS_SCRIPT, " gc ", kBase));
    const Shell check = Sh(absl::StrCat(GIFT_NETNS_SCRIPT, " check"));
    if (check.exit_code != 0) {
      const std::string reason(absl::StripAsciiWhitespace(check.output));
      std::cout << "SKIPPED: network namespaces unavailable: " << reason
                << std::endl;
      GTEST_SKIP() << "network namespaces unavailable: " << reason;
    }
    prefix_ = absl::StrCat(kBase, ::getpid());
    const Shell up = Sh(absl::StrCat(GIFT_NETNS_SCRIPT, " up -p ", prefix_,
                                     " -w ", kWorld, " -r none"));
    up_ = true;
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }

  void TearDown() override {
    if (!up_) return;
    Sh(absl::StrCat(GIFT_NETNS_SCRIPT, " down -p ", prefix_));
    const Shell left = Sh("ip netns list");
    EXPECT_FALSE(absl::StrContains(left.output, prefix_ + "-"))
        << "namespaces left behind: " << left.output;
  }

  std::string prefix_;
  bool up_ = false;
};

TEST_F(NetnsAllReduceTest, Fp8AcrossNamespacesIsBoundedAndBitIdentical) {
  LaunchOptions launch;
  launch.binary = GIFT_NETNS_SCRIPT;
  launch.args = {"exec", "-p", prefix_, "-", GIFT_NETNS_WORKER};
  launch.world_size = kWorld;
  launch.deadline = absl::Seconds(25);
  absl::StatusOr<RunResult> run = RunRanks(launch);
  ASSERT_OK(run);
  std::error_code ec;
  const std::string own_netns =
      std::filesystem::read_symlink("/proc/self/ns/net", ec);
  std::set<std::string> namespaces;
  for (const RankResult& r : run->ranks) {
    EXPECT_EQ(r.exit_code, 0) << Describe(*run);
    EXPECT_FALSE(Field(r.report, "hash").empty()) << Describe(*run);
    EXPECT_EQ(Field(r.report, "hash"), Field(run->ranks[0].report, "hash"))
        << "rank " << r.rank << " differs: " << Describe(*run);
    EXPECT_EQ(Field(r.report, "addr"), absl::StrCat("10.77.0.", r.rank + 1));
    const std::string ns = Field(r.report, "netns");
    EXPECT_TRUE(absl::StartsWith(ns, "net:[")) << r.report;
    EXPECT_NE(ns, own_netns) << "rank " << r.rank << " ran in our namespace";
    namespaces.insert(ns);
  }
  EXPECT_EQ(namespaces.size(), size_t{kWorld}) << Describe(*run);
}

}  // namespace
}  // namespace gift::multiprocess
