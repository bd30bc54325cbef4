#include "kernels/quantize_fp4.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/accumulate.h"
#include "kernels/whiten.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr Fp4Format kNv = Fp4Format::kNvfp4;
constexpr Fp4Format kMx = Fp4Format::kMxfp4;
constexpr Fp4Format kFormats[] = {kNv, kMx};

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Gaussian values over many binades; never all zero.
std::vector<float> RandomData(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 6);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(g(rng), ex(rng));
  if (n > 0) x[0] = 3.5f;
  return x;
}

std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

struct Result {
  std::vector<uint8_t> codes, scales;
  float tensor = -1;
  std::vector<float> residual;
  QuantizeStats stats;

  uint8_t Code(int64_t i) const { return (codes[i / 2] >> (4 * (i % 2))) & 15; }
};

// Outputs pre-filled with sentinels a correct call never leaves.
Result RunQuantize(const std::vector<float>& x, Fp4Format f) {
  const int64_t n = x.size();
  Result r{std::vector<uint8_t>(Fp4PackedBytes(n), 0xEE),
           std::vector<uint8_t>(Fp4NumBlocks(n, f), 0xEE),
           -1.0f,
           std::vector<float>(n, kNaN),
           {}};
  r.stats.n = -5;
  EXPECT_OK(QuantizeFp4(x.data(), n, f, r.codes.data(), r.scales.data(),
                        &r.tensor, r.residual.data(), &r.stats));
  return r;
}

// QuantizeFp4 in place, as error feedback runs: the residual overwrites x
// (returned as the result's residual).
Result RunQuantizeInPlace(std::vector<float> x, Fp4Format f) {
  const int64_t n = x.size();
  Result r{std::vector<uint8_t>(Fp4PackedBytes(n), 0xEE),
           std::vector<uint8_t>(Fp4NumBlocks(n, f), 0xEE),
           -1.0f,
           {},
           {}};
  EXPECT_OK(QuantizeFp4(x.data(), n, f, r.codes.data(), r.scales.data(),
                        &r.tensor, x.data(), &r.stats));
  r.residual = std::move(x);
  return r;
}

std::vector<float> Dequant(const Result& r, int64_t n, Fp4Format f) {
  std::vector<float> out(n + 1, -9.0f);
  EXPECT_OK(DequantizeFp4(r.codes.data(), r.scales.data(), &r.tensor, n, f,
                          out.data()));
  EXPECT_EQ(out[n], -9.0f);  // nothing written past n
  out.resize(n);
  return out;
}

// Independent reference from the header's formulas, element by element.
Result Naive(const std::vector<float>& x, Fp4Format f) {
  const int64_t n = x.size(), bs = Fp4BlockSize(f);
  Result r{std::vector<uint8_t>(Fp4PackedBytes(n), 0),
           std::vector<uint8_t>(Fp4NumBlocks(n, f)),
           1.0f,
           std::vector<float>(n),
           {}};
  r.stats.n = n;
  float amax = 0;
  for (float v : x) {
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  }
  if (f == kNv && amax > 0) {
    r.tensor = amax / 2688.0f;
    if (r.tensor == 0) r.tensor = std::numeric_limits<float>::denorm_min();
  }
  // A block's scale code, and the code of v in a block of that code.
  auto scale_code = [&](float am) -> uint8_t {
    if (f == kNv) {
      return am == 0 ? 0
                     : std::max<uint8_t>(1, EncodeFp8(am / r.tensor / 6.0f,
                                                      Fp8Format::kE4M3));
    }
    return am == 0 ? 127 : std::max(std::ilogb(am) + 127 - 2, 0);
  };
  auto scale_of = [&](uint8_t code) {
    return f == kNv ? DecodeFp8(code, Fp8Format::kE4M3)
                    : std::ldexp(1.0f, code - 127);
  };
  auto encode = [&](float v, uint8_t code) {
    return f == kNv ? EncodeE2M1(v / r.tensor / (code ? scale_of(code) : 1.0f))
                    : EncodeE2M1(v / scale_of(code));
  };
  const uint8_t amax_code = scale_code(amax);  // the boundary hits' scale
  for (int64_t lo = 0; lo < n; lo += bs) {
    const int64_t hi = std::min(n, lo + bs);
    float am = 0;
    bool bad = false;
    for (int64_t i = lo; i < hi; ++i) {
      if (std::isfinite(x[i])) am = std::max(am, std::fabs(x[i]));
      bad |= !std::isfinite(x[i]);
    }
    const uint8_t code = scale_code(am);
    const float scale = scale_of(code);
    r.scales[lo / bs] = bad ? (f == kNv ? 0x7F : 0xFF) : code;
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t q = encode(x[i], code);
      const float h =
          f == kNv ? DecodeE2M1(q) * scale * r.tensor : DecodeE2M1(q) * scale;
      r.codes[i / 2] |= q << (4 * (i % 2));
      if (!std::isfinite(x[i])) {
        ++r.stats.nonfinite;
        continue;
      }
      r.residual[i] = x[i] - h;
      const uint8_t t = encode(x[i], amax_code) & 7;
      r.stats.upper += t == 7;
      r.stats.lower += t == 0 && x[i] != 0;
      r.stats.err_sq += (double(h) - x[i]) * (double(h) - x[i]);
      r.stats.x_sq += double(x[i]) * x[i];
      r.stats.xhat_x += double(h) * x[i];
    }
  }
  return r;
}

void ExpectSame(const Result& got, const Result& want) {
  ASSERT_EQ(got.codes, want.codes);
  ASSERT_EQ(got.scales, want.scales);
  EXPECT_TRUE(SameBits(got.tensor, want.tensor))
      << got.tensor << " vs " << want.tensor;
  ASSERT_EQ(got.residual.size(), want.residual.size());
  for (size_t i = 0; i < got.residual.size(); ++i) {
    ASSERT_TRUE(SameBits(got.residual[i], want.residual[i]))
        << "residual " << i;
  }
  EXPECT_EQ(got.stats.n, want.stats.n);
  EXPECT_EQ(got.stats.upper, want.stats.upper);
  EXPECT_EQ(got.stats.lower, want.stats.lower);
  EXPECT_EQ(got.stats.nonfinite, want.stats.nonfinite);
  // Sums per block, then over blocks: the order differs from Naive's.
  EXPECT_NEAR(got.stats.err_sq, want.stats.err_sq, 1e-12 * want.stats.err_sq);
  EXPECT_NEAR(got.stats.x_sq, want.stats.x_sq, 1e-12 * want.stats.x_sq);
  EXPECT_NEAR(got.stats.xhat_x, want.stats.xhat_x,
              1e-12 * std::fabs(want.stats.xhat_x));
}

TEST(QuantizeFp4Test, Sizes) {
  EXPECT_EQ(Fp4PackedBytes(0), 0);
  EXPECT_EQ(Fp4PackedBytes(1), 1);
  EXPECT_EQ(Fp4PackedBytes(2), 1);
  EXPECT_EQ(Fp4PackedBytes(33), 17);
  EXPECT_EQ(Fp4NumBlocks(0, kNv), 0);
  EXPECT_EQ(Fp4NumBlocks(16, kNv), 1);
  EXPECT_EQ(Fp4NumBlocks(17, kNv), 2);
  EXPECT_EQ(Fp4NumBlocks(32, kMx), 1);
  EXPECT_EQ(Fp4NumBlocks(33, kMx), 2);
}

TEST(QuantizeFp4Test, MatchesNaiveReference) {
  for (Fp4Format f : kFormats) {
    for (int64_t n : {1, 2, 5, 15, 16, 17, 31, 32, 33, 1000, 4097}) {
      SCOPED_TRACE(::testing::Message() << Fp4FormatName(f) << " n " << n);
      const auto x = RandomData(n, uint32_t(n * 7 + int(f)));
      ExpectSame(RunQuantize(x, f), Naive(x, f));
    }
  }
}

// Hand-computed nvfp4: amax 6 * 448 makes s_t = 1; block 0's amax 6 makes
// its E4M3 scale 1 (code 0x38), block 1's amax 2688 makes it 448 (0x7E).
TEST(QuantizeFp4Test, Nvfp4HandComputed) {
  std::vector<float> x(20, 0.0f);
  const float b0[16] = {0.25f, 0.3f,  0.75f, -1.25f, 1.3f, 2.5f, 3.5f, 5.0f,
                        5.1f,  -6.0f, 0.0f,  -0.0f,  1.0f, 2.0f, 4.0f, 0.1f};
  std::copy(b0, b0 + 16, x.begin());
  x[16] = 2688.0f;
  x[17] = -448.0f;  // 1 * 448
  x[18] = 1000.0f;  // 2.23 -> 2 (code 4)
  x[19] = 1120.0f;  // 2.5 -> tie -> 2
  const Result r = RunQuantize(x, kNv);
  EXPECT_EQ(r.tensor, 1.0f);
  ASSERT_EQ(r.scales.size(), 2u);
  EXPECT_EQ(r.scales[0], 0x38);
  EXPECT_EQ(r.scales[1], 0x7E);
  const uint8_t want0[16] = {0x0, 0x1, 0x2, 0xA, 0x3, 0x4, 0x6, 0x6,
                             0x7, 0xF, 0x0, 0x8, 0x2, 0x4, 0x6, 0x0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(r.Code(i), want0[i]) << i;
  EXPECT_EQ(r.Code(16), 0x7);
  EXPECT_EQ(r.Code(17), 0xA);
  EXPECT_EQ(r.Code(18), 0x4);
  EXPECT_EQ(r.Code(19), 0x4);
  EXPECT_EQ(r.codes[0], 0x10);  // low nibble = element 0
  EXPECT_EQ(r.codes[1], 0xA2);
  // Tensor-relative hits (the amax block's scale 448): upper 2688 only
  // (5.1 and -6 are ±6 in their own block, not against the tensor); lower:
  // the 14 non-zero elements of block 0, all <= 2688 / 24 = 112.
  EXPECT_EQ(r.stats.upper, 1);
  EXPECT_EQ(r.stats.lower, 14);
  EXPECT_EQ(r.stats.n, 20);
  const auto xh = Dequant(r, 20, kNv);
  EXPECT_EQ(xh[1], 0.5f);
  EXPECT_EQ(xh[9], -6.0f);
  EXPECT_EQ(xh[16], 2688.0f);
  EXPECT_EQ(xh[18], 896.0f);
  EXPECT_EQ(r.residual[18], 104.0f);
}

// Hand-computed mxfp4: amax 5 -> floor(log2 5) = 2 -> X = 2^0 (code 127);
// amax 0.7 -> floor(log2) = -1 -> X = 2^-3 (code 124).
TEST(QuantizeFp4Test, Mxfp4HandComputed) {
  std::vector<float> x(40, 0.0f);
  x[0] = 5.0f;     // 5 -> tie -> 4
  x[1] = -1.75f;   // tie -> 2
  x[2] = 0.2f;     // -> 0 (lower hit)
  x[3] = 4.9f;     // -> 4
  x[32] = 0.7f;    // 0.7 * 8 = 5.6 -> 6
  x[33] = -0.07f;  // 0.56 -> 0.5
  x[34] = 0.03f;   // 0.24 -> 0
  Result r = RunQuantize(x, kMx);
  EXPECT_EQ(r.tensor, 1.0f);
  ASSERT_EQ(r.scales.size(), 2u);
  EXPECT_EQ(r.scales[0], 127);
  EXPECT_EQ(r.scales[1], 124);
  EXPECT_EQ(r.Code(0), 0x6);
  EXPECT_EQ(r.Code(1), 0xC);
  EXPECT_EQ(r.Code(2), 0x0);
  EXPECT_EQ(r.Code(3), 0x6);
  EXPECT_EQ(r.Code(32), 0x7);
  EXPECT_EQ(r.Code(33), 0x9);
  EXPECT_EQ(r.Code(34), 0x0);
  // Tensor-relative hits (X = 1 of the amax block): no upper (0.7 is ±6 in
  // its own block only, 5 ties to 4); lower 0.2, -0.07, 0.03 (<= 2^-2).
  EXPECT_EQ(r.stats.upper, 0);
  EXPECT_EQ(r.stats.lower, 3);
  const auto xh = Dequant(r, 40, kMx);
  EXPECT_EQ(xh[32], 0.75f);
  EXPECT_EQ(xh[33], -0.0625f);
  // Values in [6, 8) * X saturate (the spec's clipping): amax 7.9 -> X = 1.
  x[0] = 7.9f;
  r = RunQuantize(x, kMx);
  EXPECT_EQ(r.scales[0], 127);
  EXPECT_EQ(r.Code(0), 0x7);
}

TEST(QuantizeFp4Test, EmptyAndOddSizes) {
  for (Fp4Format f : kFormats) {
    float s_t = -1;
    QuantizeStats st;
    st.upper = 9;
    ASSERT_OK(QuantizeFp4(nullptr, 0, f, nullptr, nullptr, &s_t, nullptr, &st));
    EXPECT_EQ(s_t, 1.0f);
    EXPECT_EQ(st.n, 0);
    EXPECT_EQ(st.upper, 0);
    ASSERT_OK(DequantizeFp4(nullptr, nullptr, &s_t, 0, f, nullptr));
    // Odd n: the last byte's high nibble is 0.
    const std::vector<float> x = {-6.0f, 6.0f, -6.0f};
    const Result r = RunQuantize(x, f);
    ASSERT_EQ(r.codes.size(), 2u);
    EXPECT_EQ(r.codes[1], 0x0F);
  }
  // mxfp4 needs no tensor scale.
  const float x[2] = {1, 2};
  uint8_t q, s;
  ASSERT_OK(QuantizeFp4(x, 2, kMx, &q, &s, nullptr, nullptr, nullptr));
  EXPECT_EQ(q, 0x64);  // amax 2: X = 0.5, codes 2 (0x4) and 4 (0x6)
}

TEST(QuantizeFp4Test, ZeroBlocks) {
  std::vector<float> x(48, 0.0f);
  x[20] = -0.0f;
  x[40] = 3.0f;  // only the last nvfp4 block is non-zero
  for (Fp4Format f : kFormats) {
    const Result r = RunQuantize(x, f);
    ExpectSame(r, Naive(x, f));
    if (f == kNv) {
      EXPECT_EQ(r.scales[0], 0x00);
      EXPECT_EQ(r.scales[1], 0x00);
      EXPECT_NE(r.scales[2], 0x00);
    } else {
      EXPECT_EQ(r.scales[0], 127);
    }
    EXPECT_EQ(r.Code(20), 0x8);  // -0 keeps its sign
    const auto xh = Dequant(r, 48, f);
    for (int i = 0; i < 48; ++i) {
      if (i == 40) continue;
      EXPECT_EQ(xh[i], 0.0f) << i;
      EXPECT_EQ(r.residual[i], 0.0f) << i;
    }
    EXPECT_NEAR(xh[40], 3.0f, 1e-6);
    EXPECT_EQ(r.stats.lower, 0);
  }
  // An all-zero tensor.
  const std::vector<float> z(37, 0.0f);
  for (Fp4Format f : kFormats) {
    const Result r = RunQuantize(z, f);
    EXPECT_EQ(r.tensor, 1.0f);
    for (uint8_t c : r.codes) EXPECT_EQ(c, 0);
    EXPECT_EQ(r.stats.RelL2(), 0.0);
    EXPECT_EQ(r.stats.Cosine(), 1.0);
  }
}

// A block 10^4 below the tensor's amax: its E4M3 scale would round to 0;
// it takes the smallest subnormal 0x01 instead and keeps what fits.
TEST(QuantizeFp4Test, Nvfp4BlockScaleUnderflow) {
  std::vector<float> x(32, 0.0f);
  x[0] = 2688.0f;  // s_t = 1
  // Block 1: amax 0.0032, and 0.0032 / 6 < 2^-10 rounds to 0 in E4M3.
  for (int i = 16; i < 32; ++i) {
    x[i] = 0.0002f * float(i - 15) * ((i % 2) ? 1.0f : -1.0f);
  }
  const Result r = RunQuantize(x, kNv);
  ExpectSame(r, Naive(x, kNv));
  EXPECT_EQ(r.tensor, 1.0f);
  EXPECT_EQ(r.scales[1], 0x01);
  EXPECT_EQ(Nvfp4BlockScaleCode(0.0032f, 1.0f), 0x01);
  EXPECT_EQ(EncodeFp8(0.0032f / 6.0f, Fp8Format::kE4M3), 0x00);
  const auto xh = Dequant(r, 32, kNv);
  int nonzero = 0;
  for (int i = 16; i < 32; ++i) {
    ASSERT_LE(std::fabs(xh[i] - x[i]), std::fabs(x[i])) << i;
    // No element saturates: |x / 2^-9| <= 3.
    EXPECT_NE(r.Code(i) & 7, 7) << i;
    nonzero += xh[i] != 0;
  }
  EXPECT_GT(nonzero, 8);         // most of the block survives
  EXPECT_EQ(r.stats.upper, 1);   // only 2688
  EXPECT_EQ(r.stats.lower, 16);  // block 1, far below 2688 / 24
}

// Whole tensors in the float subnormal range, and blocks far below it.
TEST(QuantizeFp4Test, SubnormalRange) {
  for (Fp4Format f : kFormats) {
    for (float unit : {1e-40f, 1e-44f, 1e-30f}) {
      std::vector<float> x = RandomData(100, 17);
      for (auto& v : x) v *= unit;
      x[50] = std::numeric_limits<float>::denorm_min();
      SCOPED_TRACE(::testing::Message() << Fp4FormatName(f) << " " << unit);
      const Result r = RunQuantize(x, f);
      ExpectSame(r, Naive(x, f));
      EXPECT_TRUE(std::isfinite(r.tensor) && r.tensor > 0);
      const auto xh = Dequant(r, 100, f);
      for (int i = 0; i < 100; ++i) {
        ASSERT_TRUE(std::isfinite(xh[i])) << i;
        ASSERT_TRUE(SameBits(r.residual[i], x[i] - xh[i])) << i;
      }
      // mxfp4 cannot scale below 2^-127: such blocks decode to 0.
      EXPECT_LE(r.stats.RelL2(), 1.0);
    }
  }
  // mxfp4 clamps the shared exponent at 2^-127.
  EXPECT_EQ(Mxfp4ScaleCode(1e-40f), 0);
  EXPECT_EQ(Mxfp4ScaleCode(std::ldexp(1.0f, -124)), 1);
  EXPECT_EQ(Mxfp4ScaleCode(std::numeric_limits<float>::max()), 252);
  EXPECT_EQ(Nvfp4TensorScale(1e-44f), std::numeric_limits<float>::denorm_min());
}

TEST(QuantizeFp4Test, NonFiniteBlocksAreFlagged) {
  for (Fp4Format f : kFormats) {
    const int64_t bs = Fp4BlockSize(f);
    auto x = RandomData(4 * bs, 4);
    x[bs + 3] = kNaN;       // block 1
    x[2 * bs + 5] = -kInf;  // block 2
    const Result r = RunQuantize(x, f);
    ExpectSame(r, Naive(x, f));
    const uint8_t flag = f == kNv ? 0x7F : 0xFF;
    EXPECT_EQ(r.scales[1], flag);
    EXPECT_EQ(r.scales[2], flag);
    EXPECT_NE(r.scales[0], flag);
    EXPECT_NE(r.scales[3], flag);
    EXPECT_TRUE(std::isfinite(r.tensor));
    EXPECT_EQ(r.stats.nonfinite, 2);
    EXPECT_EQ(r.Code(bs + 3), 0x7);      // NaN -> +6
    EXPECT_EQ(r.Code(2 * bs + 5), 0xF);  // -Inf -> -6
    EXPECT_EQ(r.residual[bs + 3], 0.0f);
    EXPECT_EQ(r.residual[2 * bs + 5], 0.0f);
    EXPECT_TRUE(std::isfinite(r.stats.err_sq));
    const auto xh = Dequant(r, 4 * bs, f);
    for (int64_t i = 0; i < 4 * bs; ++i) {
      EXPECT_EQ(std::isnan(xh[i]), i >= bs && i < 3 * bs) << i;
    }
    // The flag poisons every sum it enters.
    std::vector<float> acc(4 * bs, 1.0f);
    const Fp4Source src{r.codes.data(), r.scales.data(), &r.tensor};
    ASSERT_OK(DequantizeAccumulateFp4(&src, 1, 4 * bs, f, false, acc.data()));
    for (int64_t i = 0; i < 4 * bs; ++i) {
      EXPECT_EQ(std::isnan(acc[i]), i >= bs && i < 3 * bs) << i;
    }
    // In place, as error feedback runs: the residual overwrites x, and the
    // non-finite count is still that of x.
    const Result in = RunQuantizeInPlace(x, f);
    EXPECT_EQ(in.codes, r.codes);
    EXPECT_EQ(in.scales, r.scales);
    EXPECT_EQ(in.stats.nonfinite, 2);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(SameBits(in.residual[i], r.residual[i])) << i;
    }
    // Finite elements of a flagged block are coded with the finite amax.
    auto y = x;
    y[bs + 3] = 0;
    y[2 * bs + 5] = 0;
    const Result clean = RunQuantize(y, f);
    for (int64_t i = 0; i < 4 * bs; ++i) {
      if (i == bs + 3 || i == 2 * bs + 5) continue;
      ASSERT_EQ(r.Code(i), clean.Code(i)) << i;
      ASSERT_TRUE(SameBits(r.residual[i], clean.residual[i])) << i;
    }
  }
}

// What a rank reads off the wire is arbitrary: every code and block-scale
// byte, and tensor scales that are NaN, infinite, negative, zero or
// subnormal, decode (and accumulate) as the header's formula does element
// by element, bit for bit but for NaNs (the AVX2 whole-block path and the
// scalar tail).
TEST(QuantizeFp4Test, ArbitraryBytesDecodeAsTheFormula) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  const float tensors[] = {1.0f, 0.37f, -2.5f,  0.0f, -0.0f,
                           kNaN, kInf,  1e-40f, 3e38f};
  for (Fp4Format f : kFormats) {
    const int64_t bs = Fp4BlockSize(f);
    for (int64_t n : {bs * 16 + 7, bs * 16}) {
      std::vector<uint8_t> codes(Fp4PackedBytes(n)), scales(Fp4NumBlocks(n, f));
      for (auto& c : codes) c = uint8_t(byte(rng));
      for (size_t b = 0; b < scales.size(); ++b)
        scales[b] = uint8_t(b * 17 % 256);
      scales[0] = f == kNv ? 0x7F : 0xFF;  // the NaN flag
      for (float t : tensors) {
        SCOPED_TRACE(::testing::Message()
                     << Fp4FormatName(f) << " n " << n << " tensor " << t);
        std::vector<float> out(n), acc(n, 0.25f);
        ASSERT_OK(
            DequantizeFp4(codes.data(), scales.data(), &t, n, f, out.data()));
        const Fp4Source src{codes.data(), scales.data(), &t};
        ASSERT_OK(DequantizeAccumulateFp4(&src, 1, n, f, false, acc.data()));
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t q = (codes[i / 2] >> (4 * (i % 2))) & 15;
          const uint8_t sc = scales[i / bs];
          const float want =
              f == kNv ? (DecodeE2M1(q) * DecodeFp8(sc, Fp8Format::kE4M3)) * t
                       : DecodeE2M1(q) * DecodeE8M0(sc);
          // A NaN's sign and payload depend on operand order; any NaN is
          // the same value here.
          const auto same = [](float a, float b) {
            return std::isnan(b) ? std::isnan(a) : SameBits(a, b);
          };
          ASSERT_TRUE(same(out[i], want)) << i << ": " << out[i];
          ASSERT_TRUE(same(acc[i], 0.25f + want)) << i;
        }
      }
    }
  }
}

TEST(QuantizeFp4Test, ResidualIdentityAndAlias) {
  for (Fp4Format f : kFormats) {
    auto x = RandomData(5003, 9);
    const Result r = RunQuantize(x, f);
    const auto xh = Dequant(r, x.size(), f);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(SameBits(r.residual[i], x[i] - xh[i])) << i;
      ASSERT_EQ(xh[i] + r.residual[i], x[i]) << i;
    }
    // In place, as error feedback runs.
    const Result in = RunQuantizeInPlace(x, f);
    EXPECT_EQ(in.codes, r.codes);
    EXPECT_EQ(in.scales, r.scales);
    EXPECT_EQ(in.stats.err_sq, r.stats.err_sq);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(SameBits(in.residual[i], r.residual[i])) << i;
    }
  }
}

TEST(QuantizeFp4Test, StatsAgreeWithRecomputation) {
  for (Fp4Format f : kFormats) {
    const auto x = Gaussian(3001, 5);
    const Result r = RunQuantize(x, f);
    const auto xh = Dequant(r, x.size(), f);
    double e = 0, xx = 0, hx = 0, amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(double(v)));
    // The amax block's scale: a / 6 (nvfp4), 2^(floor(log2 a) - 2) (mxfp4).
    const double scale =
        f == kNv ? amax / 6 : std::ldexp(1.0, std::ilogb(amax) - 2);
    int64_t upper = 0, lower = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e += (double(xh[i]) - x[i]) * (double(xh[i]) - x[i]);
      xx += double(x[i]) * x[i];
      hx += double(xh[i]) * x[i];
      upper += std::fabs(x[i]) / scale > 5;
      lower += x[i] != 0 && std::fabs(x[i]) / scale <= 0.25;
    }
    EXPECT_NEAR(r.stats.err_sq, e, 1e-12 * e);
    EXPECT_NEAR(r.stats.x_sq, xx, 1e-12 * xx);
    EXPECT_NEAR(r.stats.xhat_x, hx, 1e-12 * hx);
    EXPECT_EQ(r.stats.upper, upper);
    EXPECT_EQ(r.stats.lower, lower);
    EXPECT_GT(upper, 0);
    EXPECT_GT(lower, 0);
  }
}

TEST(QuantizeFp4Test, AccumulateMatchesDequantizeSums) {
  for (Fp4Format f : kFormats) {
    const int64_t n = 1001;
    std::vector<Result> rs;
    for (uint32_t k = 0; k < 3; ++k)
      rs.push_back(RunQuantize(RandomData(n, 40 + k), f));
    std::vector<Fp4Source> src;
    for (auto& r : rs)
      src.push_back({r.codes.data(), r.scales.data(), &r.tensor});
    std::vector<float> acc(n + 1, 2.0f), want(n, 2.0f);
    ASSERT_OK(DequantizeAccumulateFp4(src.data(), 3, n, f, false, acc.data()));
    for (auto& r : rs) {
      const auto xh = Dequant(r, n, f);
      for (int64_t i = 0; i < n; ++i) want[i] = want[i] + xh[i];
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameBits(acc[i], want[i])) << i;
    EXPECT_EQ(acc[n], 2.0f);
    ASSERT_OK(DequantizeAccumulateFp4(src.data(), 1, n, f, true, acc.data()));
    const auto xh0 = Dequant(rs[0], n, f);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameBits(acc[i], 0.0f + xh0[i])) << i;
    }
    ASSERT_OK(DequantizeAccumulateFp4(nullptr, 0, n, f, true, acc.data()));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 0.0f);
  }
}

// Error feedback in whitened coordinates (DESIGN §2) with the 4-bit codec:
// Ũ = W T + R by kernels/whiten.h, then QuantizeFp4 in place leaves
// R = Ũ − x̂. Over steps the residual stays bounded (it does not grow).
TEST(QuantizeFp4Test, WhitenedErrorFeedbackChain) {
  const int64_t rows = 8, d = 64, r = 4;
  std::vector<float> u(d * r, 0.0f), c(r, -0.5f);
  for (int64_t j = 0; j < r; ++j) u[j * r + j] = 1.0f;  // orthonormal columns
  const LowRankView fwd{u.data(), c.data(), d, r};
  std::vector<float> ws(WhitenWorkspaceFloats(rows, d, r));
  for (Fp4Format f : kFormats) {
    std::vector<float> res(rows * d, 0.0f), ut(rows * d);
    std::vector<uint8_t> q(Fp4PackedBytes(rows * d)),
        sc(Fp4NumBlocks(rows * d, f));
    float s_t;
    for (int step = 0; step < 5; ++step) {
      const auto w = Gaussian(rows * d, 100 + step);
      ASSERT_OK(
          ApplyLowRank(w.data(), rows, fwd, res.data(), ut.data(), ws.data()));
      const std::vector<float> before = ut;
      ASSERT_OK(QuantizeFp4(ut.data(), rows * d, f, q.data(), sc.data(), &s_t,
                            ut.data(), nullptr));
      res = ut;
      std::vector<float> xh(rows * d);
      ASSERT_OK(
          DequantizeFp4(q.data(), sc.data(), &s_t, rows * d, f, xh.data()));
      double rn = 0, un = 0;
      for (int64_t i = 0; i < rows * d; ++i) {
        ASSERT_TRUE(SameBits(res[i], before[i] - xh[i])) << i;
        rn += double(res[i]) * res[i];
        un += double(before[i]) * before[i];
      }
      EXPECT_LT(std::sqrt(rn / un), 0.3) << step;
    }
  }
}

TEST(QuantizeFp4Test, RejectsBadArguments) {
  float x = 1, s = 1;
  uint8_t q = 0, b = 127;
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(QuantizeFp4(&x, -1, kNv, &q, &b, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(QuantizeFp4(&x, 1, kNv, &q, &b, nullptr, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(QuantizeFp4(nullptr, 1, kMx, &q, &b, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(QuantizeFp4(&x, 1, kMx, nullptr, &b, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(QuantizeFp4(&x, 1, kMx, &q, nullptr, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeFp4(&q, &b, &s, -1, kNv, &x), StatusIs(kBad));
  EXPECT_THAT(DequantizeFp4(&q, &b, nullptr, 1, kNv, &x), StatusIs(kBad));
  EXPECT_THAT(DequantizeFp4(&q, nullptr, &s, 1, kMx, &x), StatusIs(kBad));
  EXPECT_THAT(DequantizeFp4(&q, &b, &s, 1, kMx, nullptr), StatusIs(kBad));
  const Fp4Source bad{&q, &b, nullptr};
  EXPECT_THAT(DequantizeAccumulateFp4(&bad, 1, 1, kNv, false, &x),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulateFp4(nullptr, 1, 1, kNv, false, &x),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulateFp4(&bad, -1, 1, kMx, false, &x),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulateFp4(&bad, 1, 1, kMx, false, nullptr),
              StatusIs(kBad));
  ASSERT_OK(DequantizeAccumulateFp4(&bad, 1, 1, kMx, false, &x));
}

// Fidelity on N(0, 1) data, n = 2^20 (printed, loosely bounded): E4M3 per
// tensor vs the two 4-bit formats.
TEST(QuantizeFp4Test, RelL2OnGaussianData) {
  const int64_t n = int64_t{1} << 20;
  const auto x = Gaussian(n, 2027);
  std::vector<uint8_t> q8(n);
  float s8;
  QuantizeStats e4m3;
  ASSERT_OK(Quantize(x.data(), n, {Fp8Format::kE4M3, 0}, q8.data(), &s8,
                     nullptr, &e4m3));
  const Result nv = RunQuantize(x, kNv), mx = RunQuantize(x, kMx);
  std::printf(
      "RelL2 on N(0,1), n=2^20: e4m3 (per tensor) %.4f, nvfp4 %.4f, "
      "mxfp4 %.4f; 4-bit boundary hits upper/lower: nvfp4 %lld/%lld, "
      "mxfp4 %lld/%lld\n",
      e4m3.RelL2(), nv.stats.RelL2(), mx.stats.RelL2(),
      (long long)nv.stats.upper, (long long)nv.stats.lower,
      (long long)mx.stats.upper, (long long)mx.stats.lower);
  RecordProperty("rel_l2_e4m3", std::to_string(e4m3.RelL2()));
  RecordProperty("rel_l2_nvfp4", std::to_string(nv.stats.RelL2()));
  RecordProperty("rel_l2_mxfp4", std::to_string(mx.stats.RelL2()));
  EXPECT_LT(e4m3.RelL2(), nv.stats.RelL2());
  EXPECT_LT(nv.stats.RelL2(), mx.stats.RelL2());
  EXPECT_LT(nv.stats.RelL2(), 0.15);
  EXPECT_LT(mx.stats.RelL2(), 0.25);
}

}  // namespace
}  // namespace gift::kernels
