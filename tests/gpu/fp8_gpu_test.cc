// CUDA FP8 codec against the CPU reference (itself checked against CUDA's
// host conversion for all 2^32 floats in tests/exhaustive).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/fp8.h"
#include "kernels/gpu.h"

namespace gift::kernels {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

std::unique_ptr<gpu::Context> MakeContext() {
  auto ctx = gpu::Context::Create();
  EXPECT_OK(ctx);
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Values over all binades, with the special cases sprinkled in.
std::vector<float> TestData(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = FromBits(rng());
  const float specials[] = {0.0f,
                            -0.0f,
                            448.0f,
                            464.0f,
                            465.0f,
                            57344.0f,
                            61440.0f,
                            std::ldexp(1.0f, -10),
                            1.0625f,
                            1.1875f,
                            1.125f,
                            1.375f,
                            FromBits(1),
                            -FromBits(0x7FFFFF),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            FromBits(0xFF800001)};
  for (size_t i = 0; i < x.size(); i += 7) {
    x[i] = specials[(i / 7) % (sizeof(specials) / sizeof(float))];
  }
  return x;
}

// GPU encode of x[offset, n) vs CPU, output pre-filled with `fill`.
void CheckEncode(gpu::Context& ctx, const std::vector<float>& x, int64_t offset,
                 Fp8Format f, int fill) {
  const int64_t n = static_cast<int64_t>(x.size()) - offset;
  gpu::DeviceBuffer<float> dx;
  gpu::DeviceBuffer<uint8_t> dq;
  ASSERT_OK(dx.Allocate(x.size() + 1));
  ASSERT_OK(dq.Allocate(x.size() + 1));
  ASSERT_OK(dx.Upload(x.data(), x.size()));
  ASSERT_OK(dq.Fill(fill));
  ASSERT_OK(cuda::EncodeFp8(ctx, dx.get() + offset, n, f, dq.get() + offset));
  ASSERT_OK(ctx.Synchronize());
  std::vector<uint8_t> got(x.size() + 1), want(n);
  ASSERT_OK(dq.Download(got.data(), got.size()));
  EncodeFp8(x.data() + offset, n, f, want.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[offset + i], want[i])
        << Fp8FormatName(f) << " x=" << x[offset + i] << " i=" << i;
  }
  EXPECT_EQ(got[x.size()], fill) << "written past the end";
}

TEST(Fp8GpuTest, EncodeMatchesCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (int64_t n : {0, 1, 3, 4, 5, 1000, 4097, (1 << 20) + 3}) {
    const auto x = TestData(n, uint32_t(n));
    for (Fp8Format f : kFormats) {
      for (int fill : {0x00, 0xFF}) {
        CheckEncode(*ctx, x, 0, f, fill);
        if (n > 1) CheckEncode(*ctx, x, 1, f, fill);  // unaligned path
      }
    }
  }
}

TEST(Fp8GpuTest, EncodeMatchesCpuOnBitPatternSweep) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  // 2^24 patterns spread over the whole 32-bit space, low bits varied.
  std::vector<float> x(1 << 24);
  for (uint32_t i = 0; i < x.size(); ++i)
    x[i] = FromBits(i * 256 + (i * 37) % 256);
  for (Fp8Format f : kFormats) CheckEncode(*ctx, x, 0, f, 0x55);
}

TEST(Fp8GpuTest, DecodeMatchesCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (int64_t n : {1, 255, 256, 1027, 1 << 20}) {
    std::vector<uint8_t> q(n + 1);
    for (int64_t i = 0; i < n + 1; ++i) q[i] = uint8_t(i * 13 + 1);
    for (Fp8Format f : kFormats) {
      for (int64_t offset : {0, 1}) {
        const int64_t m = n + 1 - offset;
        gpu::DeviceBuffer<uint8_t> dq;
        gpu::DeviceBuffer<float> dout;
        ASSERT_OK(dq.Allocate(n + 1));
        ASSERT_OK(dout.Allocate(n + 1));
        ASSERT_OK(dq.Upload(q.data(), n + 1));
        ASSERT_OK(dout.Fill(0xFF));  // NaN: must all be overwritten
        ASSERT_OK(cuda::DecodeFp8(*ctx, dq.get() + offset, m, f,
                                  dout.get() + offset));
        ASSERT_OK(ctx->Synchronize());
        std::vector<float> got(n + 1);
        ASSERT_OK(dout.Download(got.data(), n + 1));
        for (int64_t i = 0; i < m; ++i) {
          const float want = DecodeFp8(q[offset + i], f);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got[offset + i])) << i;
          } else {
            ASSERT_EQ(std::memcmp(&want, &got[offset + i], 4), 0)
                << Fp8FormatName(f) << " code " << int(q[offset + i]);
          }
        }
      }
    }
  }
}

TEST(Fp8GpuTest, RejectsBadArguments) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  EXPECT_THAT(cuda::EncodeFp8(*ctx, nullptr, 4, Fp8Format::kE4M3, nullptr),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cuda::DecodeFp8(*ctx, nullptr, -1, Fp8Format::kE4M3, nullptr),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(cuda::EncodeFp8(*ctx, nullptr, 0, Fp8Format::kE4M3, nullptr));
}

}  // namespace
}  // namespace gift::kernels
