// CUDA Quantize / Dequantize / DequantizeAccumulate against the CPU
// reference on seeded random data: codes, scales, residuals and sums bit for
// bit, counters exact, double sums within 1e-9 relative.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/accumulate.h"
#include "kernels/gpu.h"
#include "kernels/quantize.h"
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

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

enum class Residual { kNone, kSeparate, kInPlace };

// Quantize on both sides and compare everything.
void Compare(gpu::Context& ctx, const std::vector<float>& x,
             const QuantizeSpec& spec, Residual mode) {
  SCOPED_TRACE(::testing::Message()
               << Fp8FormatName(spec.format) << " n=" << x.size()
               << " block=" << spec.block_size << " mode=" << int(mode));
  const int64_t n = x.size(), ns = NumScales(n, spec.block_size);
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(ns), residual(x);
  QuantizeStats want;
  ASSERT_OK(Quantize(x.data(), n, spec, codes.data(), scales.data(),
                     mode == Residual::kNone ? nullptr : residual.data(),
                     &want));

  auto dx = ToDevice(x);
  gpu::DeviceBuffer<uint8_t> dq;
  gpu::DeviceBuffer<float> ds, dr;
  gpu::DeviceBuffer<QuantizeStats> dst;
  ASSERT_OK(dq.Allocate(n + 1));
  ASSERT_OK(ds.Allocate(ns + 1));
  ASSERT_OK(dr.Allocate(n + 1));
  ASSERT_OK(dst.Allocate(1));
  ASSERT_OK(dq.Fill(0x7F));  // sentinels a finite input never produces
  ASSERT_OK(ds.Fill(0xFF));
  ASSERT_OK(dr.Fill(0xFF));
  ASSERT_OK(dst.Fill(0x11));
  float* dres = mode == Residual::kNone       ? nullptr
                : mode == Residual::kSeparate ? dr.get()
                                              : dx.get();
  ASSERT_OK(cuda::Quantize(ctx, dx.get(), n, spec, dq.get(), ds.get(), dres,
                           dst.get()));
  ASSERT_OK(ctx.Synchronize());
  const auto got_q = ToHost(dq, n);
  const auto got_s = ToHost(ds, ns);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_q[i], codes[i]) << "code " << i << " x=" << x[i];
  }
  for (int64_t b = 0; b < ns; ++b) {
    ASSERT_TRUE(SameBits(got_s[b], scales[b]))
        << "scale " << b << ": " << got_s[b] << " vs " << scales[b];
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

TEST(QuantizeGpuTest, MatchesCpuSmallSizes) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (Fp8Format f : kFormats) {
    for (int64_t n : {0, 1, 3, 4, 7, 1000, 4097, 65537}) {
      for (int64_t block : {0, 1, 7, 32, 512, 2048, 2049, 5000, 100000}) {
        const auto x = RandomData(n, uint32_t(n + block));
        Compare(*ctx, x, {f, block}, Residual::kSeparate);
      }
    }
  }
}

TEST(QuantizeGpuTest, MatchesCpuLargeSizes) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (int64_t n : {int64_t{1} << 20, (int64_t{1} << 22) + 3}) {
    const auto x = RandomData(n, 3);
    for (Fp8Format f : kFormats) {
      for (int64_t block : {0, 512, 1000, 8192}) {
        for (Residual mode :
             {Residual::kNone, Residual::kSeparate, Residual::kInPlace}) {
          Compare(*ctx, x, {f, block}, mode);
        }
      }
    }
  }
}

TEST(QuantizeGpuTest, NonFiniteAndZeroBlocks) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  auto x = RandomData(100003, 5);
  for (int i = 0; i < 512; ++i) x[2048 + i] = 0.0f;  // an all-zero block
  x[10] = kNaN;
  x[5000] = kInf;
  x[70001] = -kInf;
  x[100002] = kNaN;
  for (Fp8Format f : kFormats) {
    for (int64_t block : {0, 16, 512, 4096, 10000}) {
      Compare(*ctx, x, {f, block}, Residual::kSeparate);
    }
  }
  const std::vector<float> zeros(5000, 0.0f);
  Compare(*ctx, zeros, {}, Residual::kSeparate);
  const std::vector<float> tiny(33, std::numeric_limits<float>::denorm_min());
  Compare(*ctx, tiny, {}, Residual::kSeparate);
}

TEST(QuantizeGpuTest, DequantizeMatchesCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (Fp8Format f : kFormats) {
    for (int64_t n : {1, 5, 4099, (1 << 20) + 1}) {
      for (int64_t block : {0, 3, 512}) {
        const QuantizeSpec spec{f, block};
        auto x = RandomData(n, 9);
        if (n > 4) x[4] = kNaN;
        std::vector<uint8_t> q(n);
        std::vector<float> s(NumScales(n, block)), want(n);
        ASSERT_OK(
            Quantize(x.data(), n, spec, q.data(), s.data(), nullptr, nullptr));
        ASSERT_OK(Dequantize(q.data(), s.data(), n, spec, want.data()));
        auto dq = ToDevice(q);
        auto ds = ToDevice(s);
        gpu::DeviceBuffer<float> dout;
        ASSERT_OK(dout.Allocate(n));
        ASSERT_OK(dout.Fill(0x33));
        ASSERT_OK(
            cuda::Dequantize(*ctx, dq.get(), ds.get(), n, spec, dout.get()));
        ASSERT_OK(ctx->Synchronize());
        const auto got = ToHost(dout, n);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << i;
          } else {
            ASSERT_TRUE(SameBits(got[i], want[i])) << i;
          }
        }
      }
    }
  }
}

TEST(QuantizeGpuTest, AccumulateMatchesCpu) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (Fp8Format f : kFormats) {
    for (int64_t n : {1, 7, 4099, (1 << 20) + 3}) {
      for (int64_t block : {0, 5, 512}) {
        for (int k : {1, 4, 20}) {
          for (bool zero_first : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "n=" << n << " block=" << block << " k=" << k);
            const QuantizeSpec spec{f, block};
            const int64_t ns = NumScales(n, block);
            std::vector<std::vector<uint8_t>> q(k, std::vector<uint8_t>(n));
            std::vector<std::vector<float>> s(k, std::vector<float>(ns));
            std::vector<gpu::DeviceBuffer<uint8_t>> dq;
            std::vector<gpu::DeviceBuffer<float>> ds;
            std::vector<Fp8Source> host_src, dev_src;
            for (int j = 0; j < k; ++j) {
              const auto x = RandomData(n, 50 + j);
              ASSERT_OK(Quantize(x.data(), n, spec, q[j].data(), s[j].data(),
                                 nullptr, nullptr));
              if (j == 1 && ns > 1) s[j][ns - 1] = kNaN;  // flagged block
              dq.push_back(ToDevice(q[j]));
              ds.push_back(ToDevice(s[j]));
              host_src.push_back({q[j].data(), s[j].data()});
            }
            for (int j = 0; j < k; ++j) {
              dev_src.push_back({dq[j].get(), ds[j].get()});
            }
            auto want = RandomData(n, 77);
            auto dacc = ToDevice(want);
            ASSERT_OK(DequantizeAccumulate(host_src.data(), k, n, spec,
                                           zero_first, want.data()));
            ASSERT_OK(cuda::DequantizeAccumulate(*ctx, dev_src.data(), k, n,
                                                 spec, zero_first, dacc.get()));
            ASSERT_OK(ctx->Synchronize());
            const auto got = ToHost(dacc, n);
            for (int64_t i = 0; i < n; ++i) {
              if (std::isnan(want[i])) {
                ASSERT_TRUE(std::isnan(got[i])) << i;
              } else {
                ASSERT_TRUE(SameBits(got[i], want[i]))
                    << i << ": " << got[i] << " vs " << want[i];
              }
            }
          }
        }
      }
    }
  }
}

TEST(QuantizeGpuTest, AccumulateWithoutSources) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const std::vector<float> ones(10, 1.0f);
  auto dacc = ToDevice(ones);
  ASSERT_OK(
      cuda::DequantizeAccumulate(*ctx, nullptr, 0, 10, {}, false, dacc.get()));
  ASSERT_OK(ctx->Synchronize());
  EXPECT_EQ(ToHost(dacc, 10), ones);
  ASSERT_OK(
      cuda::DequantizeAccumulate(*ctx, nullptr, 0, 10, {}, true, dacc.get()));
  ASSERT_OK(ctx->Synchronize());
  EXPECT_EQ(ToHost(dacc, 10), std::vector<float>(10, 0.0f));
}

TEST(QuantizeGpuTest, RejectsBadArguments) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const auto kBad = absl::StatusCode::kInvalidArgument;
  float s;
  EXPECT_THAT(
      cuda::Quantize(*ctx, nullptr, 5, {}, nullptr, &s, nullptr, nullptr),
      testing::StatusIs(kBad));
  EXPECT_THAT(
      cuda::Quantize(*ctx, nullptr, -1, {}, nullptr, &s, nullptr, nullptr),
      testing::StatusIs(kBad));
  EXPECT_THAT(cuda::Dequantize(*ctx, nullptr, nullptr, 3, {}, nullptr),
              testing::StatusIs(kBad));
  EXPECT_THAT(
      cuda::DequantizeAccumulate(*ctx, nullptr, 2, 3, {}, false, nullptr),
      testing::StatusIs(kBad));
}

}  // namespace
}  // namespace gift::kernels
