// β auto (DESIGN §2), client side: LayerFactor::WithBeta rebuilds exactly
// the coefficients the daemon's factor builder makes for that β, and probe
// steps of a beta_auto factor report the GIFT round trip for every grid β.
#include "common/beta_grid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"
#include "daemon/factor_builder.h"
#include "linalg/eigen_pairs.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;

constexpr int64_t kD = 16;
constexpr int kR = 4;

// Eigenpairs of a d × d A: U the first r columns of an orthonormal basis,
// λ spread so that β = 0.3 clips none, β = 1 clips the last and β = 3 the
// last two (tr A / d = 1, the tail (tr − Σλ)/(d − r) well below 0.3).
linalg::EigenPairs Pairs() {
  linalg::EigenPairs e;
  const std::vector<double> u = SyntheticOrthonormal(kD, kR, 3);
  e.u.resize(kD, kR);
  for (int64_t i = 0; i < kD; ++i) {
    for (int k = 0; k < kR; ++k) e.u(i, k) = u[i * kR + k];
  }
  e.lambda.resize(kR);
  e.lambda << 8.0, 4.0, 2.0, 0.5;
  return e;
}
constexpr double kTrace = kD;  // tr A per sampled row

// The factor giftd publishes for β = 1, as a rank receives it.
LayerFactor Published(int64_t version) {
  const linalg::EigenPairs e = Pairs();
  Eigen::MatrixXd u = e.u;  // column-major for FinishLowRank
  const daemon::LowRankFactorData d = daemon::internal::FinishLowRank(
      kD, kR, u.data(), e.lambda.data(), kTrace, /*beta=*/1.0,
      /*k_next=*/kR + 2, /*seed=*/5);
  LayerFactor f;
  f.version = version;
  f.d_in = kD;
  f.r = kR;
  f.u = d.u;
  f.c = d.c;
  f.c_inv = d.c_inv;
  f.lambda = d.lambda;
  f.trace_mean = d.trace_mean;
  f.beta_auto = true;
  return f;
}

TEST(BetaGridTest, WithBetaMatchesTheDaemonsBuilderForEveryGridValue) {
  const LayerFactor f = Published(3);
  ASSERT_OK(f.Validate(kD));
  for (double beta : kBetaGridValues) {
    const linalg::LowRankFactor want = linalg::MakeLowRankFactor(
        Pairs(), kTrace, kD, linalg::FactorDamping::Clipped(beta));
    absl::StatusOr<LayerFactor> got = f.WithBeta(beta);
    ASSERT_OK(got);
    EXPECT_EQ(got->version, 3);
    EXPECT_EQ(got->u, f.u);
    for (int k = 0; k < kR; ++k) {
      EXPECT_NEAR(got->c[k], want.c(k), 1e-6) << beta << " " << k;
      EXPECT_NEAR(got->c_inv[k], want.c_inv(k), 1e-5 * (1 + want.c_inv(k)))
          << beta << " " << k;
    }
  }
  // β = 1 is the factor itself; 0.3 amplifies less of the spectrum away.
  absl::StatusOr<LayerFactor> one = f.WithBeta(1.0);
  ASSERT_OK(one);
  for (int k = 0; k < kR; ++k) EXPECT_NEAR(one->c[k], f.c[k], 1e-6);
  EXPECT_LT(f.WithBeta(0.3)->c[kR - 1], f.c[kR - 1]);  // not clipped at 0.3
  EXPECT_FLOAT_EQ(f.WithBeta(3.0)->c[kR - 2], 0.0f);   // clipped at 3
}

TEST(BetaGridTest, WithBetaNeedsEigenvaluesAndAPositiveBeta) {
  LayerFactor f = Published(1);
  EXPECT_THAT(f.WithBeta(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.WithBeta(NAN), StatusIs(absl::StatusCode::kInvalidArgument));
  f.trace_mean = 0;
  EXPECT_THAT(f.WithBeta(1), StatusIs(absl::StatusCode::kFailedPrecondition));
  LayerFactor g = SyntheticLowRank(1, kD, kR, 5);  // no λ
  EXPECT_THAT(g.WithBeta(1), StatusIs(absl::StatusCode::kFailedPrecondition));
  g.lambda = {1, 2};  // not r of them
  EXPECT_THAT(g.Validate(kD), StatusIs(absl::StatusCode::kInvalidArgument));
}

EpochPlan Plan() {
  return *EpochPlan::Create(
      1, 6 * kD,
      {{.name = "g", .shape = {6, kD}, .offset = 0, .path = LayerPath::kGift}});
}

TEST(BetaGridTest, ProbeStepsOfABetaAutoFactorProbeEveryGridBeta) {
  RunThreadRanks(2, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.probe_interval = 2;
    auto ar = AllReduceEngine::Create(&comm, Plan(), o);
    ASSERT_OK(ar);
    for (bool automatic : {true, false}) {
      VersionedFactors factors;
      LayerFactor f = Published(automatic ? 4 : 5);
      f.beta_auto = automatic;
      ASSERT_OK(factors.Put("g", f));
      for (int step = 0; step < 2; ++step) {
        std::vector<float> x(6 * kD);
        for (size_t i = 0; i < x.size(); ++i) {
          // Energy along the top directions (what whitening is for).
          x[i] = SyntheticValue(comm.rank() + 11, i) *
                 (1 + 20 * std::abs(f.u[(i % kD) * kR]));
        }
        StepTelemetry t;
        ASSERT_OK((*ar)->Run(x.data(), factors, &t));
        const LayerTelemetry& lt = t.layers[0];
        ASSERT_EQ(lt.probed, t.probe_step);
        EXPECT_EQ(lt.beta_probed, automatic && t.probe_step);
        if (!lt.beta_probed) continue;
        // The grid's β = 1 is the factor's own round trip.
        EXPECT_NEAR(lt.probe_beta_rel_l2[1], lt.probe_gift_rel_l2,
                    1e-6 * lt.probe_gift_rel_l2);
        for (int b = 0; b < kBetaGrid; ++b) {
          EXPECT_GT(lt.probe_beta_rel_l2[b], 0) << b;
        }
        // Different damping, different round trip.
        EXPECT_NE(lt.probe_beta_rel_l2[0], lt.probe_beta_rel_l2[2]);
      }
    }
  });
}

}  // namespace
}  // namespace gift::client
