// GPU factor builder against the CPU one on seeded data (label gpu).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>

#include "common/status_matchers.h"
#include "daemon/factor_builder.h"
#include "kernels/gpu.h"
#include "linalg/linalg_testutil.h"
#include "linalg/row_major.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;

// Eigenvector signs are arbitrary: compare U diag(c) Uᵀ.
Eigen::MatrixXd Operator(const LowRankFactorData& f,
                         const std::vector<float>& c) {
  const Eigen::MatrixXd u = linalg::FromRowMajorFloat(f.u, f.d_in, f.r);
  const Eigen::VectorXd cv =
      Eigen::Map<const Eigen::VectorXf>(c.data(), c.size()).cast<double>();
  return u * cv.asDiagonal() * u.transpose();
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return m;
}

class FactorBuilderGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::Available()) GTEST_SKIP() << "no GPU";
    auto cpu = FactorBuilder::Create(-1);
    ASSERT_OK(cpu.status());
    cpu_ = std::move(cpu).value();
    auto gpu = FactorBuilder::Create(0);
    ASSERT_OK(gpu.status());
    gpu_ = std::move(gpu).value();
    ASSERT_TRUE(gpu_->on_device());
  }
  std::unique_ptr<FactorBuilder> cpu_, gpu_;
};

TEST_F(FactorBuilderGpuTest, BadDeviceIsAFailedPrecondition) {
  EXPECT_THAT(FactorBuilder::Create(gpu::DeviceCount()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(FactorBuilderGpuTest, LowRankMatchesCpu) {
  const int64_t d = 256, k = 48, count = 512;
  const int r = 32;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.9), 21);
  const std::vector<float> omega = InitialOmega(d, k, 5);
  const std::vector<float> y = linalg::ToRowMajorFloat(
      a * linalg::FromRowMajorFloat(omega, d, k) * count);
  const double trace = a.trace() * count;
  auto c = cpu_->LowRank(y, omega, d, k, trace, count, r, 1.0, k, 77);
  auto g = gpu_->LowRank(y, omega, d, k, trace, count, r, 1.0, k, 77);
  ASSERT_OK(c.status());
  ASSERT_OK(g.status());
  EXPECT_NEAR(g->sigma2, c->sigma2, 1e-6 * c->sigma2);
  ASSERT_EQ(g->lambda.size(), static_cast<size_t>(r));
  for (int j = 0; j < r; ++j) {
    EXPECT_NEAR(g->lambda[j], c->lambda[j], 1e-5 * c->lambda[j]) << j;
  }
  EXPECT_LT(MaxAbsDiff(g->c, c->c), 1e-5);
  EXPECT_LT(MaxAbsDiff(g->c_inv, c->c_inv), 1e-4);
  const Eigen::MatrixXd op = Operator(*c, c->c);
  EXPECT_GT(op.cwiseAbs().maxCoeff(), 0.1);  // not a trivial factor
  EXPECT_LT((Operator(*g, g->c) - op).cwiseAbs().maxCoeff(), 1e-4);
  // Ω' is sign-dependent in its first r columns; its span is not.
  const Eigen::MatrixXd oc = linalg::FromRowMajorFloat(c->omega_next, d, k);
  const Eigen::MatrixXd og = linalg::FromRowMajorFloat(g->omega_next, d, k);
  EXPECT_LT((og * og.transpose() - oc * oc.transpose()).cwiseAbs().maxCoeff(),
            1e-4);
}

TEST_F(FactorBuilderGpuTest, FullMatchesCpu) {
  const int64_t d = 192, count = 300;
  const Eigen::MatrixXd a =
      linalg::testing::RandomPsd(linalg::testing::Decaying(d, 0.95), 8);
  const std::vector<float> sum = linalg::ToRowMajorFloat(a * count);
  auto c = cpu_->Full(sum, d, a.trace() * count, count, 0.3);
  auto g = gpu_->Full(sum, d, a.trace() * count, count, 0.3);
  ASSERT_OK(c.status());
  ASSERT_OK(g.status());
  EXPECT_NEAR(g->tau, c->tau, 1e-9 * c->tau);
  double scale = 0;
  for (float v : c->t) scale = std::max(scale, std::abs(double{v}));
  EXPECT_GT(scale, 0);
  EXPECT_LT(MaxAbsDiff(g->t, c->t), 1e-5 * scale);
  EXPECT_LT(MaxAbsDiff(g->t_inv, c->t_inv), 1e-5);
  // Indefinite input is rejected on the device path too.
  Eigen::VectorXd spectrum = linalg::testing::Decaying(d, 0.95);
  spectrum(d - 1) = -0.5;
  const Eigen::MatrixXd bad = linalg::testing::RandomPsd(spectrum, 8);
  EXPECT_THAT(gpu_->Full(linalg::ToRowMajorFloat(bad), d, 1.0, 1, 0.3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::daemon
