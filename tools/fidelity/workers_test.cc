#include "tools/fidelity/workers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "common/status_matchers.h"
#include "tools/fidelity/round_trip.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::StatusIs;

constexpr kernels::QuantizeSpec kE4M3{kernels::Fp8Format::kE4M3, 0};

std::vector<float> Gaussian(int64_t n, uint32_t seed, float scale = 1e-3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * scale;
  return v;
}

std::unique_ptr<Transform> Euclid() {
  static Geometry* geo = new Geometry(std::nullopt, std::nullopt, std::nullopt);
  return *MakeTransform(*ParseMethod("euclid"), *geo);
}

TEST(WorkersTest, ChunksPartitionTheTensor) {
  EXPECT_EQ(ChunkBegin(10, 3, 0), 0);
  EXPECT_EQ(ChunkBegin(10, 3, 1), 3);
  EXPECT_EQ(ChunkBegin(10, 3, 2), 6);
  EXPECT_EQ(ChunkBegin(10, 3, 3), 10);
}

TEST(WorkersTest, WireBytesAreRingEquivalent) {
  const WireBytes b = WireBytesPerWorker(1000, 4, 0);
  // 2 phases × 3/4 × (1000 one-byte codes + 4 scales × 4 bytes).
  EXPECT_DOUBLE_EQ(b.fp8, 2 * 0.75 * (1000 + 16));
  EXPECT_DOUBLE_EQ(b.fp32, 2 * 0.75 * 4000);
  // With blocks of 512 each chunk of 250 still has one scale.
  EXPECT_DOUBLE_EQ(WireBytesPerWorker(1000, 4, 512).fp8, b.fp8);
  // The DESIGN §7 volume target on a realistic tensor.
  const WireBytes big = WireBytesPerWorker(4096 * 4096, 8, 0);
  EXPECT_LE(big.fp8 / big.fp32, 0.255);
  EXPECT_GT(big.fp8 / big.fp32, 0.25);
}

TEST(WorkersTest, OneWorkerEqualsTheOneStepRoundTrip) {
  // With R = 1 the owner re-quantizes FP8 values with (up to an ulp) the
  // same scale, which keeps every code: the result is one round trip.
  const std::vector<float> g = Gaussian(16 * 32, 1);
  absl::StatusOr<std::vector<WorkerStepMetrics>> m =
      SimulateWorkers(g.data(), {1, 1, 16, 32}, *Euclid(), kE4M3, false);
  ASSERT_OK(m);
  const RowMatrixd w =
      Eigen::Map<const RowMatrixf>(g.data(), 16, 32).cast<double>();
  absl::StatusOr<ErrorMetrics> one = OneStepRoundTrip(w, *Euclid(), kE4M3);
  ASSERT_OK(one);
  ASSERT_EQ(m->size(), 1u);
  EXPECT_NEAR((*m)[0].rel_l2, one->rel_l2, 1e-4 * one->rel_l2);
  EXPECT_DOUBLE_EQ((*m)[0].drift, (*m)[0].rel_l2);
}

TEST(WorkersTest, AverageErrorIsAtTheFp8Floor) {
  const int64_t steps = 3, workers = 4, d_out = 32, d_in = 64;
  const std::vector<float> g = Gaussian(steps * workers * d_out * d_in, 2);
  absl::StatusOr<std::vector<WorkerStepMetrics>> m = SimulateWorkers(
      g.data(), {steps, workers, d_out, d_in}, *Euclid(), kE4M3, false);
  ASSERT_OK(m);
  ASSERT_EQ(m->size(), 3u);
  for (const WorkerStepMetrics& s : *m) {
    // Two quantizations of ~2.4% each (averaging halves the first).
    EXPECT_GT(s.rel_l2, 0.01);
    EXPECT_LT(s.rel_l2, 0.06);
    EXPECT_GT(s.cos, 0.998);
  }
  EXPECT_EQ((*m)[2].step, 2);
}

TEST(WorkersTest, ErrorFeedbackStopsTheDrift) {
  // The same gradients every step: without error feedback the same rounding
  // error repeats and the drift stays at the one-step error; with it the
  // residual is re-sent and the drift of the sum decays like 1/T.
  const int64_t steps = 20, workers = 4, d_out = 16, d_in = 64;
  const std::vector<float> one = Gaussian(workers * d_out * d_in, 3);
  std::vector<float> g;
  for (int t = 0; t < steps; ++t) g.insert(g.end(), one.begin(), one.end());
  for (const char* name : {"euclid", "lowrankA_8:1.0"}) {
    std::mt19937 rng(4);
    std::normal_distribution<float> n(0, 1);
    RowMatrixf x(256, d_in);
    for (int i = 0; i < x.size(); ++i) {
      x.data()[i] = n(rng) * (1 + 10 * (i % d_in < 4));
    }
    Geometry geo(std::nullopt, std::nullopt, x);
    std::unique_ptr<Transform> t = *MakeTransform(*ParseMethod(name), geo);
    const WorkerShape shape{steps, workers, d_out, d_in};
    absl::StatusOr<std::vector<WorkerStepMetrics>> ef =
        SimulateWorkers(g.data(), shape, *t, kE4M3, true);
    absl::StatusOr<std::vector<WorkerStepMetrics>> no_ef =
        SimulateWorkers(g.data(), shape, *t, kE4M3, false);
    ASSERT_OK(ef);
    ASSERT_OK(no_ef);
    EXPECT_GT(no_ef->back().drift, 0.5 * no_ef->front().drift) << name;
    EXPECT_LT(ef->back().drift, 0.25 * no_ef->back().drift) << name;
    // The first step has no residual yet: both paths agree.
    EXPECT_DOUBLE_EQ(ef->front().rel_l2, no_ef->front().rel_l2) << name;
  }
}

TEST(WorkersTest, Fp4WireBytes) {
  // 4 chunks of 250: nvfp4 125 + 16 + 4 bytes each, mxfp4 125 + 8.
  const WireBytes nv =
      WireBytesPerWorker(1000, 4, WireSpec(kernels::Fp4Format::kNvfp4));
  EXPECT_DOUBLE_EQ(nv.fp8, 2 * 0.75 * 4 * (125 + 16 + 4));
  const WireBytes mx =
      WireBytesPerWorker(1000, 4, WireSpec(kernels::Fp4Format::kMxfp4));
  EXPECT_DOUBLE_EQ(mx.fp8, 2 * 0.75 * 4 * (125 + 8));
  const WireBytes big =
      WireBytesPerWorker(4096 * 4096, 8, WireSpec(kernels::Fp4Format::kNvfp4));
  EXPECT_LE(big.fp8 / big.fp32, 0.141);  // (1/2 + 1/16) / 4
}

TEST(WorkersTest, Fp4EuclidWithErrorFeedbackDriftsLess) {
  // Fresh gradients every step (fixed seed), 4-bit: the Euclidean baseline
  // with error feedback re-sends what it rounded away, so the drift of the
  // summed gradient ends far below the one without.
  const int64_t steps = 16, workers = 4, d_out = 16, d_in = 64;
  const std::vector<float> g = Gaussian(steps * workers * d_out * d_in, 5);
  for (kernels::Fp4Format f :
       {kernels::Fp4Format::kNvfp4, kernels::Fp4Format::kMxfp4}) {
    const WorkerShape shape{steps, workers, d_out, d_in};
    absl::StatusOr<std::vector<WorkerStepMetrics>> ef =
        SimulateWorkers(g.data(), shape, *Euclid(), WireSpec(f), true);
    absl::StatusOr<std::vector<WorkerStepMetrics>> no_ef =
        SimulateWorkers(g.data(), shape, *Euclid(), WireSpec(f), false);
    ASSERT_OK(ef);
    ASSERT_OK(no_ef);
    const char* name = kernels::Fp4FormatName(f);
    EXPECT_DOUBLE_EQ(ef->front().rel_l2, no_ef->front().rel_l2) << name;
    // One 4-bit step loses several percent, far above FP8's floor.
    EXPECT_GT(no_ef->front().rel_l2, 0.05) << name;
    EXPECT_LT(ef->back().drift, 0.5 * no_ef->back().drift) << name;
  }
}

TEST(WorkersTest, RejectsDegenerateShapes) {
  const std::vector<float> g(4, 1.0f);
  EXPECT_THAT(SimulateWorkers(g.data(), {1, 8, 1, 1}, *Euclid(), kE4M3, true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SimulateWorkers(g.data(), {0, 1, 2, 2}, *Euclid(), kE4M3, true),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::fidelity
