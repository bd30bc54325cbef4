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

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// DeviceBuffer copies and fills run on the legacy default stream, which a
// non-blocking Context stream does not wait for: settle them before a kernel
// on ctx's stream reads the buffers.
void Settle() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

template <typename T>
gpu::DeviceBuffer<T> ToDevice(const std::vector<T>& h) {
  gpu::DeviceBuffer<T> d;
  EXPECT_OK(d.Allocate(h.size()));
  EXPECT_OK(d.Upload(h.data(), h.size()));
  Settle();
  return d;
}

template <typename T>
std::vector<T> ToHost(const gpu::DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  EXPECT_OK(d.Download(h.data(), h.size()));
  return h;
}

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
  Settle();
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
