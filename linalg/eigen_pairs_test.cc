#include "linalg/eigen_pairs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <random>

#include "common/status_matchers.h"
#include "linalg/linalg_testutil.h"

namespace gift::linalg {
namespace {

using ::gift::linalg::testing::Decaying;
using ::gift::linalg::testing::RandomPsd;
using ::gift::testing::StatusIs;

TEST(TopEigenpairsTest, MatchesSelfAdjointEigenSolver) {
  const int d = 70, r = 9;
  Eigen::MatrixXd a = RandomPsd(Decaying(d, 0.8), 1);
  absl::StatusOr<EigenPairs> e = TopEigenpairs(a, r);
  ASSERT_OK(e);
  ASSERT_EQ(e->u.rows(), d);
  ASSERT_EQ(e->u.cols(), r);
  ASSERT_EQ(e->lambda.size(), r);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ref(a);  // ascending
  for (int j = 0; j < r; ++j) {
    const double want = ref.eigenvalues()(d - 1 - j);
    EXPECT_NEAR(e->lambda(j), want, 1e-10 * ref.eigenvalues()(d - 1)) << j;
    // Same eigenvector up to sign (the gaps are 20%).
    EXPECT_NEAR(std::abs(e->u.col(j).dot(ref.eigenvectors().col(d - 1 - j))),
                1.0, 1e-9)
        << j;
    if (j > 0) {
      EXPECT_GT(e->lambda(j - 1), e->lambda(j));
    }
  }
  EXPECT_LT((e->u.transpose() * e->u - Eigen::MatrixXd::Identity(r, r)).norm(),
            1e-12);
  EXPECT_LT((a * e->u - e->u * e->lambda.asDiagonal()).norm(), 1e-12);
}

TEST(TopEigenpairsTest, ReadsOnlyTheLowerTriangle) {
  const int d = 20;
  Eigen::MatrixXd a = RandomPsd(Decaying(d, 0.7), 2);
  Eigen::MatrixXd garbage_upper = a;
  garbage_upper.triangularView<Eigen::StrictlyUpper>().setConstant(
      std::numeric_limits<double>::quiet_NaN());
  absl::StatusOr<EigenPairs> e1 = TopEigenpairs(a, 4);
  absl::StatusOr<EigenPairs> e2 = TopEigenpairs(garbage_upper, 4);
  ASSERT_OK(e1);
  ASSERT_OK(e2);
  EXPECT_EQ(e1->lambda, e2->lambda);
}

TEST(TopEigenpairsTest, AllEigenpairsIsCompleteAndDescending) {
  const int d = 15;
  Eigen::VectorXd spectrum = Decaying(d, 0.6);
  Eigen::MatrixXd a = RandomPsd(spectrum, 3);
  absl::StatusOr<EigenPairs> e = AllEigenpairs(a);
  ASSERT_OK(e);
  ASSERT_EQ(e->lambda.size(), d);
  EXPECT_LT((e->lambda - spectrum).norm(), 1e-12);
  EXPECT_LT((e->u * e->lambda.asDiagonal() * e->u.transpose() - a).norm(),
            1e-12);
}

TEST(TopEigenpairsTest, RejectsBadArguments) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  Eigen::MatrixXd a = RandomPsd(Decaying(6, 0.5), 4);
  EXPECT_THAT(TopEigenpairs(a, 0), StatusIs(kInvalid));
  EXPECT_THAT(TopEigenpairs(a, 7), StatusIs(kInvalid));
  EXPECT_THAT(TopEigenpairs(Eigen::MatrixXd::Ones(3, 4), 1),
              StatusIs(kInvalid));
  EXPECT_THAT(AllEigenpairs(Eigen::MatrixXd()), StatusIs(kInvalid));
  a(3, 1) = std::numeric_limits<double>::infinity();
  EXPECT_THAT(TopEigenpairs(a, 2), StatusIs(kInvalid));
}

EigenPairs DiagonalPairs(std::initializer_list<double> lambdas, int64_t d) {
  EigenPairs e;
  e.lambda = Eigen::VectorXd(static_cast<Eigen::Index>(lambdas.size()));
  int j = 0;
  for (double l : lambdas) e.lambda(j++) = l;
  e.u = Eigen::MatrixXd::Identity(d, e.lambda.size());
  return e;
}

// A = diag(10, 2, 1, 1, 1, 1): tr A = 16, top-2 Σλ = 12, tail mean
// (16 − 12)/4 = 1, β·tr A/d = 16/6 for β = 1.
TEST(MakeLowRankFactorTest, ClippedFormulasOnDiagonalMatrix) {
  const EigenPairs e = DiagonalPairs({10, 2}, 6);
  const LowRankFactor f =
      MakeLowRankFactor(e, 16.0, 6, FactorDamping::Clipped(1.0));
  const double s2 = 16.0 / 6.0;  // the floor beats the tail mean
  EXPECT_DOUBLE_EQ(f.sigma2, s2);
  EXPECT_DOUBLE_EQ(f.lambda(0), 10.0);
  EXPECT_DOUBLE_EQ(f.lambda(1), s2);  // 2 < σ²: clipped up
  EXPECT_DOUBLE_EQ(f.c(0), std::sqrt(s2 / 10.0) - 1.0);
  EXPECT_DOUBLE_EQ(f.c_inv(0), std::sqrt(10.0 / s2) - 1.0);
  EXPECT_DOUBLE_EQ(f.c(1), 0.0);  // a clipped direction is left alone
  EXPECT_DOUBLE_EQ(f.c_inv(1), 0.0);
  EXPECT_EQ(f.u, e.u);
}

TEST(MakeLowRankFactorTest, TailMeanWinsWithSmallBeta) {
  const LowRankFactor f = MakeLowRankFactor(DiagonalPairs({10, 2}, 6), 16.0, 6,
                                            FactorDamping::Clipped(0.1));
  EXPECT_DOUBLE_EQ(f.sigma2, 1.0);
  EXPECT_DOUBLE_EQ(f.c(1), std::sqrt(0.5) - 1.0);
  EXPECT_DOUBLE_EQ(f.c_inv(1), std::sqrt(2.0) - 1.0);
}

TEST(MakeLowRankFactorTest, PaperLiteralDoesNotClip) {
  // Tail mean 1 beats 1e-3·16/6; unclipped, λ = 0.5 < σ² is amplified.
  const LowRankFactor f = MakeLowRankFactor(DiagonalPairs({10, 0.5}, 6), 14.5,
                                            6, FactorDamping::PaperLiteral());
  const double s2 = (14.5 - 10.5) / 4.0;
  EXPECT_DOUBLE_EQ(f.sigma2, s2);
  EXPECT_DOUBLE_EQ(f.lambda(1), 0.5);
  EXPECT_DOUBLE_EQ(f.c(1), std::sqrt(s2 / 0.5) - 1.0);
  EXPECT_GT(f.c(1), 0.0);
  const LowRankFactor clipped = MakeLowRankFactor(
      DiagonalPairs({10, 0.5}, 6), 14.5, 6, FactorDamping{1e-3, true});
  EXPECT_DOUBLE_EQ(clipped.c(1), 0.0);
}

TEST(MakeLowRankFactorTest, NonPositiveEigenvaluesRaisedToFloor) {
  const LowRankFactor f = MakeLowRankFactor(DiagonalPairs({4, 0, -1e-9}, 5),
                                            4.0, 5, FactorDamping{1e-3, false});
  const double s2 = 1e-3 * 4.0 / 5.0;  // tail mean ≈ 0
  EXPECT_NEAR(f.sigma2, s2, 1e-15);
  for (int j = 1; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(f.lambda(j), f.sigma2);
    EXPECT_DOUBLE_EQ(f.c(j), 0.0);
    EXPECT_TRUE(std::isfinite(f.c_inv(j)));
  }
}

TEST(MakeLowRankFactorTest, FullRankHasNoTail) {
  const LowRankFactor f = MakeLowRankFactor(DiagonalPairs({3, 1}, 2), 4.0, 2,
                                            FactorDamping::Clipped(0.5));
  EXPECT_DOUBLE_EQ(f.sigma2, 1.0);  // max(0, 0.5·4/2)
  EXPECT_DOUBLE_EQ(f.c(0), std::sqrt(1.0 / 3.0) - 1.0);
  EXPECT_DOUBLE_EQ(f.c(1), 0.0);
}

}  // namespace
}  // namespace gift::linalg
