// Helpers for the GPU-vs-CPU comparison tests: seeded host data, device
// copies (DeviceBuffer's copies already synchronise with every stream, so a
// kernel queued next on a Context stream sees the data) and relative error.
//
//   auto dx = ToDevice(RandomVector(n, /*seed=*/1));
//   EXPECT_LE(RelErr(ToHost(dx), want), 1e-5);
#ifndef GIFT_TESTS_GPU_GPU_TESTUTIL_H_
#define GIFT_TESTS_GPU_GPU_TESTUTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "kernels/gpu.h"

namespace gift::gpu_testing {

// n samples of N(0, scale²) from `seed`.
inline std::vector<float> RandomVector(int64_t n, uint32_t seed,
                                       float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// ‖got − want‖ / ‖want‖ in double.
inline double RelErr(const std::vector<float>& got,
                     const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

template <typename T>
gpu::DeviceBuffer<T> ToDevice(const std::vector<T>& h) {
  gpu::DeviceBuffer<T> d;
  EXPECT_OK(d.Allocate(h.size()));
  EXPECT_OK(d.Upload(h.data(), h.size()));
  return d;
}

// The first n elements of d (all of them by default).
template <typename T>
std::vector<T> ToHost(const gpu::DeviceBuffer<T>& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_OK(d.Download(h.data(), n));
  return h;
}
template <typename T>
std::vector<T> ToHost(const gpu::DeviceBuffer<T>& d) {
  return ToHost(d, d.size());
}

}  // namespace gift::gpu_testing

#endif  // GIFT_TESTS_GPU_GPU_TESTUTIL_H_
