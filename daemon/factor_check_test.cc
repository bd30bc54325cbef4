#include "daemon/factor_check.h"

#include <Eigen/Dense>
#include <cmath>
#include <random>

#include "common/status_matchers.h"
#include "daemon/factor_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "linalg/row_major.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// A second moment with a steep spectrum (condition ~1e8) and `count` rows.
Eigen::MatrixXd Moment(int64_t d, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> n;
  Eigen::MatrixXd g(d, d);
  for (int64_t i = 0; i < d * d; ++i) g.data()[i] = n(gen);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
  const Eigen::MatrixXd q = qr.householderQ();
  Eigen::VectorXd lambda(d);
  for (int64_t i = 0; i < d; ++i) lambda[i] = std::pow(1e-8, double(i) / d);
  return q * lambda.asDiagonal() * q.transpose();
}

shm::FactorData LowRank(const Eigen::MatrixXd& a, int r, double beta,
                        double scale) {
  const int64_t d = a.rows(), k = std::min<int64_t>(d, r + 16);
  const std::vector<float> omega = InitialOmega(d, k, 3);
  const int64_t count = 1000;
  const Eigen::MatrixXd y =
      scale * a * linalg::FromRowMajorFloat(omega, d, k) * count;
  auto builder = FactorBuilder::Create(-1);
  EXPECT_OK(builder);
  auto f = (*builder)->LowRank(linalg::ToRowMajorFloat(y), omega, d, k,
                               scale * a.trace() * count, count, r, beta, k, 9);
  EXPECT_OK(f);
  shm::FactorData out;
  out.version = 1;
  out.r = f->r;
  out.sigma2 = f->sigma2;
  out.beta = beta;
  out.window = 10;
  out.u = f->u;
  out.c = f->c;
  out.c_inv = f->c_inv;
  out.lambda = f->lambda;
  out.omega = f->omega_next;
  return out;
}

shm::FactorData Full(const Eigen::MatrixXd& a, double beta, double scale) {
  const int64_t d = a.rows(), count = 1000;
  auto builder = FactorBuilder::Create(-1);
  EXPECT_OK(builder);
  const Eigen::MatrixXd sum = scale * a * count;
  auto f = (*builder)->Full(linalg::ToRowMajorFloat(sum), d,
                            scale * a.trace() * count, count, beta);
  EXPECT_OK(f);
  shm::FactorData out;
  out.version = 1;
  out.kind = 1;
  out.sigma2 = f->tau;
  out.beta = beta;
  out.window = 10;
  out.t = f->t;
  out.t_inv = f->t_inv;
  out.omega = InitialOmega(d, std::min<int64_t>(d, 16), 3);
  return out;
}

// The bounds hold for what the builder makes, across the whole β range and
// activation scales from tiny to huge: no false alarms.
TEST(FactorCheckTest, RealFactorsPass) {
  for (int64_t d : {24, 96}) {
    const Eigen::MatrixXd a = Moment(d, d);
    const shm::LayerGeometry g{
        d, 8, static_cast<int32_t>(std::min<int64_t>(d, 8 + 16))};
    for (double beta : {kMinBeta, 1e-3, 0.3, 1.0, 1e3, kMaxBeta}) {
      for (double scale : {1e-12, 1.0, 1e12}) {
        SCOPED_TRACE(::testing::Message()
                     << "d " << d << " beta " << beta << " scale " << scale);
        EXPECT_OK(CheckFactor(LowRank(a, 8, beta, scale), g));
        EXPECT_OK(CheckFactor(Full(a, beta, scale), g));
      }
    }
  }
}

// Issue 13: β = 1e308 made the floor infinite and the factor NaN.
TEST(FactorCheckTest, FactorsOfAHugeBetaOrCorruptedValuesFail) {
  const Eigen::MatrixXd a = Moment(24, 1);
  const shm::LayerGeometry g{24, 8, 24};
  shm::FactorData f = LowRank(a, 8, 1.0, 1.0);
  f.beta = 1e308;
  EXPECT_THAT(CheckFactor(f, g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta")));
  f = LowRank(a, 8, 1.0, 1.0);
  f.c_inv[0] = std::nanf("");
  EXPECT_THAT(CheckFactor(f, g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c_inv")));
  f = LowRank(a, 8, 1.0, 1.0);
  f.c[1] = -3;  // amplifies instead of damping
  EXPECT_THAT(CheckFactor(f, g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c[1]")));
  f = LowRank(a, 8, 1.0, 1.0);
  f.sigma2 = 0;
  EXPECT_THAT(CheckFactor(f, g), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("sigma2")));
  shm::FactorData full = Full(a, 0.3, 1.0);
  full.t_inv[5] = INFINITY;
  EXPECT_THAT(CheckFactor(full, g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("T_inv")));
  full = Full(a, 0.3, 1.0);
  full.t[0] *= 1e6f;  // T and T⁻¹ no longer inverse-like
  EXPECT_THAT(CheckFactor(full, g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("T")));
}

}  // namespace
}  // namespace gift::daemon
