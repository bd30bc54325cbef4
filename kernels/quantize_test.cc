#include "kernels/quantize.h"

#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

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

struct Result {
  std::vector<uint8_t> codes;
  std::vector<float> scales, residual;
  QuantizeStats stats;
};

// Outputs pre-filled with sentinels a correct call never leaves.
Result RunQuantize(const std::vector<float>& x, const QuantizeSpec& spec) {
  const int64_t n = x.size();
  Result r{std::vector<uint8_t>(n, 0x7F),
           std::vector<float>(NumScales(n, spec.block_size), -1.0f),
           std::vector<float>(n, kNaN),
           {}};
  r.stats.n = -5;
  EXPECT_OK(Quantize(x.data(), n, spec, r.codes.data(), r.scales.data(),
                     r.residual.data(), &r.stats));
  return r;
}

// Naive reference, element by element, sums in double.
Result Naive(const std::vector<float>& x, const QuantizeSpec& spec) {
  const int64_t n = x.size();
  const int64_t b =
      spec.block_size > 0 ? spec.block_size : std::max<int64_t>(n, 1);
  Result r{std::vector<uint8_t>(n),
           std::vector<float>(NumScales(n, spec.block_size)),
           std::vector<float>(n),
           {}};
  r.stats.n = n;
  if (n == 0 && spec.block_size == 0) r.scales[0] = 1.0f;
  for (int64_t lo = 0; lo < n; lo += b) {
    const int64_t hi = std::min(n, lo + b);
    float amax = 0;
    bool bad = false;
    for (int64_t i = lo; i < hi; ++i) {
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
      bad |= !std::isfinite(x[i]);
    }
    float s = amax == 0 ? 1.0f : amax / Fp8Max(spec.format);
    if (s == 0) s = std::numeric_limits<float>::denorm_min();
    r.scales[lo / b] = bad ? kNaN : s;
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t q = EncodeFp8(x[i] / s, spec.format);
      const float h = DecodeFp8(q, spec.format) * s;
      r.codes[i] = q;
      if (!std::isfinite(x[i])) {
        r.residual[i] = 0;
        ++r.stats.nonfinite;
        continue;
      }
      r.residual[i] = x[i] - h;
      r.stats.upper += (q & 0x7F) == Fp8MaxCode(spec.format);
      r.stats.lower += x[i] != 0 && (q & 0x7F) <= 1;
      r.stats.err_sq += (double(h) - x[i]) * (double(h) - x[i]);
      r.stats.x_sq += double(x[i]) * x[i];
      r.stats.xhat_x += double(h) * x[i];
    }
  }
  return r;
}

void ExpectSame(const Result& got, const Result& want) {
  ASSERT_EQ(got.codes.size(), want.codes.size());
  for (size_t i = 0; i < got.codes.size(); ++i) {
    ASSERT_EQ(got.codes[i], want.codes[i]) << "code " << i;
    ASSERT_TRUE(SameBits(got.residual[i], want.residual[i]))
        << "residual " << i;
  }
  ASSERT_EQ(got.scales.size(), want.scales.size());
  for (size_t b = 0; b < got.scales.size(); ++b) {
    ASSERT_TRUE(SameBits(got.scales[b], want.scales[b]))
        << "scale " << b << ": " << got.scales[b] << " vs " << want.scales[b];
  }
  EXPECT_EQ(got.stats.n, want.stats.n);
  EXPECT_EQ(got.stats.upper, want.stats.upper);
  EXPECT_EQ(got.stats.lower, want.stats.lower);
  EXPECT_EQ(got.stats.nonfinite, want.stats.nonfinite);
  EXPECT_NEAR(got.stats.err_sq, want.stats.err_sq, 1e-12 * want.stats.err_sq);
  EXPECT_NEAR(got.stats.x_sq, want.stats.x_sq, 1e-12 * want.stats.x_sq);
  EXPECT_NEAR(got.stats.xhat_x, want.stats.xhat_x,
              1e-12 * std::fabs(want.stats.xhat_x));
}

TEST(QuantizeTest, NumScales) {
  EXPECT_EQ(NumScales(0, 0), 1);
  EXPECT_EQ(NumScales(100, 0), 1);
  EXPECT_EQ(NumScales(0, 8), 0);
  EXPECT_EQ(NumScales(8, 8), 1);
  EXPECT_EQ(NumScales(9, 8), 2);
}

TEST(QuantizeTest, MatchesNaiveReference) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t block : {0, 1, 7, 512}) {
      for (int64_t n : {1, 2, 5, 1000, 4097}) {
        SCOPED_TRACE(::testing::Message()
                     << Fp8FormatName(f) << " block " << block << " n " << n);
        const auto x = RandomData(n, uint32_t(n * 31 + block));
        const QuantizeSpec spec{f, block};
        ExpectSame(RunQuantize(x, spec), Naive(x, spec));
      }
    }
  }
}

// Long enough for the vector loops (and their tails), with the values they
// must treat specially: +-0, +-max, FP8 subnormals, values that round up to
// the next binade or to max, float subnormals.
TEST(QuantizeTest, MatchesNaiveReferenceOnSpecialValues) {
  std::vector<float> x = RandomData(1000, 11);
  const float special[] = {0.0f,
                           -0.0f,
                           448.0f,
                           -448.0f,
                           447.0f,
                           std::ldexp(1.0f, -9),
                           -std::ldexp(3.0f, -10),
                           std::ldexp(1.0f, -10),
                           std::ldexp(1.0001f, -10),
                           std::ldexp(15.5f, -4),
                           -std::ldexp(1.9375f, 3),
                           1e-40f,
                           -1e-45f,
                           std::ldexp(7.5f, -9)};
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 3 == 0) x[i] = special[(i / 3) % std::size(special)];
  }
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t block : {0, 64, 100}) {
      SCOPED_TRACE(::testing::Message()
                   << Fp8FormatName(f) << " block " << block);
      const QuantizeSpec spec{f, block};
      ExpectSame(RunQuantize(x, spec), Naive(x, spec));
      // In place, as error feedback runs.
      std::vector<float> y = x;
      std::vector<uint8_t> codes(x.size());
      std::vector<float> scales(NumScales(x.size(), block));
      ASSERT_OK(Quantize(y.data(), y.size(), spec, codes.data(), scales.data(),
                         y.data(), nullptr));
      const Result want = Naive(x, spec);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(codes[i], want.codes[i]) << i;
        ASSERT_TRUE(SameBits(y[i], want.residual[i])) << i;
      }
    }
  }
}

TEST(QuantizeTest, EmptyTensor) {
  float scale = -1;
  QuantizeStats st;
  st.upper = 9;
  ASSERT_OK(Quantize(nullptr, 0, {}, nullptr, &scale, nullptr, &st));
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(st.n, 0);
  EXPECT_EQ(st.upper, 0);
  ASSERT_OK(Quantize(nullptr, 0, {Fp8Format::kE4M3, 16}, nullptr, nullptr,
                     nullptr, &st));
}

TEST(QuantizeTest, ZeroTensorHasScaleOneAndZeroCodes) {
  const std::vector<float> x(100, 0.0f);
  const Result r = RunQuantize(x, {});
  EXPECT_EQ(r.scales[0], 1.0f);
  for (uint8_t q : r.codes) EXPECT_EQ(q, 0);
  for (float v : r.residual) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(r.stats.lower, 0);
  EXPECT_EQ(r.stats.RelL2(), 0.0);
  EXPECT_EQ(r.stats.Cosine(), 1.0);
}

TEST(QuantizeTest, CountsBoundaryHits) {
  // amax 448 makes s = 1, so x/s = x.
  const std::vector<float> x = {448,
                                -448,
                                1e-3f,
                                std::ldexp(1.0f, -11),
                                0,
                                -0.0f,
                                1.0f,
                                std::ldexp(1.0f, -9),
                                -std::ldexp(1.0f, -8),
                                447};
  const Result r = RunQuantize(x, {});
  ASSERT_EQ(r.scales[0], 1.0f);
  EXPECT_EQ(r.stats.upper, 3);  // 448, -448 and 447 (rounds to 448)
  EXPECT_EQ(r.stats.lower, 3);  // 1e-3 (code 1), 2^-11 (code 0), 2^-9
  EXPECT_EQ(r.stats.n, 10);
  EXPECT_EQ(r.codes[3], 0x00);
  EXPECT_EQ(r.codes[8], 0x82);
}

TEST(QuantizeTest, StatsAgreeWithDoubleRecomputation) {
  const auto x = RandomData(3000, 5);
  const Result r = RunQuantize(x, {Fp8Format::kE4M3, 100});
  std::vector<float> xhat(x.size());
  ASSERT_OK(Dequantize(r.codes.data(), r.scales.data(), x.size(),
                       {Fp8Format::kE4M3, 100}, xhat.data()));
  double e = 0, xx = 0, hx = 0, hh = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(xhat[i]) - x[i]) * (double(xhat[i]) - x[i]);
    xx += double(x[i]) * x[i];
    hx += double(xhat[i]) * x[i];
    hh += double(xhat[i]) * xhat[i];
  }
  EXPECT_NEAR(r.stats.err_sq, e, 1e-12 * e);
  EXPECT_NEAR(r.stats.x_sq, xx, 1e-12 * xx);
  EXPECT_NEAR(r.stats.xhat_x, hx, 1e-12 * hx);
  EXPECT_NEAR(r.stats.RelL2(), std::sqrt(e / xx), 1e-12);
  EXPECT_NEAR(r.stats.Cosine(), hx / std::sqrt(hh * xx), 1e-9);
  EXPECT_GT(r.stats.RelL2(), 0.0);
  EXPECT_LT(r.stats.RelL2(), 0.05);
}

TEST(QuantizeTest, ResidualIdentityAndErrorBound) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const auto x = RandomData(5000, 9);
    const QuantizeSpec spec{f, 256};
    const Result r = RunQuantize(x, spec);
    std::vector<float> xhat(x.size());
    ASSERT_OK(Dequantize(r.codes.data(), r.scales.data(), x.size(), spec,
                         xhat.data()));
    const int mant = f == Fp8Format::kE4M3 ? 3 : 2;
    const double sub =
        f == Fp8Format::kE4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(xhat[i] + r.residual[i], x[i]) << i;
      const double s = r.scales[i / 256];
      const double bound =
          std::max(std::ldexp(double(std::fabs(x[i])), -mant - 1), s * sub);
      ASSERT_LE(std::fabs(double(xhat[i]) - x[i]), bound * (1 + 1e-6)) << i;
    }
  }
}

TEST(QuantizeTest, ResidualMayAliasInput) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    auto x = RandomData(2049, 3);
    const QuantizeSpec spec{f, 0};
    const Result want = RunQuantize(x, spec);
    std::vector<uint8_t> codes(x.size());
    float scale;
    QuantizeStats st;
    ASSERT_OK(Quantize(x.data(), x.size(), spec, codes.data(), &scale, x.data(),
                       &st));
    EXPECT_EQ(codes, want.codes);
    EXPECT_EQ(scale, want.scales[0]);
    EXPECT_EQ(st.err_sq, want.stats.err_sq);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(SameBits(x[i], want.residual[i])) << i;
    }
  }
}

TEST(QuantizeTest, NonFiniteBlocksAreFlaggedAndCounted) {
  auto x = RandomData(16, 4);
  x[5] = kNaN;    // block 1
  x[10] = -kInf;  // block 2
  const QuantizeSpec spec{Fp8Format::kE4M3, 4};
  const Result r = RunQuantize(x, spec);
  ExpectSame(r, Naive(x, spec));
  EXPECT_TRUE(std::isnan(r.scales[1]));
  EXPECT_TRUE(std::isnan(r.scales[2]));
  EXPECT_TRUE(std::isfinite(r.scales[0]) && std::isfinite(r.scales[3]));
  EXPECT_EQ(r.stats.nonfinite, 2);
  EXPECT_EQ(r.codes[5], 0x7F);
  EXPECT_EQ(r.codes[10], 0xFE);
  EXPECT_EQ(r.residual[5], 0.0f);
  EXPECT_EQ(r.residual[10], 0.0f);
  EXPECT_TRUE(std::isfinite(r.stats.err_sq));
  std::vector<float> xhat(16);
  ASSERT_OK(Dequantize(r.codes.data(), r.scales.data(), 16, spec, xhat.data()));
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(std::isnan(xhat[i]), i >= 4 && i < 12) << i;
  }
}

TEST(QuantizeTest, PerTensorInfinityFlagsTheWholeTensor) {
  auto x = RandomData(100, 8);
  x[50] = kInf;
  const Result r = RunQuantize(x, {});
  EXPECT_TRUE(std::isnan(r.scales[0]));
  EXPECT_EQ(r.stats.nonfinite, 1);
  ExpectSame(r, Naive(x, {}));
  int64_t finite_hits = 0;
  for (int i = 0; i < 100; ++i)
    finite_hits += i != 50 && (r.codes[i] & 0x7F) == 0x7E;
  EXPECT_EQ(r.codes[50], 0x7E);  // the Inf saturates but is not a hit
  EXPECT_EQ(r.stats.upper, finite_hits);
  std::vector<float> xhat(100);
  ASSERT_OK(Dequantize(r.codes.data(), r.scales.data(), 100, {}, xhat.data()));
  for (float v : xhat) EXPECT_TRUE(std::isnan(v));
}

TEST(QuantizeTest, UnderflowingScaleIsSmallestPositiveFloat) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> x = {tiny, -tiny, 0};
  const Result r = RunQuantize(x, {});
  EXPECT_EQ(r.scales[0], tiny);
  EXPECT_EQ(r.codes[0], EncodeFp8(1.0f, Fp8Format::kE4M3));
  EXPECT_EQ(r.residual[0], 0.0f);
}

TEST(QuantizeTest, DequantizeIsCodeTimesScaleForShortAndLongBlocks) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t block : {0, 3, 1000, 2048}) {
      const int64_t n = 5000;
      auto x = RandomData(n, 21);
      x[4001] = kNaN;  // flags the block of 4001
      const QuantizeSpec spec{f, block};
      const Result r = RunQuantize(x, spec);
      std::vector<float> out(n + 1, -3.0f);
      ASSERT_OK(
          Dequantize(r.codes.data(), r.scales.data(), n, spec, out.data()));
      const int64_t b = block > 0 ? block : n;
      for (int64_t i = 0; i < n; ++i) {
        const float want = DecodeFp8(r.codes[i], f) * r.scales[i / b];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(out[i])) << i;
        } else {
          ASSERT_TRUE(SameBits(out[i], want)) << i;
        }
      }
      EXPECT_EQ(out[n], -3.0f);
    }
  }
}

#if defined(__x86_64__)
// Under MXCSR.FTZ/DAZ (set by some frameworks) Dequantize still equals
// DecodeFp8(code) * scale computed in the same mode, for every code and for
// normal, tiny and subnormal scales.
TEST(QuantizeTest, DequantizeUnderFlushToZero) {
  std::vector<uint8_t> codes(4096);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 13 + 5);
  const float scales[] = {0.37f, 3e-38f, 1e-40f, 1e30f, 1.5e36f};
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (float s : scales) {
      std::vector<float> got(codes.size()), want(codes.size());
      const unsigned csr = _mm_getcsr();
      _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
      const absl::Status st =
          Dequantize(codes.data(), &s, codes.size(), {f, 0}, got.data());
      for (size_t i = 0; i < codes.size(); ++i) {
        want[i] = DecodeFp8(codes[i], f) * s;
      }
      _mm_setcsr(csr);
      ASSERT_OK(st);
      for (size_t i = 0; i < codes.size(); ++i) {
        ASSERT_TRUE(SameBits(got[i], want[i]))
            << Fp8FormatName(f) << " s " << s << " code " << int(codes[i]);
      }
    }
  }
}
#endif

TEST(QuantizeTest, RejectsBadArguments) {
  float x = 1, s;
  uint8_t q;
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(Quantize(&x, -1, {}, &q, &s, nullptr, nullptr), StatusIs(kBad));
  EXPECT_THAT(Quantize(&x, 1, {Fp8Format::kE4M3, -2}, &q, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(Quantize(nullptr, 1, {}, &q, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(Quantize(&x, 1, {}, nullptr, &s, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(Quantize(&x, 1, {}, &q, nullptr, nullptr, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(Dequantize(&q, &s, -1, {}, &x), StatusIs(kBad));
  EXPECT_THAT(Dequantize(nullptr, &s, 1, {}, &x), StatusIs(kBad));
  EXPECT_THAT(Dequantize(&q, &s, 1, {}, nullptr), StatusIs(kBad));
  EXPECT_THAT(Dequantize(&q, &s, 1, {Fp8Format::kE4M3, -1}, &x),
              StatusIs(kBad));
}

TEST(QuantizeTest, StatsMergeAndMetrics) {
  QuantizeStats a{10, 1, 2, 0, 1.0, 4.0, 3.5};
  QuantizeStats b{5, 0, 1, 1, 3.0, 12.0, 10.5};
  a.Merge(b);
  EXPECT_EQ(a.n, 15);
  EXPECT_EQ(a.upper, 1);
  EXPECT_EQ(a.lower, 3);
  EXPECT_EQ(a.nonfinite, 1);
  EXPECT_DOUBLE_EQ(a.RelL2(), 0.5);  // sqrt(4 / 16)
  // ||x̂||² = 4 - 16 + 28 = 16: cos = 14 / 16.
  EXPECT_DOUBLE_EQ(a.Cosine(), 14.0 / 16.0);
  EXPECT_EQ(QuantizeStats{}.Cosine(), 1.0);
}

}  // namespace
}  // namespace gift::kernels
