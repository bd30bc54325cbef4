// Helpers of the quantize GPU-vs-CPU tests (FP8: quantize_gpu_test.cc,
// 4-bit: quantize_fp4_gpu_test.cc): bit comparison, a device context, data
// over many binades, and device copies that accept empty vectors (one
// element more is allocated, none of it read back).
//
//   auto ctx = MakeContext();
//   auto dx = ToDevice(RandomData(n, /*seed=*/1));
//   EXPECT_TRUE(SameBits(ToHost(dx, n)[0], 1.5f));
#ifndef GIFT_TESTS_GPU_QUANTIZE_TESTUTIL_H_
#define GIFT_TESTS_GPU_QUANTIZE_TESTUTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "kernels/quantize.h"

namespace gift::kernels::quantize_testing {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

inline bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

inline std::unique_ptr<gpu::Context> MakeContext() {
  auto ctx = gpu::Context::Create();
  EXPECT_OK(ctx);
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

// Gaussian values over many binades, never all zero.
inline std::vector<float> RandomData(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 10);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(g(rng), ex(rng));
  if (n > 0) x[0] = 1.5f;
  return x;
}

template <typename T>
gpu::DeviceBuffer<T> ToDevice(const std::vector<T>& v) {
  gpu::DeviceBuffer<T> d;
  EXPECT_OK(d.Allocate(v.size() + 1));
  EXPECT_OK(d.Upload(v.data(), v.size()));
  return d;
}

template <typename T>
std::vector<T> ToHost(const gpu::DeviceBuffer<T>& d, size_t n) {
  std::vector<T> v(n);
  EXPECT_OK(d.Download(v.data(), n));
  return v;
}

// The device's statistics against the CPU reference's: counters exact,
// double sums within 1e-9 relative (their order of addition differs).
inline void ExpectStatsMatch(const QuantizeStats& got,
                             const QuantizeStats& want) {
  EXPECT_EQ(got.n, want.n);
  EXPECT_EQ(got.upper, want.upper);
  EXPECT_EQ(got.lower, want.lower);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  EXPECT_NEAR(got.err_sq, want.err_sq, 1e-9 * want.err_sq);
  EXPECT_NEAR(got.x_sq, want.x_sq, 1e-9 * want.x_sq);
  EXPECT_NEAR(got.xhat_x, want.xhat_x, 1e-9 * std::fabs(want.xhat_x));
}

}  // namespace gift::kernels::quantize_testing

#endif  // GIFT_TESTS_GPU_QUANTIZE_TESTUTIL_H_
