#include "client/agreement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/thread_ranks_testutil.h"
#include "client/versioned_factors.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::ElementsAre;

TEST(AgreementTest, SingleRankUsesItsNewestVersionsInOneRound) {
  RunThreadRanks(1, [](Transport& comm) {
    AgreementStats stats;
    absl::StatusOr<std::vector<int64_t>> a =
        AgreeOnVersions(comm, {{3, 4}, {7}, {}}, &stats);
    ASSERT_OK(a);
    EXPECT_THAT(*a, ElementsAre(4, 7, kNoVersion));
    EXPECT_EQ(stats.rounds, 1);
    EXPECT_THAT(AgreeOnVersions(comm, {{-2}}),
                StatusIs(absl::StatusCode::kInvalidArgument));
  });
}

// Slot by slot, rank r holds held[r]; every rank must get `want`.
void ExpectAgreement(const std::vector<std::vector<std::vector<int64_t>>>& held,
                     const std::vector<int64_t>& want, int rounds) {
  RunThreadRanks(static_cast<int>(held.size()), [&](Transport& comm) {
    AgreementStats stats;
    absl::StatusOr<std::vector<int64_t>> a =
        AgreeOnVersions(comm, held[comm.rank()], &stats);
    ASSERT_OK(a);
    EXPECT_EQ(*a, want) << "rank " << comm.rank();
    EXPECT_EQ(stats.rounds, rounds);
  });
}

TEST(AgreementTest, RanksInStepNeedOneRound) {
  ExpectAgreement({{{1, 2}, {5}}, {{2}, {4, 5}}, {{1, 2}, {5}}}, {2, 5}, 1);
}

TEST(AgreementTest, EveryRankUsesTheSlowestRanksVersion) {
  // Rank 2 has not seen version 2 of slot 0 yet; everyone holds 1.
  // Slot 1: rank 1 already dropped version 5, the slowest rank's newest.
  ExpectAgreement({{{1, 2}, {5, 6}}, {{1, 2}, {6}}, {{1}, {5}}},
                  {1, kNoVersion}, 2);
}

TEST(AgreementTest, AMinimumNotHeldEverywhereMeansNoVersionOnEveryRank) {
  // Slot 0: rank 0 jumped to {3, 4}; min newest is 2, which rank 0 lacks.
  // Slot 1: a rank without any factor.
  ExpectAgreement({{{3, 4}, {}}, {{1, 2}, {9}}}, {kNoVersion, kNoVersion}, 2);
}

// A valid rank-1 factor of d_in 2, version `v`.
LayerFactor Factor(int64_t v) {
  LayerFactor g;
  g.version = v;
  g.d_in = 2;
  g.r = 1;
  g.u = {1, 0};
  g.c = {-0.5f};
  g.c_inv = {1.0f};
  return g;
}

TEST(VersionedFactorsTest, KeepsTheTwoNewestVersions) {
  VersionedFactors f;
  ASSERT_OK(f.Put("x", Factor(1)));
  ASSERT_OK(f.Put("x", Factor(3)));
  ASSERT_OK(f.Put("x", Factor(2)));
  EXPECT_THAT(f.Held("x"), ElementsAre(2, 3));
  EXPECT_EQ(f.Find("x", 1), nullptr);
  EXPECT_EQ(f.Newest("x")->version, 3);
  EXPECT_TRUE(f.Held("y").empty());
  LayerFactor bad = Factor(4);
  bad.c.clear();
  EXPECT_THAT(f.Put("x", bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.Put("x", Factor(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(VersionedFactorsTest, AcceptedVersionsGateTheGiftPath) {
  VersionedFactors f;
  ASSERT_OK(f.Put("x", Factor(1)));
  ASSERT_OK(f.Put("x", Factor(2)));
  EXPECT_THAT(f.Usable("x"), ElementsAre(1, 2));  // no daemon: no gate
  f.SetAccepted("x", 1);
  EXPECT_THAT(f.Usable("x"), ElementsAre(1));
  // v3 and v4 arrive on probation: v1, the newest usable, stays held.
  ASSERT_OK(f.Put("x", Factor(3)));
  EXPECT_THAT(f.Held("x"), ElementsAre(1, 3));
  ASSERT_OK(f.Put("x", Factor(4)));
  EXPECT_THAT(f.Held("x"), ElementsAre(1, 4));
  EXPECT_THAT(f.Usable("x"), ElementsAre(1));
  EXPECT_EQ(f.Newest("x")->version, 4);  // what probes use
  f.SetAccepted("x", 4);
  EXPECT_THAT(f.Usable("x"), ElementsAre(1, 4));
  ASSERT_OK(f.Put("x", Factor(5)));
  EXPECT_THAT(f.Held("x"), ElementsAre(4, 5));
  EXPECT_THAT(f.Usable("x"), ElementsAre(4));
  // Off the GIFT path: nothing usable, and the old acceptances are gone.
  f.SetAccepted("x", kNoVersion);
  EXPECT_TRUE(f.Usable("x").empty());
  f.SetAccepted("x", 5);
  EXPECT_THAT(f.Usable("x"), ElementsAre(5));
  // A version accepted before it arrives becomes usable when it does.
  f.SetAccepted("x", 6);
  EXPECT_THAT(f.Usable("x"), ElementsAre(5));
  ASSERT_OK(f.Put("x", Factor(6)));
  EXPECT_THAT(f.Usable("x"), ElementsAre(5, 6));
}

}  // namespace
}  // namespace gift::client
