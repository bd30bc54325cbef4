// AllReduceEngine's overlapped steps: BeginStep, one RunBucket per
// framework bucket (each in its own buffer and layout), EndStep.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// The model's layout: a (1-D), g (GIFT 6 × 16), b (E5M2 blocks of 8).
EpochPlan Model(int64_t epoch = 1) {
  return *EpochPlan::Create(
      epoch, 196,
      {{.name = "a", .shape = {37}, .offset = 0},
       {.name = "g", .shape = {6, 16}, .offset = 37, .path = LayerPath::kGift},
       {.name = "b",
        .shape = {3, 21},
        .offset = 133,
        .format = kernels::Fp8Format::kE5M2,
        .block_size = 8}});
}

// DDP-like buckets in gradient order: bucket 0 = {b, g} (b first in its
// buffer, a gap of 3 between them), bucket 1 = {a}.
BucketGroup Bucket0() {
  return {.layers = {2, 1}, .offsets = {0, 66}, .elements = 162};
}
BucketGroup Bucket1() {
  return {.layers = {0}, .offsets = {0}, .elements = 37};
}

// The same buckets as plans of their own (what separate allreduces see).
EpochPlan Plan0() {
  const EpochPlan m = Model();
  BucketLayer b = m.layers()[2], g = m.layers()[1];
  b.offset = 0;
  g.offset = 66;
  return *EpochPlan::Create(1, 162, {b, g});
}
EpochPlan Plan1() {
  BucketLayer a = Model().layers()[0];
  return *EpochPlan::Create(1, 37, {a});
}

std::vector<float> Values(int seed, int64_t n) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = SyntheticValue(seed, i);
  return x;
}

// One shared agreement, but each bucket's round is that of a plan of its
// own: the bucketed step equals two separate allreduces over the two
// buckets, bit for bit, over several steps with error feedback (worker and
// owner residuals) and a probe step.
TEST(BucketedStepTest, EqualsOneAllreducePerBucketBitForBit) {
  RunThreadRanks(3, [](Transport& comm) {
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    AllReduceEngineOptions o;
    o.probe_interval = 2;
    auto ar = AllReduceEngine::Create(&comm, Model(), o);
    auto ar0 = AllReduceEngine::Create(&comm, Plan0(), o);
    auto ar1 = AllReduceEngine::Create(&comm, Plan1(), o);
    ASSERT_OK(ar);
    ASSERT_OK(ar0);
    ASSERT_OK(ar1);
    for (int step = 0; step < 4; ++step) {
      const int seed = 10 * comm.rank() + step + 1;
      std::vector<float> b0 = Values(seed, 162), b1 = Values(seed + 100, 37);
      std::vector<float> want0 = b0, want1 = b1;
      ASSERT_OK((*ar0)->Run(want0.data(), f, nullptr));
      ASSERT_OK((*ar1)->Run(want1.data(), f, nullptr));

      ASSERT_OK((*ar)->BeginStep(f));
      EXPECT_TRUE((*ar)->in_step());
      ASSERT_OK((*ar)->RunBucket(Bucket0(), b0.data()));
      ASSERT_OK((*ar)->RunBucket(Bucket1(), b1.data()));
      StepTelemetry t;
      ASSERT_OK((*ar)->EndStep(&t));
      EXPECT_FALSE((*ar)->in_step());
      EXPECT_EQ(b0, want0) << "step " << step;
      EXPECT_EQ(b1, want1) << "step " << step;
      // Telemetry in the model's layer order.
      ASSERT_EQ(t.layers.size(), 3u);
      EXPECT_EQ(t.step, step);
      EXPECT_EQ(t.layers[0].name, "a");
      EXPECT_EQ(t.layers[1].path, LayerPath::kGift);
      EXPECT_EQ(t.layers[1].factor_version, 1);
      EXPECT_EQ(t.layers[1].probed, step % 2 == 0);
      EXPECT_EQ(t.layers[2].local.n, 63);
      EXPECT_GT(t.bytes_gift, 0u);
      EXPECT_GT(t.bytes_euclid, 0u);
    }
  });
}

TEST(BucketedStepTest, PlainModesReduceEachBucket) {
  RunThreadRanks(2, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.mode = AllReduceMode::kFp32;
    auto ar = AllReduceEngine::Create(&comm, Model(), o);
    ASSERT_OK(ar);
    std::vector<float> b0(162, float(comm.rank() + 1)), b1(37, 4.0f);
    b0[63] = b0[64] = b0[65] = -9;  // the gap
    ASSERT_OK((*ar)->BeginStep(VersionedFactors()));
    ASSERT_OK((*ar)->RunBucket(Bucket0(), b0.data()));
    ASSERT_OK((*ar)->RunBucket(Bucket1(), b1.data()));
    StepTelemetry t;
    ASSERT_OK((*ar)->EndStep(&t));
    for (int i = 0; i < 162; ++i) {
      EXPECT_EQ(b0[i], (i >= 63 && i < 66) ? -9.0f : 1.5f) << i;
    }
    for (float v : b1) EXPECT_EQ(v, 4.0f);
    EXPECT_EQ(t.layers[0].local.n, 37);
  });
}

TEST(BucketedStepTest, BadBucketsFailTheStepClearly) {
  RunThreadRanks(2, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Model(), {});
    ASSERT_OK(ar);
    VersionedFactors f;
    std::vector<float> b0(162, 1.0f), b1(37, 1.0f);
    // A layer left out of every bucket.
    ASSERT_OK((*ar)->BeginStep(f));
    ASSERT_OK((*ar)->RunBucket(Bucket0(), b0.data()));
    absl::Status s = (*ar)->EndStep(nullptr);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(s.message(), HasSubstr("1 of 3 layers were in no bucket"));
    // A layer in two buckets (local: refused before any collective).
    ASSERT_OK((*ar)->BeginStep(f));
    ASSERT_OK((*ar)->RunBucket(Bucket0(), b0.data()));
    BucketGroup again = {.layers = {1}, .offsets = {0}, .elements = 96};
    EXPECT_THAT((*ar)->RunBucket(again, b0.data()),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT((*ar)->EndStep(nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument));
    // Overlapping layers in one bucket, unknown layer, steps out of order.
    ASSERT_OK((*ar)->BeginStep(f));
    BucketGroup overlap = {
        .layers = {0, 2}, .offsets = {0, 30}, .elements = 99};
    absl::Status bad = (*ar)->RunBucket(overlap, b0.data());
    EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(bad.message(), HasSubstr("bad bucket layout"));
    EXPECT_FALSE((*ar)->EndStep(nullptr).ok());
    ASSERT_OK((*ar)->BeginStep(f));
    EXPECT_THAT((*ar)->RunBucket({.layers = {7}, .offsets = {0}, .elements = 1},
                                 b0.data()),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_FALSE((*ar)->EndStep(nullptr).ok());
    EXPECT_THAT((*ar)->RunBucket(Bucket1(), b1.data()),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT((*ar)->EndStep(nullptr),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    // The allreduce is still usable.
    ASSERT_OK((*ar)->BeginStep(f));
    ASSERT_OK((*ar)->RunBucket(Bucket0(), b0.data()));
    ASSERT_OK((*ar)->RunBucket(Bucket1(), b1.data()));
    ASSERT_OK((*ar)->EndStep(nullptr));
  });
}

// Ranks whose buckets differ (another framework version, another model)
// get a clear error on every rank instead of a meaningless sum.
TEST(BucketedStepTest, BucketLayoutsAreCheckedAcrossRanks) {
  RunThreadRanks(2, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Model(), {});
    ASSERT_OK(ar);
    std::vector<float> buf(200, 1.0f);
    ASSERT_OK((*ar)->BeginStep(VersionedFactors()));
    BucketGroup g = Bucket0();
    if (comm.rank() == 1) g.offsets[1] = 64;
    absl::Status s = (*ar)->RunBucket(g, buf.data());
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(s.message(), HasSubstr("bucket plan mismatch across ranks"));
    EXPECT_FALSE((*ar)->EndStep(nullptr).ok());
  });
}

// A checkpoint of a bucketed job (owner residuals per bucket layout)
// restored into a fresh allreduce reproduces the next step bit for bit.
TEST(BucketedStepTest, ExportedStateKeepsTheOwnerResidualsOfEachBucket) {
  RunThreadRanks(2, [](Transport& comm) {
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    auto step = [&](AllReduceEngine& ar, int seed, std::vector<float>* b0,
                    std::vector<float>* b1) {
      *b0 = Values(seed, 162);
      *b1 = Values(seed + 100, 37);
      ASSERT_OK(ar.BeginStep(f));
      ASSERT_OK(ar.RunBucket(Bucket0(), b0->data()));
      ASSERT_OK(ar.RunBucket(Bucket1(), b1->data()));
      ASSERT_OK(ar.EndStep(nullptr));
    };
    auto ar = AllReduceEngine::Create(&comm, Model(), {});
    ASSERT_OK(ar);
    std::vector<float> b0, b1, want0, want1, got0, got1;
    for (int s = 0; s < 3; ++s) step(**ar, comm.rank() * 7 + s + 1, &b0, &b1);
    auto state = (*ar)->ExportState();
    ASSERT_OK(state);
    ASSERT_EQ(state->owner_residuals.size(), 1u);  // bucket 0 holds g
    EXPECT_EQ(state->owner_residuals[0].layers, (std::vector<int>{2, 1}));
    step(**ar, 50 + comm.rank(), &want0, &want1);

    auto restored = AllReduceEngine::Create(&comm, Model(), {});
    ASSERT_OK(restored);
    ASSERT_OK((*restored)->ImportState(*state));
    step(**restored, 50 + comm.rank(), &got0, &got1);
    EXPECT_EQ(got0, want0);
    EXPECT_EQ(got1, want1);

    // Without the owner residuals the step differs (they matter).
    AllReduceState no_owner = *state;
    no_owner.owner_residuals.clear();
    auto partial = AllReduceEngine::Create(&comm, Model(), {});
    ASSERT_OK(partial);
    ASSERT_OK((*partial)->ImportState(no_owner));
    step(**partial, 50 + comm.rank(), &got0, &got1);
    EXPECT_NE(got0, want0);
  });
}

}  // namespace
}  // namespace gift::client
