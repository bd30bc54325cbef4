// The owner's capped error-feedback release
// (AllReduceEngineOptions::owner_release_cap, VectorMath::AddCapped): after
// an energetic step the chunk owner's residual is released over the next
// steps, at most cap × the norm of each step's sum, instead of all at once;
// nothing is dropped, so the running sum still ends within about one step's
// error of the exact one. Both paths (GIFT and Euclidean with error
// feedback), 4 thread ranks, NVFP4. The figures are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "client/allreduce_engine.h"
#include "client/host_fp8_backend.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using kernels::Fp4Format;

constexpr int kWorld = 4, kRows = 64, kCols = 128, kN = kRows * kCols;
constexpr int kSteps = 30, kBurst = 10;  // step kBurst: 8× the energy

EpochPlan OneLayer(LayerPath path) {
  return *EpochPlan::Create(1, kN,
                            {{.name = "fc",
                              .shape = {kRows, kCols},
                              .offset = 0,
                              .path = path,
                              .format = Fp4Format::kNvfp4}});
}

// Rank p's gradient at step t: independent across ranks and steps.
std::vector<float> Gradient(int p, int t) {
  const float scale = t == kBurst ? 8.0f : 1.0f;
  std::vector<float> g(kN);
  for (int64_t i = 0; i < kN; ++i) {
    g[i] = scale * SyntheticGaussian(1000 * t + p + 3, i);
  }
  return g;
}

struct Outcome {
  std::vector<double> error;  // ‖applied − mean‖ per step (rank 0)
  double drift = 0;           // ‖Σ applied − Σ mean‖ over the steps
  bool same_on_every_rank = true;
  std::vector<std::vector<float>> applied;  // rank 0's, per step
};

Outcome RunSteps(LayerPath path, float cap) {
  std::vector<std::vector<std::vector<float>>> out(kWorld);
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.owner_release_cap = cap;
    auto ar = AllReduceEngine::Create(&comm, OneLayer(path), o);
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("fc", SyntheticLowRank(1, kCols, 8, 101)));
    for (int t = 0; t < kSteps; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t);
      StepTelemetry tel;
      ASSERT_OK((*ar)->Run(x.data(), f, &tel));
      ASSERT_EQ(tel.layers[0].path, path);
      out[comm.rank()].push_back(std::move(x));
    }
  });
  Outcome r;
  r.applied = out[0];
  for (int p = 1; p < kWorld; ++p) {
    if (out[p] != out[0]) r.same_on_every_rank = false;
  }
  std::vector<double> sum(kN, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<double> mean(kN, 0.0);
    for (int p = 0; p < kWorld; ++p) {
      const std::vector<float> g = Gradient(p, t);
      for (int64_t i = 0; i < kN; ++i) mean[i] += g[i] / double(kWorld);
    }
    double err = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const double d = out[0][t][i] - mean[i];
      err += d * d;
      sum[i] += d;
    }
    r.error.push_back(std::sqrt(err));
  }
  double d = 0;
  for (double s : sum) d += s * s;
  r.drift = std::sqrt(d);
  return r;
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

class ReleaseCapTest : public ::testing::TestWithParam<LayerPath> {};

TEST_P(ReleaseCapTest, AnEnergeticStepIsReleasedOverTheNextStepsNotDropped) {
  const Outcome plain = RunSteps(GetParam(), 0.0f);
  const Outcome capped = RunSteps(GetParam(), 0.25f);
  const double typical = Median(plain.error);
  std::cout << (GetParam() == LayerPath::kGift ? "gift" : "euclid")
            << " nvfp4 W=" << kWorld << ": error after the 8x step "
            << plain.error[kBurst + 1] << " without the cap, "
            << capped.error[kBurst + 1] << " with 0.25 (typical " << typical
            << "); drift over " << kSteps << " steps " << plain.drift << " and "
            << capped.drift << std::endl;
  EXPECT_TRUE(plain.same_on_every_rank);
  EXPECT_TRUE(capped.same_on_every_rank);
  // The cap acts only after the energetic step: before it, the same bits.
  for (int t = 0; t <= kBurst; ++t) {
    EXPECT_EQ(capped.applied[t], plain.applied[t]) << "step " << t;
  }
  EXPECT_LT(capped.error[kBurst + 1], 0.85 * plain.error[kBurst + 1]);
  // Nothing dropped: the running sum ends within a step's error.
  EXPECT_LT(capped.drift, typical);
  EXPECT_LT(capped.drift, 1.5 * plain.drift + 0.1 * typical);
}

// A cap that never binds gives the uncapped bits (f = 1 is AddInPlace).
TEST_P(ReleaseCapTest, ACapThatNeverBindsChangesNoBit) {
  const Outcome plain = RunSteps(GetParam(), 0.0f);
  const Outcome loose = RunSteps(GetParam(), 1e6f);
  EXPECT_EQ(loose.applied, plain.applied);
}

INSTANTIATE_TEST_SUITE_P(Paths, ReleaseCapTest,
                         ::testing::Values(LayerPath::kGift,
                                           LayerPath::kEuclid));

TEST(ReleaseCapOptionsTest, AnInvalidCapIsRefused) {
  RunThreadRanks(1, [&](Transport& comm) {
    for (float cap : {-0.5f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
      AllReduceEngineOptions o;
      o.owner_release_cap = cap;
      auto ar = AllReduceEngine::Create(&comm, OneLayer(LayerPath::kGift), o);
      EXPECT_EQ(ar.status().code(), absl::StatusCode::kInvalidArgument) << cap;
      EXPECT_NE(ar.status().message().find("owner_release_cap"),
                std::string::npos);
    }
  });
}

TEST(ReleaseCapOptionsTest, RanksWithDifferentCapsAreRefused) {
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.owner_release_cap = comm.rank() == 2 ? 0.5f : 0.25f;
    auto ar = AllReduceEngine::Create(&comm, OneLayer(LayerPath::kGift), o);
    EXPECT_EQ(ar.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(ar.status().message().find("owner_release_cap"),
              std::string::npos);
  });
}

TEST(ReleaseCapOptionsTest, MinusZeroAndZeroAreTheSameSetting) {
  // Both mean "no cap" and pass the check (>= 0): ranks that spell it
  // differently are not a mismatch.
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.owner_release_cap = comm.rank() % 2 == 0 ? -0.0f : 0.0f;
    EXPECT_OK(AllReduceEngine::Create(&comm, OneLayer(LayerPath::kGift), o));
  });
}

TEST(HostAddCappedTest, ReleasesUpToTheCapAndKeepsTheRest) {
  HostVectorMath math;
  // ‖acc‖ = 5, ‖res‖ = 10: f = 0.5 · 5 / 10 = 0.25.
  std::vector<float> acc = {3, 4, 0}, res = {0, 6, 8}, keep(3, -1);
  ASSERT_OK(math.AddCapped(acc.data(), res.data(), 3, 0.5f, keep.data()));
  EXPECT_EQ(acc, (std::vector<float>{3, 5.5f, 2}));
  EXPECT_EQ(keep, (std::vector<float>{0, 4.5f, 6}));
  // Within the cap: AddInPlace's bits, nothing kept.
  std::vector<float> a2 = {0.1f, 1}, r2 = {0.2f, 0}, k2(2, -1);
  ASSERT_OK(math.AddCapped(a2.data(), r2.data(), 2, 0.5f, k2.data()));
  EXPECT_EQ(a2[0], 0.1f + 0.2f);
  EXPECT_EQ(k2, (std::vector<float>{0, 0}));
  // A zero sum releases nothing; a non-finite one releases everything.
  std::vector<float> z = {0, 0}, rz = {1, 2}, kz(2);
  ASSERT_OK(math.AddCapped(z.data(), rz.data(), 2, 0.25f, kz.data()));
  EXPECT_EQ(z, (std::vector<float>{0, 0}));
  EXPECT_EQ(kz, rz);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> an = {nan, 1}, rn = {5, 5}, kn(2, -1);
  ASSERT_OK(math.AddCapped(an.data(), rn.data(), 2, 0.25f, kn.data()));
  EXPECT_EQ(an[1], 6.0f);
  EXPECT_EQ(kn, (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace gift::client
