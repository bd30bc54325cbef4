#include "client/epoch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<BucketLayer> Layers() {
  return {
      {.name = "fc2", .shape = {4, 8}, .offset = 0, .path = LayerPath::kGift},
      {.name = "empty", .shape = {0}, .offset = 32},
      {.name = "bias",
       .shape = {5},
       .offset = 40,  // gap of 8 elements
       .format = kernels::Fp8Format::kE5M2,
       .block_size = 2},
      {.name = "one", .shape = {1, 1}, .offset = 45},
  };
}

TEST(EpochPlanTest, ValidPlanHasPackedOffsetsWithoutGaps) {
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(3, 50, Layers());
  ASSERT_OK(plan);
  EXPECT_EQ(plan->communicated_elements(), 32 + 0 + 5 + 1);
  EXPECT_EQ(plan->packed_offset(2), 32);
  EXPECT_EQ(plan->packed_offset(3), 37);
  EXPECT_EQ(plan->FindLayer("bias"), 2);
  EXPECT_EQ(plan->FindLayer("nope"), -1);
  EXPECT_TRUE(plan->has_gift_layers());
  EXPECT_EQ(plan->layers()[0].d_in(), 8);
  EXPECT_EQ(plan->layers()[2].d_in(), 1);
}

TEST(EpochPlanTest, InvalidPlansAreRejectedWithTheLayerNamed) {
  const std::vector<std::function<void(std::vector<BucketLayer>&)>> breakers = {
      [](auto& l) { l[2].offset = 30; },       // overlaps fc2
      [](auto& l) { std::swap(l[0], l[3]); },  // unsorted
      [](auto& l) { l[3].offset = 50; },       // past the end
      [](auto& l) {
        l[0].shape = {4, -8};
      },  // negative dim
      [](auto& l) {
        l[0].shape = {2, 2, 8};
      },                                              // 3-D
      [](auto& l) { l[0].shape = {}; },               // 0-D
      [](auto& l) { l[1].name = "fc2"; },             // duplicate
      [](auto& l) { l[1].name = ""; },                // unnamed
      [](auto& l) { l[2].path = LayerPath::kGift; },  // 1-D GIFT
      [](auto& l) { l[2].block_size = -1; },
      [](auto& l) { l[0].offset = -1; },
  };
  for (size_t k = 0; k < breakers.size(); ++k) {
    std::vector<BucketLayer> layers = Layers();
    breakers[k](layers);
    EXPECT_THAT(EpochPlan::Create(3, 50, layers),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "case " << k;
  }
  EXPECT_THAT(EpochPlan::Create(-1, 50, Layers()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<EpochPlan> p =
      EpochPlan::Create(0, 10, {{.name = "big", .shape = {11}, .offset = 0}});
  EXPECT_THAT(p.status().message(), HasSubstr("'big'"));
}

TEST(EpochPlanTest, FingerprintIsStableAndSensitiveToEveryField) {
  const uint64_t base = EpochPlan::Create(3, 50, Layers())->Fingerprint();
  // Built again independently: same value.
  EXPECT_EQ(EpochPlan::Create(3, 50, Layers())->Fingerprint(), base);
  const std::vector<std::function<void(std::vector<BucketLayer>&)>> changes = {
      [](auto& l) { l[0].name = "fc1"; },
      [](auto& l) {
        l[0].shape = {8, 4};
      },
      [](auto& l) { l[3].offset = 46; },
      [](auto& l) { l[0].path = LayerPath::kEuclid; },
      [](auto& l) { l[0].transform = GiftTransform::kFull; },
      [](auto& l) { l[0].format = kernels::Fp8Format::kE5M2; },
      [](auto& l) { l[2].block_size = 3; },
      [](auto& l) {
        l[1].shape = {0, 0};
      },
  };
  for (size_t k = 0; k < changes.size(); ++k) {
    std::vector<BucketLayer> layers = Layers();
    changes[k](layers);
    absl::StatusOr<EpochPlan> p = EpochPlan::Create(3, 50, layers);
    ASSERT_OK(p) << "case " << k;
    EXPECT_NE(p->Fingerprint(), base) << "case " << k;
  }
  EXPECT_NE(EpochPlan::Create(4, 50, Layers())->Fingerprint(), base);
  EXPECT_NE(EpochPlan::Create(3, 51, Layers())->Fingerprint(), base);
}

TEST(EpochPlanTest, Fnv1aMatchesTheReferenceVectors) {
  // Published FNV-1a 64 test vectors: "" and "a".
  EXPECT_EQ(Fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
}

TEST(EpochPlanTest, SameLayoutIgnoresPathsButNotOffsets) {
  EpochPlan a = *EpochPlan::Create(3, 50, Layers());
  std::vector<BucketLayer> layers = Layers();
  layers[0].path = LayerPath::kEuclid;
  EXPECT_TRUE(a.SameLayout(*EpochPlan::Create(4, 50, layers)));
  layers[3].offset = 46;
  EXPECT_FALSE(a.SameLayout(*EpochPlan::Create(4, 50, layers)));
}

TEST(EpochPlanTest, CheckAcrossRanksPassesForEqualPlansAndFailsEverywhere) {
  RunThreadRanks(3, [](Transport& comm) {
    EpochPlan same = *EpochPlan::Create(3, 50, Layers());
    EXPECT_OK(CheckPlanAcrossRanks(comm, same));
    std::vector<BucketLayer> layers = Layers();
    if (comm.rank() == 1) layers[2].block_size = 4;
    absl::Status s =
        CheckPlanAcrossRanks(comm, *EpochPlan::Create(3, 50, layers));
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(s.message(),
                HasSubstr("bucket plan mismatch across ranks (this rank's "
                          "fingerprint"));
  });
}

}  // namespace
}  // namespace gift::client
