#include "tests/multiprocess/harness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"

namespace gift::multiprocess {
namespace {

TEST(HarnessTest, EveryRankGetsItsEnvironmentAndExitCode) {
  LaunchOptions launch;
  launch.binary = "/bin/sh";
  launch.args = {"-c",
                 "test -d \"$GIFT_STORE_DIR\" && test \"$WORLD_SIZE\" = 3 && "
                 "test \"$EXTRA\" = yes && "
                 "printf 'r%s' \"$RANK\" > \"$GIFT_OUT_DIR/rank$RANK.txt\" && "
                 "exit $((RANK + 10))"};
  launch.world_size = 3;
  launch.env = {{"EXTRA", "yes"}};
  launch.deadline = absl::Seconds(20);
  absl::StatusOr<RunResult> run = RunRanks(launch);
  ASSERT_OK(run);
  ASSERT_EQ(run->ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run->ranks[r].exit_code, r + 10) << Describe(*run);
    EXPECT_EQ(run->ranks[r].report, absl::StrCat("r", r));
    EXPECT_FALSE(run->ranks[r].killed_at_deadline);
  }
}

TEST(HarnessTest, StragglersAreKilledAtTheDeadline) {
  LaunchOptions launch;
  launch.binary = "/bin/sh";
  launch.args = {"-c", "if [ \"$RANK\" = 1 ]; then exec sleep 30; fi; exit 0"};
  launch.world_size = 2;
  launch.deadline = absl::Milliseconds(500);
  absl::StatusOr<RunResult> run = RunRanks(launch);
  ASSERT_OK(run);
  EXPECT_EQ(run->ranks[0].exit_code, 0) << Describe(*run);
  EXPECT_FALSE(run->ranks[0].killed_at_deadline);
  EXPECT_TRUE(run->ranks[1].killed_at_deadline) << Describe(*run);
  EXPECT_EQ(run->ranks[1].term_signal, SIGKILL);
  EXPECT_GE(run->elapsed, absl::Milliseconds(500));
  EXPECT_LT(run->elapsed, absl::Seconds(5));
}

TEST(HarnessTest, MissingBinaryExitsWith127) {
  LaunchOptions launch;
  launch.binary = "/nonexistent/gift_rank";
  launch.world_size = 1;
  absl::StatusOr<RunResult> run = RunRanks(launch);
  ASSERT_OK(run);
  EXPECT_EQ(run->ranks[0].exit_code, 127);
}

}  // namespace
}  // namespace gift::multiprocess
