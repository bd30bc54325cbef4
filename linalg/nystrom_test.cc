#include "linalg/nystrom.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/status_matchers.h"
#include "linalg/eigen_pairs.h"
#include "linalg/linalg_testutil.h"

namespace gift::linalg {
namespace {

using ::gift::linalg::testing::RandomPsd;
using ::gift::testing::StatusIs;

Eigen::VectorXd Spectrum(Eigen::Index d, double rate, double floor) {
  Eigen::VectorXd s(d);
  for (Eigen::Index i = 0; i < d; ++i) s(i) = std::pow(rate, i) + floor;
  return s;
}

// tr(Uₙᵀ A Uₙ) / tr(Uₑᵀ A Uₑ): the energy the estimate captures relative to
// the exact top-r eigenvectors.
double EnergyRatio(const Eigen::MatrixXd& a, const Eigen::MatrixXd& u, int r) {
  absl::StatusOr<EigenPairs> exact = TopEigenpairs(a, r);
  EXPECT_TRUE(exact.ok());
  return (u.transpose() * a * u).trace() / exact->lambda.sum();
}

TEST(MakeTestMatrixTest, DeterministicAndOrthonormal) {
  const Eigen::MatrixXd a = MakeTestMatrix(300, 48, nullptr, 42);
  const Eigen::MatrixXd b = MakeTestMatrix(300, 48, nullptr, 42);
  const Eigen::MatrixXd c = MakeTestMatrix(300, 48, nullptr, 43);
  ASSERT_EQ(a.rows(), 300);
  ASSERT_EQ(a.cols(), 48);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(double) * a.size()), 0);
  EXPECT_GT((a - c).norm(), 1.0);
  EXPECT_LT((a.transpose() * a - Eigen::MatrixXd::Identity(48, 48)).norm(),
            1e-12);
  // Gaussian columns, orthonormalised: entries of size ~1/√d, no constant
  // column.
  EXPECT_GT(a.cwiseAbs().maxCoeff(), 1.0 / std::sqrt(300.0));
  EXPECT_LT(a.cwiseAbs().maxCoeff(), 0.5);
}

TEST(MakeTestMatrixTest, KeepsThePreviousFactorFirst) {
  const Eigen::MatrixXd u_prev = MakeTestMatrix(200, 10, nullptr, 7);
  const Eigen::MatrixXd omega = MakeTestMatrix(200, 26, &u_prev, 8);
  ASSERT_EQ(omega.cols(), 26);
  // U_prev itself, bit for bit (a peer rebuilds these columns from U).
  const Eigen::MatrixXd lead = omega.leftCols(10);
  EXPECT_EQ(std::memcmp(lead.data(), u_prev.data(), sizeof(double) * 200 * 10),
            0);
  const Eigen::MatrixXd outside = u_prev - omega * (omega.transpose() * u_prev);
  EXPECT_LT(outside.norm(), 1e-12);
  EXPECT_LT(
      (omega.transpose() * omega - Eigen::MatrixXd::Identity(26, 26)).norm(),
      1e-12);
  const Eigen::MatrixXd again = MakeTestMatrix(200, 26, &u_prev, 8);
  EXPECT_EQ(
      std::memcmp(omega.data(), again.data(), sizeof(double) * omega.size()),
      0);
}

TEST(MakeTestMatrixTest, ViolatedRequirementsGiveEmptyMatrix) {
  const Eigen::MatrixXd u_prev = MakeTestMatrix(20, 5, nullptr, 1);
  EXPECT_EQ(MakeTestMatrix(10, 11, nullptr, 1).size(), 0);
  EXPECT_EQ(MakeTestMatrix(20, 4, &u_prev, 1).size(), 0);
  EXPECT_EQ(MakeTestMatrix(21, 8, &u_prev, 1).size(), 0);
  EXPECT_EQ(MakeTestMatrix(20, 0, nullptr, 1).size(), 0);
}

TEST(NystromTest, CapturesFastDecayingSpectrum) {
  const int d = 256, r = 16, k = 32;
  const Eigen::MatrixXd a = RandomPsd(Spectrum(d, 0.7, 1e-6), 3);
  const Eigen::MatrixXd omega = MakeTestMatrix(d, k, nullptr, 5);
  absl::StatusOr<EigenPairs> e = NystromEigenpairs(a * omega, omega, r);
  ASSERT_OK(e);
  ASSERT_EQ(e->u.cols(), r);
  ASSERT_EQ(e->lambda.size(), r);
  EXPECT_GE(EnergyRatio(a, e->u, r), 0.999);
  EXPECT_LT((e->u.transpose() * e->u - Eigen::MatrixXd::Identity(r, r)).norm(),
            1e-10);
  absl::StatusOr<EigenPairs> exact = TopEigenpairs(a, r);
  ASSERT_OK(exact);
  // The Nyström approximation never overestimates (A − Â is PSD) and the
  // leading eigenvalues sit within the tail energy 0.7³² of the exact ones.
  for (int j = 0; j < 4; ++j) {
    EXPECT_LE(e->lambda(j), exact->lambda(j) * (1 + 1e-10)) << j;
    EXPECT_GE(e->lambda(j), exact->lambda(j) * (1 - 1e-3)) << j;
  }
  for (int j = 1; j < r; ++j) EXPECT_GE(e->lambda(j - 1), e->lambda(j));
}

// f = Q diag(s) Wᵀ with random orthonormal Q (d × k) and W (k × k).
Eigen::MatrixXd WithSingularValues(int d, const Eigen::VectorXd& s,
                                   uint64_t seed) {
  const int k = static_cast<int>(s.size());
  const Eigen::MatrixXd q = MakeTestMatrix(d, k, nullptr, seed);
  const Eigen::MatrixXd w = MakeTestMatrix(k, k, nullptr, seed + 1);
  return q * s.asDiagonal() * w.transpose();
}

// Both routes of the thin SVD give F's leading singular values and an
// orthonormal basis of the leading left singular subspace; the Gram route
// only where F's spread leaves it accurate.
TEST(TopLeftSingularPairsTest, GramRouteWhereAccurateSvdElsewhere) {
  const int d = 352, k = 48, r = 32;
  struct Case {
    double last;  // s_k / s_1 (geometric in between)
    bool gram;
  };
  for (const Case& c : {Case{1e-2, true}, Case{1e-5, true}, Case{1e-7, false},
                        Case{1e-9, false}}) {
    Eigen::VectorXd s(k);
    for (int i = 0; i < k; ++i) s(i) = 3.0 * std::pow(c.last, i / (k - 1.0));
    const Eigen::MatrixXd f = WithSingularValues(d, s, 21);
    absl::StatusOr<internal::LeftSingularPairs> p =
        internal::TopLeftSingularPairs(f, r);
    ASSERT_OK(p);
    EXPECT_EQ(p->gram, c.gram) << c.last;
    ASSERT_EQ(p->u.rows(), d);
    ASSERT_EQ(p->u.cols(), r);
    EXPECT_LT(
        (p->u.transpose() * p->u - Eigen::MatrixXd::Identity(r, r)).norm(),
        1e-12)
        << c.last;
    for (int i = 0; i < r; ++i) {
      EXPECT_NEAR(p->s(i), s(i), 1e-9 * s(i)) << c.last << " " << i;
    }
    // Each column is F's singular vector: F Fᵀ u = s² u.
    const Eigen::MatrixXd ffu = f * (f.transpose() * p->u);
    for (int i = 0; i < r; ++i) {
      EXPECT_LT((ffu.col(i) - s(i) * s(i) * p->u.col(i)).norm(),
                1e-8 * s(0) * s(0))
          << c.last << " " << i;
    }
  }
}

TEST(TopLeftSingularPairsTest, RankDeficientFallsBackToTheSvd) {
  const int d = 60, k = 12, r = 8;
  Eigen::VectorXd s = Eigen::VectorXd::Zero(k);
  s.head(5) << 4, 3, 2, 1, 0.5;  // rank 5 < r
  absl::StatusOr<internal::LeftSingularPairs> p =
      internal::TopLeftSingularPairs(WithSingularValues(d, s, 5), r);
  ASSERT_OK(p);
  EXPECT_FALSE(p->gram);
  EXPECT_NEAR(p->s(4), 0.5, 1e-12);
  EXPECT_NEAR(p->s(7), 0.0, 1e-12);
  EXPECT_LT((p->u.transpose() * p->u - Eigen::MatrixXd::Identity(r, r)).norm(),
            1e-12);
}

TEST(NystromTest, WarmStartImproves) {
  // Slow decay: one sketch in a random basis misses part of the top-r
  // subspace; sketching again in [U_prev | G] is a step of subspace
  // iteration.
  const int d = 400, r = 16, k = 32;
  const Eigen::MatrixXd a = RandomPsd(Spectrum(d, 0.97, 0.01), 9);
  const Eigen::MatrixXd omega0 = MakeTestMatrix(d, k, nullptr, 11);
  absl::StatusOr<EigenPairs> e0 = NystromEigenpairs(a * omega0, omega0, r);
  ASSERT_OK(e0);
  const double cold = EnergyRatio(a, e0->u, r);
  const Eigen::MatrixXd omega1 = MakeTestMatrix(d, k, &e0->u, 12);
  absl::StatusOr<EigenPairs> e1 = NystromEigenpairs(a * omega1, omega1, r);
  ASSERT_OK(e1);
  const double warm = EnergyRatio(a, e1->u, r);
  EXPECT_LT(cold, 0.99);  // the cold start has room to improve
  EXPECT_GT(warm, cold + 0.5 * (1.0 - cold));
}

TEST(NystromTest, ZeroSketchGivesZeroEigenvalues) {
  const Eigen::MatrixXd omega = MakeTestMatrix(30, 8, nullptr, 1);
  absl::StatusOr<EigenPairs> e =
      NystromEigenpairs(Eigen::MatrixXd::Zero(30, 8), omega, 4);
  ASSERT_OK(e);
  EXPECT_EQ(e->lambda, Eigen::VectorXd::Zero(4));
  EXPECT_EQ(e->u, omega.leftCols(4));
}

TEST(NystromTest, RejectsBadArguments) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Eigen::MatrixXd omega = MakeTestMatrix(30, 8, nullptr, 1);
  const Eigen::MatrixXd a = RandomPsd(Spectrum(30, 0.5, 0.0), 2);
  Eigen::MatrixXd y = a * omega;
  EXPECT_THAT(NystromEigenpairs(y, omega, 0), StatusIs(kInvalid));
  EXPECT_THAT(NystromEigenpairs(y, omega, 9), StatusIs(kInvalid));
  EXPECT_THAT(NystromEigenpairs(y.leftCols(7), omega, 4), StatusIs(kInvalid));
  EXPECT_THAT(NystromEigenpairs(y, Eigen::MatrixXd(), 4), StatusIs(kInvalid));
  // Negative definite "A": no shift makes Ωᵀ Y_ν positive definite.
  EXPECT_THAT(NystromEigenpairs(-omega, omega, 4), StatusIs(kInvalid));
  y(5, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(NystromEigenpairs(y, omega, 4), StatusIs(kInvalid));
}

}  // namespace
}  // namespace gift::linalg
