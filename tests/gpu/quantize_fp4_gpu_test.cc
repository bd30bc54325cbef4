// CUDA QuantizeFp4 / DequantizeFp4 / DequantizeAccumulateFp4 against the CPU
// reference (label gpu; every test skips without a device): codes, scales,
// residuals, dequantized values and sums bit for bit, counters exact (the
// tensor-relative boundary hits too, also for mxfp4 without a tensor-scale
// slot, where the segment amax lives in stats->n), double sums within 1e-9
// relative.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/gpu.h"
#include "kernels/quantize_fp4.h"
#include "tests/gpu/quantize_testutil.h"

namespace gift::kernels {
namespace {

using quantize_testing::ExpectStatsMatch;
using quantize_testing::kInf;
using quantize_testing::kNaN;
using quantize_testing::MakeContext;
using quantize_testing::RandomData;
using quantize_testing::SameBits;
using quantize_testing::ToDevice;
using quantize_testing::ToHost;

constexpr Fp4Format kFormats[] = {Fp4Format::kNvfp4, Fp4Format::kMxfp4};

enum class Residual { kNone, kSeparate, kInPlace };

// tensor_slot false: mxfp4 only, no tensor_scale pointer on either side.
void Compare(gpu::Context& ctx, const std::vector<float>& x, Fp4Format f,
             Residual mode, bool tensor_slot = true) {
  SCOPED_TRACE(::testing::Message()
               << Fp4FormatName(f) << " n=" << x.size() << " mode=" << int(mode)
               << " tensor_slot=" << tensor_slot);
  const int64_t n = x.size(), nb = Fp4NumBlocks(n, f),
                bytes = Fp4PackedBytes(n);
  std::vector<uint8_t> codes(bytes), scales(nb);
  std::vector<float> residual(x);
  float s_t = -1;
  QuantizeStats want;
  ASSERT_OK(QuantizeFp4(
      x.data(), n, f, codes.data(), scales.data(), tensor_slot ? &s_t : nullptr,
      mode == Residual::kNone ? nullptr : residual.data(), &want));

  auto dx = ToDevice(x);
  gpu::DeviceBuffer<uint8_t> dq, ds;
  gpu::DeviceBuffer<float> dr, dt;
  gpu::DeviceBuffer<QuantizeStats> dst;
  ASSERT_OK(dq.Allocate(bytes + 1));
  ASSERT_OK(ds.Allocate(nb + 1));
  ASSERT_OK(dr.Allocate(n + 1));
  ASSERT_OK(dt.Allocate(1));
  ASSERT_OK(dst.Allocate(1));
  ASSERT_OK(dq.Fill(0xEE));
  ASSERT_OK(ds.Fill(0xEE));
  ASSERT_OK(dr.Fill(0xFF));
  ASSERT_OK(dt.Fill(0xFF));
  ASSERT_OK(dst.Fill(0x11));
  float* dres = mode == Residual::kNone       ? nullptr
                : mode == Residual::kSeparate ? dr.get()
                                              : dx.get();
  ASSERT_OK(cuda::QuantizeFp4(ctx, dx.get(), n, f, dq.get(), ds.get(),
                              tensor_slot ? dt.get() : nullptr, dres,
                              dst.get()));
  ASSERT_OK(ctx.Synchronize());
  EXPECT_EQ(ToHost(dq, bytes + 1)[bytes], 0xEE);  // nothing past the end
  const auto got_q = ToHost(dq, bytes);
  for (int64_t j = 0; j < bytes; ++j) {
    ASSERT_EQ(got_q[j], codes[j]) << "byte " << j;
  }
  const auto got_s = ToHost(ds, nb);
  for (int64_t b = 0; b < nb; ++b) {
    ASSERT_EQ(got_s[b], scales[b]) << "scale " << b;
  }
  if (tensor_slot) {
    EXPECT_TRUE(SameBits(ToHost(dt, 1)[0], s_t));
  }
  if (mode != Residual::kNone) {
    const auto got_r =
        ToHost(mode == Residual::kSeparate ? dr : dx, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameBits(got_r[i], residual[i])) << "residual " << i;
    }
  }
  ExpectStatsMatch(ToHost(dst, 1)[0], want);
}

TEST(QuantizeFp4GpuTest, QuantizeMatchesCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (Fp4Format f : kFormats) {
    for (int64_t n : {0, 1, 3, 16, 17, 31, 33, 1000, 4097, (1 << 20) + 5}) {
      const auto x = RandomData(n, uint32_t(n));
      for (Residual mode :
           {Residual::kNone, Residual::kSeparate, Residual::kInPlace}) {
        Compare(*ctx, x, f, mode);
      }
    }
  }
}

TEST(QuantizeFp4GpuTest, NonFiniteZeroSubnormalAndUnderflow) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  auto x = RandomData(10003, 5);
  for (int i = 0; i < 64; ++i) x[2048 + i] = 0.0f;  // all-zero blocks
  for (int i = 0; i < 32; ++i) x[4096 + i] = 1e-6f * (i + 1);  // underflow
  x[4] = 3000.0f;
  x[10] = kNaN;
  x[5000] = kInf;
  x[7001] = -kInf;
  x[10002] = kNaN;
  for (Fp4Format f : kFormats) {
    Compare(*ctx, x, f, Residual::kSeparate);
    Compare(*ctx, std::vector<float>(5000, 0.0f), f, Residual::kSeparate);
    for (float unit : {1e-40f, 1e-44f}) {
      auto y = RandomData(333, 7);
      for (auto& v : y) v *= unit;
      Compare(*ctx, y, f, Residual::kInPlace);
    }
  }
}

// Heavy tails across the tensor (scales 2^0 .. 2^-20 per 32 elements), so
// the tensor-relative hits are many and differ from the block-relative ones.
TEST(QuantizeFp4GpuTest, TensorRelativeHitsMatchCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (int64_t n : {1, 47, 4099, (1 << 20) + 3}) {
    auto x = RandomData(n, uint32_t(n) + 3);
    for (int64_t i = 0; i < n; ++i)
      x[i] = std::ldexp(x[i], -int((i / 32) % 21));
    if (n > 40) x[40] = kNaN;
    for (Fp4Format f : kFormats) Compare(*ctx, x, f, Residual::kSeparate);
    Compare(*ctx, x, Fp4Format::kMxfp4, Residual::kNone, /*tensor_slot=*/false);
    Compare(*ctx, x, Fp4Format::kMxfp4, Residual::kInPlace,
            /*tensor_slot=*/false);
  }
}

TEST(QuantizeFp4GpuTest, DequantizeAndAccumulateMatchCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (Fp4Format f : kFormats) {
    for (int64_t n : {1, 5, 4099, (1 << 20) + 1}) {
      constexpr int kSources = 19;  // two launches of at most 16
      std::vector<std::vector<uint8_t>> q(kSources), s(kSources);
      std::vector<float> t(kSources);
      for (int k = 0; k < kSources; ++k) {
        auto x = RandomData(n, 9 + k);
        if (k == 3 && n > 4) x[4] = kNaN;
        q[k].resize(Fp4PackedBytes(n));
        s[k].resize(Fp4NumBlocks(n, f));
        ASSERT_OK(QuantizeFp4(x.data(), n, f, q[k].data(), s[k].data(), &t[k],
                              nullptr, nullptr));
      }
      std::vector<float> want(n);
      ASSERT_OK(
          DequantizeFp4(q[0].data(), s[0].data(), &t[0], n, f, want.data()));
      std::vector<gpu::DeviceBuffer<uint8_t>> dq, ds;
      std::vector<gpu::DeviceBuffer<float>> dt;
      std::vector<Fp4Source> cpu_src, gpu_src;
      for (int k = 0; k < kSources; ++k) {
        dq.push_back(ToDevice(q[k]));
        ds.push_back(ToDevice(s[k]));
        dt.push_back(ToDevice(std::vector<float>{t[k]}));
        cpu_src.push_back({q[k].data(), s[k].data(), &t[k]});
        gpu_src.push_back({dq[k].get(), ds[k].get(), dt[k].get()});
      }
      gpu::DeviceBuffer<float> dout;
      ASSERT_OK(dout.Allocate(n));
      ASSERT_OK(dout.Fill(0x33));
      ASSERT_OK(cuda::DequantizeFp4(*ctx, dq[0].get(), ds[0].get(), dt[0].get(),
                                    n, f, dout.get()));
      ASSERT_OK(ctx->Synchronize());
      auto got = ToHost(dout, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameBits(got[i], want[i])) << "dequantize " << i;
      }
      for (bool zero_first : {false, true}) {
        std::vector<float> acc(n, 0.25f);
        auto dacc = ToDevice(acc);
        ASSERT_OK(DequantizeAccumulateFp4(cpu_src.data(), kSources, n, f,
                                          zero_first, acc.data()));
        ASSERT_OK(cuda::DequantizeAccumulateFp4(*ctx, gpu_src.data(), kSources,
                                                n, f, zero_first, dacc.get()));
        ASSERT_OK(ctx->Synchronize());
        got = ToHost(dacc, n);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(acc[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << "accumulate " << i;
          } else {
            ASSERT_TRUE(SameBits(got[i], acc[i])) << "accumulate " << i;
          }
        }
      }
    }
  }
}

TEST(QuantizeFp4GpuTest, RejectsBadArguments) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const auto kBad = absl::StatusCode::kInvalidArgument;
  float x = 1;
  uint8_t q = 0, b = 0;
  EXPECT_THAT(cuda::QuantizeFp4(*ctx, &x, -1, Fp4Format::kMxfp4, &q, &b,
                                nullptr, nullptr, nullptr),
              ::gift::testing::StatusIs(kBad));
  EXPECT_THAT(cuda::QuantizeFp4(*ctx, &x, 1, Fp4Format::kNvfp4, &q, &b, nullptr,
                                nullptr, nullptr),
              ::gift::testing::StatusIs(kBad));
  EXPECT_THAT(
      cuda::DequantizeFp4(*ctx, &q, &b, nullptr, 1, Fp4Format::kNvfp4, &x),
      ::gift::testing::StatusIs(kBad));
  EXPECT_THAT(cuda::DequantizeAccumulateFp4(*ctx, nullptr, 1, 1,
                                            Fp4Format::kMxfp4, false, &x),
              ::gift::testing::StatusIs(kBad));
}

}  // namespace
}  // namespace gift::kernels
