// Multi-process tests of AllReduceEngine on Gloo over loopback: every rank
// is a separate process (quantized_allreduce_worker) launched by the
// harness. The workers check numerics themselves; this side checks exit
// codes, that every rank ended bit-identical (hashes in the reports), the
// error-feedback drift and the failure timing.
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
using ::testing::HasSubstr;

constexpr int kTimeoutMs = 2000;
constexpr int kExitDeadlineExceeded = 104;
constexpr int kExitUnavailable = 114;

absl::StatusOr<RunResult> Launch(const std::string& scenario, int world_size,
                                 absl::Duration deadline,
                                 int timeout_ms = 20000) {
  LaunchOptions launch;
  launch.binary = GIFT_QUANTIZED_ALLREDUCE_WORKER;
  launch.args = {scenario, std::to_string(timeout_ms)};
  launch.world_size = world_size;
  launch.deadline = deadline;
  return RunRanks(launch);
}

// The value of "key=..." in a report, or "".
std::string Field(const std::string& report, absl::string_view key) {
  for (absl::string_view f : absl::StrSplit(report, ' ')) {
    if (absl::ConsumePrefix(&f, key) && absl::ConsumePrefix(&f, "=")) {
      return std::string(f);
    }
  }
  return "";
}

void ExpectAllOkAndIdentical(const RunResult& run) {
  for (const RankResult& r : run.ranks) {
    EXPECT_EQ(r.exit_code, 0) << Describe(run);
    EXPECT_FALSE(Field(r.report, "hash").empty()) << Describe(run);
    EXPECT_EQ(Field(r.report, "hash"), Field(run.ranks[0].report, "hash"))
        << "rank " << r.rank << " differs: " << Describe(run);
  }
}

class QuantizedAllReduceSuiteTest : public ::testing::TestWithParam<int> {};

TEST_P(QuantizedAllReduceSuiteTest, BoundedBitIdenticalAndAgreed) {
  absl::StatusOr<RunResult> run =
      Launch("suite", GetParam(), absl::Seconds(100));
  ASSERT_OK(run);
  ExpectAllOkAndIdentical(*run);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, QuantizedAllReduceSuiteTest,
                         ::testing::Values(2, 3, 4, 8));

// nvfp4 and mxfp4 layers with error feedback (allreduce_fp4.h).
class QuantizedAllReduceFp4Test : public ::testing::TestWithParam<int> {};

TEST_P(QuantizedAllReduceFp4Test, BoundedBitIdenticalWithErrorFeedback) {
  absl::StatusOr<RunResult> run = Launch("fp4", GetParam(), absl::Seconds(100));
  ASSERT_OK(run);
  ExpectAllOkAndIdentical(*run);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, QuantizedAllReduceFp4Test,
                         ::testing::Values(3, 4));

TEST(QuantizedAllReduceMultiprocessTest, PlanMismatchFailsOnEveryRank) {
  absl::StatusOr<RunResult> run = Launch("mismatch", 3, absl::Seconds(60));
  ASSERT_OK(run);
  for (const RankResult& r : run->ranks) {
    EXPECT_EQ(r.exit_code, 0) << Describe(*run);
    EXPECT_THAT(r.report, HasSubstr("bucket plan mismatch across ranks"));
  }
}

TEST(QuantizedAllReduceMultiprocessTest, ErrorFeedbackBoundsRunningSumDrift) {
  absl::StatusOr<RunResult> run = Launch("drift", 4, absl::Seconds(100));
  ASSERT_OK(run);
  ExpectAllOkAndIdentical(*run);
  const std::string& report = run->ranks[0].report;
  auto drift = [&](absl::string_view key) {
    std::vector<double> v;
    for (absl::string_view s : absl::StrSplit(Field(report, key), ',')) {
      double d;
      if (absl::SimpleAtod(s, &d)) v.push_back(d);
    }
    return v;
  };
  const std::vector<double> ef = drift("drift_ef"), noef = drift("drift_noef"),
                            euclid = drift("drift_euclid");
  ASSERT_EQ(ef.size(), 2u) << report;
  ASSERT_EQ(noef.size(), 2u) << report;
  ASSERT_EQ(euclid.size(), 2u) << report;
  for (int l = 0; l < 2; ++l) {
    EXPECT_GT(noef[l], 0.0) << report;
    EXPECT_LE(3 * ef[l], noef[l]) << report;
    EXPECT_LT(ef[l], euclid[l]) << report;
  }
  std::cout << "drift: " << report << std::endl;
}

TEST(QuantizedAllReduceMultiprocessTest, LargeBucketIsSplitIntoPieces) {
  absl::StatusOr<RunResult> run = Launch("large", 2, absl::Seconds(120));
  ASSERT_OK(run);
  ExpectAllOkAndIdentical(*run);
}

class QuantizedAllReducePeerFailureTest
    : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedAllReducePeerFailureTest, OthersFailWithinTheTimeout) {
  absl::StatusOr<RunResult> run =
      Launch(GetParam(), 3, absl::Seconds(40), kTimeoutMs);
  ASSERT_OK(run);
  for (int r = 0; r < 2; ++r) {
    const RankResult& rank = run->ranks[r];
    EXPECT_THAT(rank.exit_code,
                AnyOf(Eq(kExitDeadlineExceeded), Eq(kExitUnavailable)))
        << Describe(*run);
    int64_t ms = -1;
    EXPECT_TRUE(absl::SimpleAtoi(Field(rank.report, "elapsed_ms"), &ms))
        << Describe(*run);
    EXPECT_LT(ms, kTimeoutMs + 1500) << Describe(*run);
    EXPECT_FALSE(rank.killed_at_deadline) << Describe(*run);
  }
  EXPECT_EQ(run->ranks[2].exit_code, 0) << Describe(*run);
}

INSTANTIATE_TEST_SUITE_P(Failures, QuantizedAllReducePeerFailureTest,
                         ::testing::Values("peer_exits", "peer_stalls",
                                           "peer_exits_mid",
                                           "peer_stalls_mid"));

}  // namespace
}  // namespace gift::multiprocess
