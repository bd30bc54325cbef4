// CUDA sketch / second moment vs the CPU reference on seeded random data.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "kernels/sketch.h"
#include "tests/gpu/gpu_testutil.h"

namespace gift::kernels {
namespace {

using ::gift::gpu_testing::RandomVector;
using ::gift::gpu_testing::RelErr;
using ::gift::gpu_testing::ToDevice;
using ::gift::gpu_testing::ToHost;
using ::gift::testing::StatusIs;

struct Shape {
  int64_t rows, d, k;
};

class SketchGpuTest : public ::testing::TestWithParam<Shape> {};

// Two batches into a non-zero accumulator, as in a window of steps.
TEST_P(SketchGpuTest, SketchMatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, k] = GetParam();
  const std::vector<float> a1 = RandomVector(rows * d, 1);
  const std::vector<float> a2 = RandomVector(rows * d, 2);
  const std::vector<float> omega = RandomVector(d * k, 3);
  std::vector<float> y = RandomVector(d * k, 4);
  std::vector<double> trace = {2.5};
  std::vector<int64_t> count = {3};
  auto dy = ToDevice(y);
  auto dtrace = ToDevice(trace);
  auto dcount = ToDevice(count);
  auto da1 = ToDevice(a1), da2 = ToDevice(a2), domega = ToDevice(omega);
  gpu::DeviceBuffer<float> dws;
  ASSERT_OK(dws.Allocate(SketchWorkspaceFloats(rows, k)));
  ASSERT_OK(dws.Fill(0xFF));
  std::vector<float> ws(SketchWorkspaceFloats(rows, k));
  SketchAccumulator acc{y.data(), trace.data(), count.data()};
  SketchAccumulator dacc{dy.get(), dtrace.get(), dcount.get()};
  for (const auto* a : {&a1, &a2}) {
    ASSERT_OK(
        SketchAccumulate(a->data(), rows, d, omega.data(), k, acc, ws.data()));
  }
  for (const auto* a : {&da1, &da2}) {
    ASSERT_OK(cuda::SketchAccumulate(ctx, a->get(), rows, d, domega.get(), k,
                                     dacc, dws.get()));
  }
  ASSERT_OK(ctx.Synchronize());
  const std::vector<float> got = ToHost(dy);
  EXPECT_LE(RelErr(got, y), 1e-5);
  EXPECT_NEAR(ToHost(dtrace)[0], trace[0], 1e-12 * trace[0]);
  EXPECT_EQ(ToHost(dcount)[0], count[0]);
  EXPECT_EQ(count[0], 3 + 2 * rows);
}

TEST_P(SketchGpuTest, SecondMomentMatchesCpu) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  const auto [rows, d, k] = GetParam();
  const std::vector<float> a = RandomVector(rows * d, 5);
  std::vector<float> y = RandomVector(d * d, 6);
  std::vector<double> trace = {0.0};
  std::vector<int64_t> count = {0};
  auto dy = ToDevice(y), da = ToDevice(a);
  auto dtrace = ToDevice(trace);
  auto dcount = ToDevice(count);
  ASSERT_OK(SecondMomentAccumulate(a.data(), rows, d,
                                   {y.data(), trace.data(), count.data()}));
  ASSERT_OK(cuda::SecondMomentAccumulate(
      ctx, da.get(), rows, d, {dy.get(), dtrace.get(), dcount.get()}));
  ASSERT_OK(ctx.Synchronize());
  EXPECT_LE(RelErr(ToHost(dy), y), 1e-5);
  EXPECT_NEAR(ToHost(dtrace)[0], trace[0], 1e-12 * trace[0]);
  EXPECT_EQ(ToHost(dcount)[0], rows);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SketchGpuTest,
                         ::testing::Values(Shape{512, 1024, 48},
                                           Shape{37, 200, 20},
                                           Shape{5000, 256, 48}));

TEST(SketchGpuArgsTest, RejectsBadArguments) {
  if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx_or = gpu::Context::Create();
  ASSERT_OK(ctx_or);
  gpu::Context& ctx = **ctx_or;
  gpu::DeviceBuffer<float> buf;
  ASSERT_OK(buf.Allocate(64));
  double* no_trace = nullptr;
  int64_t* no_count = nullptr;
  EXPECT_THAT(
      cuda::SketchAccumulate(ctx, buf.get(), 2, 8, buf.get(), 2,
                             {buf.get(), no_trace, no_count}, buf.get()),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cuda::SecondMomentAccumulate(ctx, buf.get(), 2, 0,
                                           {buf.get(), no_trace, no_count}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::kernels
