// Multi-process tests of the Gloo communicator on loopback: every rank is a
// separate process (gloo_rank_worker) launched by the harness.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status_matchers.h"
#include "tests/multiprocess/harness.h"

namespace gift::multiprocess {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;

constexpr int kTimeoutMs = 2000;
// DEADLINE_EXCEEDED (4) or UNAVAILABLE (14), offset by the worker's 100.
constexpr int kExitDeadlineExceeded = 104;
constexpr int kExitUnavailable = 114;

absl::StatusOr<RunResult> Launch(const std::string& scenario, int world_size,
                                 absl::Duration deadline) {
  LaunchOptions launch;
  launch.binary = GIFT_GLOO_RANK_WORKER;
  launch.args = {scenario, std::to_string(kTimeoutMs)};
  launch.world_size = world_size;
  launch.deadline = deadline;
  return RunRanks(launch);
}

// "code=4 elapsed_ms=2003" -> 2003, or -1.
int64_t ReportedMillis(const std::string& report) {
  for (absl::string_view field : absl::StrSplit(report, ' ')) {
    int64_t ms;
    if (absl::ConsumePrefix(&field, "elapsed_ms=") &&
        absl::SimpleAtoi(field, &ms)) {
      return ms;
    }
  }
  return -1;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, EveryRankGetsExactlyWhatItsPeersSent) {
  absl::StatusOr<RunResult> run =
      Launch("collectives", GetParam(), absl::Seconds(90));
  ASSERT_OK(run);
  for (const RankResult& r : run->ranks) {
    EXPECT_EQ(r.exit_code, 0) << Describe(*run);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest,
                         ::testing::Values(2, 3, 4, 8));

class GlooPeerFailureTest : public ::testing::TestWithParam<int> {
 protected:
  // Survivors fail with a timeout or a broken connection, within the
  // timeout plus a margin for a loaded machine, and stay broken.
  void ExpectSurvivorsFailInTime(const RunResult& run) {
    for (int r = 0; r + 1 < static_cast<int>(run.ranks.size()); ++r) {
      const RankResult& rank = run.ranks[r];
      EXPECT_THAT(rank.exit_code,
                  AnyOf(Eq(kExitDeadlineExceeded), Eq(kExitUnavailable)))
          << Describe(run);
      const int64_t ms = ReportedMillis(rank.report);
      EXPECT_GE(ms, 0) << Describe(run);
      EXPECT_LT(ms, kTimeoutMs + 1500) << Describe(run);
      EXPECT_FALSE(rank.killed_at_deadline) << Describe(run);
      // Start-up and rendezvous included.
      EXPECT_LT(rank.elapsed,
                absl::Milliseconds(kTimeoutMs) + absl::Seconds(15))
          << Describe(run);
    }
  }
};

TEST_P(GlooPeerFailureTest, PeerThatExitsMakesTheOthersFailNotHang) {
  absl::StatusOr<RunResult> run =
      Launch("peer_exits", GetParam(), absl::Seconds(40));
  ASSERT_OK(run);
  ExpectSurvivorsFailInTime(*run);
  EXPECT_EQ(run->ranks.back().exit_code, 0) << Describe(*run);
}

TEST_P(GlooPeerFailureTest, PeerThatStallsMakesTheOthersTimeOut) {
  absl::StatusOr<RunResult> run =
      Launch("peer_stalls", GetParam(), absl::Seconds(40));
  ASSERT_OK(run);
  ExpectSurvivorsFailInTime(*run);
  // The rank waiting on the staller itself saw the timeout, and it waited
  // for most of it (others may fail sooner, when it disconnects).
  bool timed_out = false;
  for (const RankResult& r : run->ranks) {
    if (r.exit_code == kExitDeadlineExceeded) {
      timed_out = true;
      EXPECT_GE(ReportedMillis(r.report), kTimeoutMs * 9 / 10)
          << Describe(*run);
    }
  }
  EXPECT_TRUE(timed_out) << Describe(*run);
  // The staller, once awake, finds everyone gone and fails fast too.
  const RankResult& staller = run->ranks.back();
  EXPECT_EQ(staller.exit_code, 0) << Describe(*run);
  EXPECT_THAT(staller.report, ::testing::Not(::testing::HasSubstr("code=0 ")))
      << Describe(*run);
  EXPECT_LT(ReportedMillis(staller.report), kTimeoutMs + 1500)
      << Describe(*run);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooPeerFailureTest,
                         ::testing::Values(2, 4));

}  // namespace
}  // namespace gift::multiprocess
