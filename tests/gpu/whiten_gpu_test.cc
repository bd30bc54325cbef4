// CUDA whitening vs the CPU reference on seeded random data.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "kernels/whiten.h"
#include "tests/gpu/gpu_testutil.h"

namespace gift::kernels {
namespace {

using ::gift::gpu_testing::RandomVector;
using ::gift::gpu_testing::RelErr;
using ::gift::gpu_testing::ToDevice;
using ::gift::gpu_testing::ToHost;
using ::gift::testing::StatusIs;

std::vector<float> OrthonormalFactor(int64_t d, int64_t r, uint32_t seed) {
  std::vector<float> g = RandomVector(d * r, seed);
  Eigen::MatrixXd m(d, r);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < r; ++j) m(i, j) = g[i * r + j];
  Eigen::MatrixXd q =
      m.householderQr().householderQ() * Eigen::MatrixXd::Identity(d, r);
  std::vector<float> u(d * r);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < r; ++j) u[i * r + j] = static_cast<float>(q(i, j));
  return u;
}

std::vector<float> Coefficients(int64_t r, bool inverse) {
  std::vector<float> c(r);
  for (int64_t j = 0; j < r; ++j) {
    const double ratio = std::max(std::pow(10.0, -0.25 * j), 0.01) / 0.01;
    c[j] = static_cast<float>(inverse ? std::sqrt(ratio) - 1.0
                                      : std::sqrt(1.0 / ratio) - 1.0);
  }
  return c;
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// A device buffer of n floats filled with NaN bytes (0xFF), so that any
// element the kernel does not write shows up as non-finite.
gpu::DeviceBuffer<float> Poisoned(size_t n) {
  gpu::DeviceBuffer<float> d;
  EXPECT_OK(d.Allocate(n));
  EXPECT_OK(d.Fill(0xFF));
  return d;
}

struct Shapes {
  int64_t rows, d, r;
};

class WhitenGpuTest : public ::testing::TestWithParam<Shapes> {};

TEST_P(WhitenGpuTest, LowRankMatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, r] = GetParam();
  const std::vector<float> x = RandomVector(rows * d, 1);
  const std::vector<float> add = RandomVector(rows * d, 2, 0.1f);
  const std::vector<float> u = OrthonormalFactor(d, r, 3);
  const std::vector<float> c = Coefficients(r, false);
  std::vector<float> ws(WhitenWorkspaceFloats(rows, d, r));
  for (const bool with_add : {false, true}) {
    std::vector<float> want(rows * d);
    ASSERT_OK(ApplyLowRank(x.data(), rows, {u.data(), c.data(), d, r},
                           with_add ? add.data() : nullptr, want.data(),
                           ws.data()));
    auto dx = ToDevice(x), dadd = ToDevice(add), du = ToDevice(u),
         dc = ToDevice(c);
    auto dout = Poisoned(rows * d), dws = Poisoned(ws.size());
    ASSERT_OK(cuda::ApplyLowRank(
        ctx, dx.get(), rows, {du.get(), dc.get(), d, r},
        with_add ? dadd.get() : nullptr, dout.get(), dws.get()));
    ASSERT_OK(ctx.Synchronize());
    const std::vector<float> got = ToHost(dout, rows * d);
    ASSERT_TRUE(AllFinite(got)) << "with_add=" << with_add;
    EXPECT_LE(RelErr(got, want), 1e-5) << "with_add=" << with_add;
  }
}

TEST_P(WhitenGpuTest, InPlaceAndAliasedAddMatchCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, r] = GetParam();
  const std::vector<float> x = RandomVector(rows * d, 4);
  const std::vector<float> add = RandomVector(rows * d, 5, 0.1f);
  const std::vector<float> u = OrthonormalFactor(d, r, 6);
  const std::vector<float> c = Coefficients(r, true);
  std::vector<float> ws(WhitenWorkspaceFloats(rows, d, r));
  std::vector<float> want(rows * d);
  ASSERT_OK(ApplyLowRank(x.data(), rows, {u.data(), c.data(), d, r}, add.data(),
                         want.data(), ws.data()));
  auto du = ToDevice(u), dc = ToDevice(c), dws = Poisoned(ws.size());
  auto dx = ToDevice(x), dadd = ToDevice(add);
  ASSERT_OK(cuda::ApplyLowRank(ctx, dx.get(), rows, {du.get(), dc.get(), d, r},
                               dadd.get(), dx.get(), dws.get()));
  auto dx2 = ToDevice(x), dadd2 = ToDevice(add);
  ASSERT_OK(cuda::ApplyLowRank(ctx, dx2.get(), rows, {du.get(), dc.get(), d, r},
                               dadd2.get(), dadd2.get(), dws.get()));
  ASSERT_OK(ctx.Synchronize());
  EXPECT_LE(RelErr(ToHost(dx, rows * d), want), 1e-5);
  EXPECT_LE(RelErr(ToHost(dadd2, rows * d), want), 1e-5);
}

TEST_P(WhitenGpuTest, DenseMatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, r] = GetParam();
  const std::vector<float> x = RandomVector(rows * d, 7);
  const std::vector<float> add = RandomVector(rows * d, 8, 0.1f);
  const std::vector<float> t = RandomVector(d * d, 9, 0.05f);
  std::vector<float> want(rows * d);
  ASSERT_OK(ApplyDense(x.data(), rows, d, t.data(), add.data(), want.data()));
  auto dx = ToDevice(x), dadd = ToDevice(add), dt = ToDevice(t);
  auto dout = Poisoned(rows * d);
  ASSERT_OK(cuda::ApplyDense(ctx, dx.get(), rows, d, dt.get(), dadd.get(),
                             dout.get()));
  ASSERT_OK(ctx.Synchronize());
  const std::vector<float> got = ToHost(dout, rows * d);
  ASSERT_TRUE(AllFinite(got));
  EXPECT_LE(RelErr(got, want), 1e-5);
  EXPECT_THAT(
      cuda::ApplyDense(ctx, dx.get(), rows, d, dt.get(), nullptr, dx.get()),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(WhitenGpuTest, ReprojectResidualMatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, r] = GetParam();
  const int64_t r_new = std::max<int64_t>(1, r / 2);
  const std::vector<float> residual = RandomVector(rows * d, 10, 0.1f);
  const std::vector<float> u_old = OrthonormalFactor(d, r, 11);
  const std::vector<float> u_new = OrthonormalFactor(d, r_new, 12);
  const std::vector<float> c_inv = Coefficients(r, true);
  const std::vector<float> c_new = Coefficients(r_new, false);
  std::vector<float> ws(WhitenWorkspaceFloats(rows, d, r));
  std::vector<float> want = residual;
  ASSERT_OK(
      ReprojectResidual(want.data(), rows, {u_old.data(), c_inv.data(), d, r},
                        {u_new.data(), c_new.data(), d, r_new}, ws.data()));
  auto dres = ToDevice(residual), duo = ToDevice(u_old), dun = ToDevice(u_new),
       dci = ToDevice(c_inv), dcn = ToDevice(c_new);
  auto dws = Poisoned(ws.size());
  ASSERT_OK(cuda::ReprojectResidual(
      ctx, dres.get(), rows, {duo.get(), dci.get(), d, r},
      {dun.get(), dcn.get(), d, r_new}, dws.get()));
  ASSERT_OK(ctx.Synchronize());
  const std::vector<float> got = ToHost(dres, rows * d);
  ASSERT_TRUE(AllFinite(got));
  EXPECT_LE(RelErr(got, want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WhitenGpuTest,
                         ::testing::Values(Shapes{64, 512, 32},
                                           Shapes{300, 1024, 32},
                                           Shapes{17, 96, 5}));

TEST(WhitenGpuArgsTest, RejectsBadArguments) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  auto buf = Poisoned(64);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(
      cuda::ApplyLowRank(ctx, buf.get(), -1, {buf.get(), buf.get(), 8, 2},
                         nullptr, buf.get(), buf.get()),
      StatusIs(kInvalid));
  EXPECT_THAT(
      cuda::ApplyLowRank(ctx, buf.get(), 2, {buf.get(), buf.get(), 4, 8},
                         nullptr, buf.get(), buf.get()),
      StatusIs(kInvalid));
  EXPECT_THAT(cuda::ApplyLowRank(ctx, buf.get(), 2, {nullptr, buf.get(), 8, 2},
                                 nullptr, buf.get(), buf.get()),
              StatusIs(kInvalid));
}

}  // namespace
}  // namespace gift::kernels
