#include "linalg/matrix_function.h"

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
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(SymmetricPowerTest, InverseSquareRootTimesSquareRootIsIdentity) {
  const int d = 40;
  const Eigen::MatrixXd a = RandomPsd(Decaying(d, 0.8), 1);
  const double tau = 0.3 * a.trace() / d;
  absl::StatusOr<Eigen::MatrixXd> t = SymmetricPower(a, tau, -0.5);
  absl::StatusOr<Eigen::MatrixXd> t_inv = SymmetricPower(a, tau, 0.5);
  ASSERT_OK(t);
  ASSERT_OK(t_inv);
  const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(d, d);
  EXPECT_LT((*t * *t_inv - id).norm(), 1e-10);
  const Eigen::MatrixXd shifted = a + tau * id;
  EXPECT_LT((*t_inv * *t_inv - shifted).norm(), 1e-12 * shifted.norm());
  EXPECT_LT((*t - t->transpose()).norm(), 1e-14 * t->norm());
  absl::StatusOr<Eigen::MatrixXd> inv = SymmetricPower(a, tau, -1.0);
  ASSERT_OK(inv);
  EXPECT_LT((*inv * shifted - id).norm(), 1e-10);
}

TEST(SymmetricPowerTest, DomainErrors) {
  Eigen::VectorXd s(3);
  s << 2.0, 1.0, -0.5;
  const Eigen::MatrixXd indefinite = RandomPsd(s, 2);
  EXPECT_THAT(SymmetricPower(indefinite, 0.0, 0.5), StatusIs(kInvalid));
  EXPECT_THAT(SymmetricPower(indefinite, 0.0, -1.0), StatusIs(kInvalid));
  // An integer power of an indefinite matrix is fine: A².
  absl::StatusOr<Eigen::MatrixXd> sq = SymmetricPower(indefinite, 0.0, 2.0);
  ASSERT_OK(sq);
  EXPECT_LT((*sq - indefinite * indefinite).norm(), 1e-12);
  // The shift moves the spectrum into the domain.
  EXPECT_OK(SymmetricPower(indefinite, 1.0, -0.5));
  // Singular: negative powers are rejected, positive ones are not.
  s << 1.0, 0.5, 0.0;
  const Eigen::MatrixXd singular = RandomPsd(s, 3);
  EXPECT_THAT(SymmetricPower(singular, 0.0, -0.5), StatusIs(kInvalid));
  absl::StatusOr<Eigen::MatrixXd> root = SymmetricPower(singular, 0.0, 0.5);
  ASSERT_OK(root);
  EXPECT_LT((*root * *root - singular).norm(), 1e-12);
  EXPECT_THAT(SymmetricPower(Eigen::MatrixXd::Ones(2, 3), 0.0, 1.0),
              StatusIs(kInvalid));
  Eigen::MatrixXd nan = singular;
  nan(1, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(SymmetricPower(nan, 1.0, 0.5), StatusIs(kInvalid));
}

TEST(CholeskyLowerTest, FactorsShiftedMatrix) {
  const int d = 30;
  const Eigen::MatrixXd a = RandomPsd(Decaying(d, 0.7), 4);
  const double shift = 1e-3;
  absl::StatusOr<Eigen::MatrixXd> l = CholeskyLower(a, shift);
  ASSERT_OK(l);
  EXPECT_EQ(Eigen::MatrixXd(l->triangularView<Eigen::StrictlyUpper>()),
            Eigen::MatrixXd::Zero(d, d));
  const Eigen::MatrixXd want = a + shift * Eigen::MatrixXd::Identity(d, d);
  EXPECT_LT((*l * l->transpose() - want).norm(), 1e-13 * want.norm());
  EXPECT_GT(l->diagonal().minCoeff(), 0.0);
}

TEST(CholeskyLowerTest, RejectsIndefinite) {
  Eigen::VectorXd s(4);
  s << 3.0, 1.0, 0.2, -0.1;
  const Eigen::MatrixXd a = RandomPsd(s, 5);
  EXPECT_THAT(CholeskyLower(a, 0.0), StatusIs(kInvalid));
  EXPECT_OK(CholeskyLower(a, 0.2));
  EXPECT_THAT(CholeskyLower(Eigen::MatrixXd(), 0.0), StatusIs(kInvalid));
}

TEST(CheckSymmetricPsdTest, AcceptsPsdIncludingRankDeficient) {
  Eigen::VectorXd s = Decaying(12, 0.5);
  s(11) = 0.0;
  EXPECT_OK(CheckSymmetricPsd(RandomPsd(s, 6)));
  EXPECT_OK(CheckSymmetricPsd(Eigen::MatrixXd::Zero(5, 5)));
}

TEST(CheckSymmetricPsdTest, RejectsAsymmetricIndefiniteAndNonFinite) {
  Eigen::MatrixXd a = RandomPsd(Decaying(8, 0.5), 7);
  Eigen::MatrixXd asym = a;
  asym(0, 1) += 1e-3;
  EXPECT_THAT(CheckSymmetricPsd(asym), StatusIs(kInvalid));
  Eigen::VectorXd s = Decaying(8, 0.5);
  s(7) = -0.01;
  EXPECT_THAT(CheckSymmetricPsd(RandomPsd(s, 8)), StatusIs(kInvalid));
  // Within tolerance, a tiny negative eigenvalue is accepted.
  s(7) = -1e-9;
  EXPECT_OK(CheckSymmetricPsd(RandomPsd(s, 8)));
  Eigen::MatrixXd nan = a;
  nan(2, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(CheckSymmetricPsd(nan), StatusIs(kInvalid));
  EXPECT_THAT(CheckSymmetricPsd(Eigen::MatrixXd::Ones(2, 3)),
              StatusIs(kInvalid));
}

}  // namespace
}  // namespace gift::linalg
