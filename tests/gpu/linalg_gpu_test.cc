// cuSOLVER factor math vs the LAPACK/Eigen CPU versions on seeded data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>

#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "linalg/cuda_linalg.h"
#include "linalg/eigen_pairs.h"
#include "linalg/linalg_testutil.h"
#include "linalg/matrix_function.h"
#include "linalg/nystrom.h"

namespace gift::linalg {
namespace {

using ::gift::testing::StatusIs;

Eigen::MatrixXd RandomPsd(Eigen::Index d, double rate, uint32_t seed) {
  return testing::RandomPsd(
      (testing::Decaying(d, rate).array() + 1e-4).matrix(), seed);
}

// ‖U₁ᵀU₂‖_F² / r: 1 when the two r-dimensional subspaces coincide.
double SubspaceAgreement(const Eigen::MatrixXd& u1, const Eigen::MatrixXd& u2) {
  return (u1.transpose() * u2).squaredNorm() / u1.cols();
}

std::unique_ptr<gpu::Context> MakeContext() {
  auto ctx = gpu::Context::Create();
  EXPECT_OK(ctx);
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

class TopEigenpairsGpuTest : public ::testing::TestWithParam<int> {};

TEST_P(TopEigenpairsGpuTest, MatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const int d = 300, r = GetParam();
  const Eigen::MatrixXd a = RandomPsd(d, 0.9, 1);
  absl::StatusOr<EigenPairs> cpu = TopEigenpairs(a, r);
  absl::StatusOr<EigenPairs> gpu = cuda::TopEigenpairs(*ctx, a, r);
  ASSERT_OK(cpu);
  ASSERT_OK(gpu);
  ASSERT_EQ(gpu->u.rows(), d);
  ASSERT_EQ(gpu->u.cols(), r);
  for (int j = 0; j < r; ++j) {
    EXPECT_NEAR(gpu->lambda(j), cpu->lambda(j), 1e-9 * cpu->lambda(0)) << j;
  }
  const int top = std::min(r, 32);  // well-separated leading vectors
  EXPECT_NEAR(SubspaceAgreement(gpu->u.leftCols(top), cpu->u.leftCols(top)),
              1.0, 1e-9);
  EXPECT_LT((a * gpu->u - gpu->u * gpu->lambda.asDiagonal()).norm(), 1e-10);
}

INSTANTIATE_TEST_SUITE_P(Ranks, TopEigenpairsGpuTest,
                         ::testing::Values(1, 32, 300));

TEST(NystromGpuTest, MatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const int d = 1024, r = 32, k = 48;
  const Eigen::MatrixXd a = RandomPsd(d, 0.8, 2);
  const Eigen::MatrixXd omega = MakeTestMatrix(d, k, nullptr, 3);
  const Eigen::MatrixXd y = a * omega;
  absl::StatusOr<EigenPairs> cpu = NystromEigenpairs(y, omega, r);
  absl::StatusOr<EigenPairs> gpu = cuda::NystromEigenpairs(*ctx, y, omega, r);
  ASSERT_OK(cpu);
  ASSERT_OK(gpu);
  for (int j = 0; j < r; ++j) {
    EXPECT_NEAR(gpu->lambda(j), cpu->lambda(j), 1e-9 * cpu->lambda(0)) << j;
  }
  EXPECT_NEAR(SubspaceAgreement(gpu->u.leftCols(16), cpu->u.leftCols(16)), 1.0,
              1e-9);
  EXPECT_THAT(cuda::NystromEigenpairs(*ctx, y, omega, k + 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cuda::NystromEigenpairs(*ctx, -omega, omega, r),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SymmetricPowerGpuTest, MatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const int d = 256;
  const Eigen::MatrixXd a = RandomPsd(d, 0.95, 4);
  const double tau = 0.3 * a.trace() / d;
  for (const double power : {-0.5, 0.5, 2.0}) {
    absl::StatusOr<Eigen::MatrixXd> cpu = SymmetricPower(a, tau, power);
    absl::StatusOr<Eigen::MatrixXd> gpu =
        cuda::SymmetricPower(*ctx, a, tau, power);
    ASSERT_OK(cpu);
    ASSERT_OK(gpu);
    EXPECT_LT((*gpu - *cpu).norm(), 1e-9 * cpu->norm()) << power;
  }
  Eigen::MatrixXd indefinite = a;
  indefinite.diagonal().array() -= 2.0;
  EXPECT_THAT(cuda::SymmetricPower(*ctx, indefinite, 0.0, -0.5),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LinalgGpuArgsTest, RejectsBadArguments) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(cuda::TopEigenpairs(*ctx, Eigen::MatrixXd::Ones(3, 4), 1),
              StatusIs(kInvalid));
  EXPECT_THAT(cuda::TopEigenpairs(*ctx, Eigen::MatrixXd::Identity(3, 3), 4),
              StatusIs(kInvalid));
  Eigen::MatrixXd nan = Eigen::MatrixXd::Identity(3, 3);
  nan(2, 0) = std::nan("");
  EXPECT_THAT(cuda::SymmetricPower(*ctx, nan, 0.0, 0.5), StatusIs(kInvalid));
}

}  // namespace
}  // namespace gift::linalg
