#include "daemon/factor_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <random>

#include "common/status_matchers.h"
#include "linalg/eigen_pairs.h"
#include "linalg/linalg_testutil.h"
#include "linalg/row_major.h"
#include "tools/npy.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;
using RowMajorD =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Eigen::VectorXd ToVector(const std::vector<float>& v) {
  return Eigen::Map<const Eigen::VectorXf>(v.data(), v.size()).cast<double>();
}

// x ↦ x + U diag(c) Uᵀ x: the low-rank transform applied to a column.
Eigen::VectorXd Apply(const LowRankFactorData& f, const Eigen::VectorXd& c,
                      const Eigen::VectorXd& x) {
  const Eigen::MatrixXd u = linalg::FromRowMajorFloat(f.u, f.d_in, f.r);
  return x + u * c.asDiagonal() * (u.transpose() * x);
}

std::unique_ptr<FactorBuilder> Cpu() {
  auto b = FactorBuilder::Create(-1);
  EXPECT_OK(b.status());
  return std::move(b).value();
}

// The exact sketch of `count` rows whose second moment is `a`.
struct Sketch {
  std::vector<float> y, omega;
  double trace = 0;
  int64_t count = 0;
};
Sketch ExactSketch(const Eigen::MatrixXd& a, int64_t k, int64_t count,
                   uint64_t seed) {
  Sketch s;
  s.omega = InitialOmega(a.rows(), k, seed);
  s.y = linalg::ToRowMajorFloat(
      a * linalg::FromRowMajorFloat(s.omega, a.rows(), k) * count);
  s.trace = a.trace() * count;
  s.count = count;
  return s;
}

TEST(InitialOmegaTest, OrthonormalAndDeterministic) {
  const std::vector<float> o = InitialOmega(96, 40, 7);
  ASSERT_EQ(o.size(), 96u * 40);
  const Eigen::MatrixXd m = linalg::FromRowMajorFloat(o, 96, 40);
  EXPECT_LT((m.transpose() * m - Eigen::MatrixXd::Identity(40, 40))
                .cwiseAbs()
                .maxCoeff(),
            1e-6);
  EXPECT_EQ(InitialOmega(96, 40, 7), o);
  EXPECT_NE(InitialOmega(96, 40, 8), o);
}

TEST(FactorBuilderTest, CreateCpuAndDevice) {
  std::unique_ptr<FactorBuilder> cpu = Cpu();
  EXPECT_FALSE(cpu->on_device());
  auto gpu = FactorBuilder::Create(0);
  if (!gpu.ok()) {
    EXPECT_THAT(gpu, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(std::string(gpu.status().message()), HasSubstr("device 0"));
  } else {
    EXPECT_TRUE((*gpu)->on_device());
  }
}

TEST(FactorBuilderTest, LowRankMatchesExactTopEigenpairs) {
  const int64_t d = 64, k = 48;
  const int r = 16;
  const double beta = 1.0;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.7), 3);
  const Sketch s = ExactSketch(a, k, /*count=*/512, /*seed=*/11);
  auto f = Cpu()->LowRank(s.y, s.omega, d, k, s.trace, s.count, r, beta,
                          /*k_next=*/40, /*seed=*/12);
  ASSERT_OK(f.status());
  ASSERT_EQ(f->r, r);
  ASSERT_EQ(f->u.size(), static_cast<size_t>(d * r));

  auto exact_pairs = linalg::TopEigenpairs(a, r);
  ASSERT_OK(exact_pairs.status());
  const linalg::LowRankFactor exact = linalg::MakeLowRankFactor(
      *exact_pairs, a.trace(), d, linalg::FactorDamping::Clipped(beta));
  EXPECT_NEAR(f->sigma2, exact.sigma2, 1e-3 * exact.sigma2);
  // λ comes unclipped (for β auto); clipping it gives the exact λ'.
  EXPECT_NEAR(f->trace_mean, a.trace(), 1e-6 * a.trace());
  const Eigen::VectorXd lambda = ToVector(f->lambda);
  for (int j = 0; j < r; ++j) {
    EXPECT_GE(lambda(j), 0) << j;
    EXPECT_NEAR(std::max(lambda(j), f->sigma2), exact.lambda(j),
                1e-3 * exact.lambda(j))
        << j;
    EXPECT_NEAR(f->c[j], exact.c(j), 1e-3) << j;
    EXPECT_NEAR(f->c_inv[j], exact.c_inv(j), 1e-3 * (1 + exact.c_inv(j)));
  }
  // The clipped directions matter: the top ones match the exact vectors.
  const Eigen::MatrixXd u = linalg::FromRowMajorFloat(f->u, d, r);
  for (int j = 0; j < 4; ++j) {
    EXPECT_GT(std::abs(u.col(j).dot(exact.u.col(j))), 1 - 1e-4) << j;
  }
  // T·T⁻¹ = I on random vectors.
  std::mt19937 gen(5);
  std::normal_distribution<double> dist;
  for (int t = 0; t < 3; ++t) {
    Eigen::VectorXd x(d);
    for (int i = 0; i < d; ++i) x(i) = dist(gen);
    const Eigen::VectorXd back =
        Apply(*f, ToVector(f->c_inv), Apply(*f, ToVector(f->c), x));
    EXPECT_LT((back - x).norm(), 1e-5 * x.norm());
    EXPECT_GT((Apply(*f, ToVector(f->c), x) - x).norm(), 0.1 * x.norm());
  }
}

TEST(FactorBuilderTest, NextOmegaStartsWithTheFactor) {
  const int64_t d = 64, k = 48;
  const int r = 16;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.8), 4);
  const Sketch s = ExactSketch(a, k, 100, 1);
  auto f = Cpu()->LowRank(s.y, s.omega, d, k, s.trace, s.count, r, 1.0,
                          /*k_next=*/32, /*seed=*/9);
  ASSERT_OK(f.status());
  ASSERT_EQ(f->omega_next.size(), static_cast<size_t>(d * 32));
  const Eigen::MatrixXd o = linalg::FromRowMajorFloat(f->omega_next, d, 32);
  EXPECT_LT((o.transpose() * o - Eigen::MatrixXd::Identity(32, 32))
                .cwiseAbs()
                .maxCoeff(),
            1e-5);
  const Eigen::MatrixXd u = linalg::FromRowMajorFloat(f->u, d, r);
  EXPECT_LT((o.leftCols(r) - u).cwiseAbs().maxCoeff(), 1e-5);
  // Same inputs and seed: the same Ω' on every node.
  auto again =
      Cpu()->LowRank(s.y, s.omega, d, k, s.trace, s.count, r, 1.0, 32, 9);
  ASSERT_OK(again.status());
  EXPECT_EQ(again->omega_next, f->omega_next);
}

TEST(FactorBuilderTest, LowRankRejectsBadArguments) {
  const int64_t d = 16, k = 8;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.8), 2);
  const Sketch s = ExactSketch(a, k, 10, 1);
  auto b = Cpu();
  auto call = [&](std::vector<float> y, std::vector<float> omega, int64_t dd,
                  int64_t kk, double trace, int64_t count, int r, double beta,
                  int k_next) {
    return b->LowRank(y, omega, dd, kk, trace, count, r, beta, k_next, 1)
        .status();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_OK(call(s.y, s.omega, d, k, s.trace, 10, 4, 1.0, 8));
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 0, 4, 1.0, 8),
              StatusIs(kInvalid));
  EXPECT_THAT(call(s.y, s.omega, d, k, 0, 10, 4, 1.0, 8), StatusIs(kInvalid));
  EXPECT_THAT(call(s.y, s.omega, d, k, NAN, 10, 4, 1.0, 8), StatusIs(kInvalid));
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 10, 0, 1.0, 8),
              StatusIs(kInvalid));
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 10, 9, 1.0, 9),
              StatusIs(kInvalid));  // r > k
  EXPECT_THAT(call(s.y, s.omega, 4, 8, s.trace, 10, 4, 1.0, 4),
              StatusIs(kInvalid));  // k > d
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 10, 4, 1.0, 3),
              StatusIs(kInvalid));  // k_next < r
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 10, 4, 1.0, 17),
              StatusIs(kInvalid));  // k_next > d
  EXPECT_THAT(call(s.y, s.omega, d, k, s.trace, 10, 4, 0.0, 8),
              StatusIs(kInvalid));
  std::vector<float> short_y(s.y.begin(), s.y.end() - 1);
  EXPECT_THAT(call(short_y, s.omega, d, k, s.trace, 10, 4, 1.0, 8),
              StatusIs(kInvalid));
  std::vector<float> bad_y = s.y;
  bad_y[5] = std::numeric_limits<float>::infinity();
  absl::Status st = call(bad_y, s.omega, d, k, s.trace, 10, 4, 1.0, 8);
  EXPECT_THAT(st, StatusIs(kInvalid));
  EXPECT_THAT(std::string(st.message()), HasSubstr("non-finite"));
}

TEST(FactorBuilderTest, FullWhitensTheShiftedMoment) {
  const int64_t d = 48;
  const int64_t count = 200;
  const double beta = 0.3;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.85), 6);
  auto f = Cpu()->Full(linalg::ToRowMajorFloat(a * count), d, a.trace() * count,
                       count, beta);
  ASSERT_OK(f.status());
  EXPECT_NEAR(f->tau, beta * a.trace() / d, 1e-6 * f->tau);
  const Eigen::MatrixXd t = linalg::FromRowMajorFloat(f->t, d, d);
  const Eigen::MatrixXd t_inv = linalg::FromRowMajorFloat(f->t_inv, d, d);
  const Eigen::MatrixXd shifted = a + f->tau * Eigen::MatrixXd::Identity(d, d);
  const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(d, d);
  EXPECT_LT((t * shifted * t - id).cwiseAbs().maxCoeff(), 1e-4);
  EXPECT_LT((t * t_inv - id).cwiseAbs().maxCoeff(), 1e-4);
  EXPECT_LT((t_inv * t_inv - shifted).cwiseAbs().maxCoeff(),
            1e-5 * shifted.cwiseAbs().maxCoeff());
}

TEST(FactorBuilderTest, FullRejectsBadArguments) {
  const int64_t d = 8;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.5), 1);
  auto b = Cpu();
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const std::vector<float> good = linalg::ToRowMajorFloat(a);
  EXPECT_OK(b->Full(good, d, a.trace(), 1, 1.0).status());
  EXPECT_THAT(b->Full(good, d, a.trace(), 0, 1.0), StatusIs(kInvalid));
  EXPECT_THAT(b->Full(good, d, a.trace(), 1, 0.0), StatusIs(kInvalid));
  EXPECT_THAT(b->Full(good, d + 1, a.trace(), 1, 1.0), StatusIs(kInvalid));
  std::vector<float> asym = good;
  asym[1] += 0.1f;
  EXPECT_THAT(b->Full(asym, d, a.trace(), 1, 1.0), StatusIs(kInvalid));
  std::vector<float> nan = good;
  nan[0] = NAN;
  EXPECT_THAT(b->Full(nan, d, a.trace(), 1, 1.0), StatusIs(kInvalid));
  // Indefinite: one eigenvalue strongly negative.
  Eigen::VectorXd spectrum = linalg::testing::Decaying(d, 0.5);
  spectrum(d - 1) = -0.5;
  const Eigen::MatrixXd indefinite = linalg::testing::RandomPsd(spectrum, 1);
  absl::Status st = b->Full(linalg::ToRowMajorFloat(indefinite), d,
                            indefinite.trace(), 1, 1.0)
                        .status();
  EXPECT_THAT(st, StatusIs(kInvalid));
  EXPECT_THAT(std::string(st.message()), HasSubstr("positive semi-definite"));
}

// Real fc2 input activations (tests/data): the sketch-built rank-32 factor
// captures >= 99% of the energy of the exact top-32 eigenvectors (DESIGN §2
// quality target).
TEST(FactorBuilderTest, RealActivationsCaptureTheTopEnergy) {
  auto acts =
      tools::ReadNpy("tests/data/snap/step290.blocks.0.mlp.fc2.acts.npy");
  ASSERT_OK(acts.status());
  ASSERT_EQ(acts->shape.size(), 2u);
  const int64_t rows = acts->shape[0], d = acts->shape[1];
  const int r = 32, k = 48;
  const Eigen::MatrixXd x = linalg::FromRowMajorFloat(acts->data, rows, d);
  const std::vector<float> omega = InitialOmega(d, k, 2024);
  // As a client sums it: Y = Σ aᵀ(aΩ), t = Σ‖a‖², in FP32.
  const linalg::RowMatrixf xf = x.cast<float>();
  const linalg::RowMatrixf y =
      xf.transpose() *
      (xf * Eigen::Map<const linalg::RowMatrixf>(omega.data(), d, k));
  const std::vector<float> y_vec(y.data(), y.data() + y.size());
  auto f =
      Cpu()->LowRank(y_vec, omega, d, k, xf.squaredNorm(), rows, r, 1.0, k, 7);
  ASSERT_OK(f.status());

  const Eigen::MatrixXd a = x.transpose() * x / rows;
  auto exact = linalg::TopEigenpairs(a, r);
  ASSERT_OK(exact.status());
  const Eigen::MatrixXd u = linalg::FromRowMajorFloat(f->u, d, r);
  const double captured = (u.transpose() * a * u).trace();
  EXPECT_GE(captured, 0.99 * exact->lambda.sum());
  EXPECT_GT(f->sigma2, 0);
  for (float c : f->c) EXPECT_LE(c, 0);  // whitening only shrinks
}

}  // namespace
}  // namespace gift::daemon
