#include "kernels/fp8.h"

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
constexpr Fp8Format kE4 = Fp8Format::kE4M3;
constexpr Fp8Format kE5 = Fp8Format::kE5M2;

float Bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
float NextUp(float x) { return std::nextafter(x, INFINITY); }
float NextDown(float x) { return std::nextafter(x, -INFINITY); }

// Independent decoder from the format definition.
double RefDecode(uint8_t c, Fp8Format f) {
  const int mb = f == kE4 ? 3 : 2, bias = f == kE4 ? 7 : 15;
  const int e = (c & 0x7F) >> mb, m = c & ((1 << mb) - 1);
  const double sign = (c & 0x80) ? -1 : 1;
  if (f == kE4 && (c & 0x7F) == 0x7F) return NAN;
  if (f == kE5 && e == 31) return m == 0 ? sign * INFINITY : NAN;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - mb);
  return sign * std::ldexp(1.0 + std::ldexp(m, -mb), e - bias);
}

TEST(Fp8Test, NamesRoundTrip) {
  EXPECT_STREQ(Fp8FormatName(kE4), "e4m3");
  EXPECT_STREQ(Fp8FormatName(kE5), "e5m2");
  EXPECT_EQ(ParseFp8Format("E4M3").value(), kE4);
  EXPECT_EQ(ParseFp8Format("e5m2").value(), kE5);
  EXPECT_THAT(ParseFp8Format("fp8"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Fp8Test, DecodeMatchesFormatDefinitionForAllCodes) {
  for (Fp8Format f : {kE4, kE5}) {
    for (int c = 0; c < 256; ++c) {
      const double want = RefDecode(uint8_t(c), f);
      const float got = DecodeFp8(uint8_t(c), f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c;
      } else {
        EXPECT_EQ(double(got), want) << Fp8FormatName(f) << " code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
      }
    }
  }
  EXPECT_EQ(DecodeFp8(Fp8MaxCode(kE4), kE4), 448.0f);
  EXPECT_EQ(DecodeFp8(Fp8MaxCode(kE5), kE5), 57344.0f);
}

TEST(Fp8Test, EncodeInvertsDecodeForEveryFiniteCode) {
  for (Fp8Format f : {kE4, kE5}) {
    for (int c = 0; c < 256; ++c) {
      const float v = DecodeFp8(uint8_t(c), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(EncodeFp8(v, f), c) << Fp8FormatName(f) << " " << v;
    }
  }
}

TEST(Fp8Test, E4M3SpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(EncodeFp8(0.0f, kE4), 0x00);
  EXPECT_EQ(EncodeFp8(-0.0f, kE4), 0x80);
  EXPECT_EQ(EncodeFp8(Bits(1), kE4), 0x00);  // float denormal
  EXPECT_EQ(EncodeFp8(-Bits(0x7FFFFF), kE4), 0x80);
  EXPECT_EQ(EncodeFp8(std::ldexp(1.0f, -9), kE4), 0x01);   // min subnormal
  EXPECT_EQ(EncodeFp8(std::ldexp(1.0f, -10), kE4), 0x00);  // tie -> even 0
  EXPECT_EQ(EncodeFp8(NextUp(std::ldexp(1.0f, -10)), kE4), 0x01);
  EXPECT_EQ(EncodeFp8(3 * std::ldexp(1.0f, -10), kE4), 0x02);  // tie -> even
  EXPECT_EQ(EncodeFp8(5 * std::ldexp(1.0f, -10), kE4), 0x02);  // tie -> even
  EXPECT_EQ(EncodeFp8(NextDown(std::ldexp(1.0f, -6)), kE4), 0x08);
  EXPECT_EQ(EncodeFp8(1.0f, kE4), 0x38);
  EXPECT_EQ(EncodeFp8(1.0625f, kE4), 0x38);  // tie down to even
  EXPECT_EQ(EncodeFp8(NextUp(1.0625f), kE4), 0x39);
  EXPECT_EQ(EncodeFp8(1.1875f, kE4), 0x3A);  // tie up to even
  EXPECT_EQ(EncodeFp8(NextDown(1.1875f), kE4), 0x39);
  EXPECT_EQ(EncodeFp8(-1.1875f, kE4), 0xBA);
  EXPECT_EQ(EncodeFp8(448.0f, kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(NextUp(448.0f), kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(464.0f, kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(NextUp(464.0f), kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(1e30f, kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(-1e30f, kE4), 0xFE);
  EXPECT_EQ(EncodeFp8(inf, kE4), 0x7E);
  EXPECT_EQ(EncodeFp8(-inf, kE4), 0xFE);
  EXPECT_EQ(EncodeFp8(nan, kE4), 0x7F);
  EXPECT_EQ(EncodeFp8(-nan, kE4), 0x7F);
  EXPECT_EQ(EncodeFp8(Bits(0xFF800001), kE4), 0x7F);  // negative sNaN
}

TEST(Fp8Test, E5M2SpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(EncodeFp8(0.0f, kE5), 0x00);
  EXPECT_EQ(EncodeFp8(-0.0f, kE5), 0x80);
  EXPECT_EQ(EncodeFp8(Bits(5), kE5), 0x00);
  EXPECT_EQ(EncodeFp8(std::ldexp(1.0f, -16), kE5), 0x01);
  EXPECT_EQ(EncodeFp8(std::ldexp(1.0f, -17), kE5), 0x00);  // tie -> even
  EXPECT_EQ(EncodeFp8(NextUp(std::ldexp(1.0f, -17)), kE5), 0x01);
  EXPECT_EQ(EncodeFp8(3 * std::ldexp(1.0f, -17), kE5), 0x02);
  EXPECT_EQ(EncodeFp8(1.0f, kE5), 0x3C);
  EXPECT_EQ(EncodeFp8(1.125f, kE5), 0x3C);  // tie down to even
  EXPECT_EQ(EncodeFp8(NextUp(1.125f), kE5), 0x3D);
  EXPECT_EQ(EncodeFp8(1.375f, kE5), 0x3E);  // tie up to even
  EXPECT_EQ(EncodeFp8(57344.0f, kE5), 0x7B);
  EXPECT_EQ(EncodeFp8(NextDown(61440.0f), kE5), 0x7B);
  EXPECT_EQ(EncodeFp8(61440.0f, kE5), 0x7B);
  EXPECT_EQ(EncodeFp8(-1e38f, kE5), 0xFB);
  EXPECT_EQ(EncodeFp8(inf, kE5), 0x7B);
  EXPECT_EQ(EncodeFp8(-inf, kE5), 0xFB);
  EXPECT_EQ(EncodeFp8(nan, kE5), 0x7F);
  EXPECT_EQ(EncodeFp8(-nan, kE5), 0x7F);
}

TEST(Fp8Test, BulkMatchesScalar) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 20);
  for (int64_t n : {0, 1, 3, 17, 1000, 4099}) {
    std::vector<float> x(n);
    for (auto& v : x) v = std::ldexp(g(rng), ex(rng));
    if (n > 3) {
      x[0] = std::numeric_limits<float>::quiet_NaN();
      x[1] = -std::numeric_limits<float>::infinity();
      x[2] = -0.0f;
    }
    for (Fp8Format f : {kE4, kE5}) {
      std::vector<uint8_t> q(n + 1, 0xAB);
      EncodeFp8(x.data(), n, f, q.data());
      std::vector<float> back(n + 1, -7.0f);
      DecodeFp8(q.data(), n, f, back.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(q[i], EncodeFp8(x[i], f)) << i;
        const float want = DecodeFp8(q[i], f);
        ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << i;
      }
      EXPECT_EQ(q[n], 0xAB);  // nothing written past n
      EXPECT_EQ(back[n], -7.0f);
    }
  }
}

#if defined(__x86_64__)
// Frameworks may run with MXCSR.FTZ and DAZ set: the bulk decoder (which
// converts E4M3 subnormal codes through binary16) must not change.
TEST(Fp8Test, BulkDecodeIsExactUnderFlushToZero) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    std::vector<uint8_t> codes(1000);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 7 + 3);
    std::vector<float> got(codes.size());
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
    DecodeFp8(codes.data(), codes.size(), f, got.data());
    _mm_setcsr(csr);
    for (size_t i = 0; i < codes.size(); ++i) {
      const float want = DecodeFp8(codes[i], f);
      ASSERT_EQ(std::memcmp(&want, &got[i], 4), 0) << int(codes[i]);
    }
  }
}
#endif

TEST(Fp8Test, RoundsToNearestOnRandomInputs) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  for (int i = 0; i < 3000; ++i) {
    const float x = u(rng);
    const uint8_t q = EncodeFp8(x, kE4);
    const double d = std::fabs(double(DecodeFp8(q, kE4)) - x);
    // No other code is strictly closer.
    for (int c = 0; c < 256; ++c) {
      const float v = DecodeFp8(uint8_t(c), kE4);
      if (!std::isfinite(v)) continue;
      ASSERT_LE(d, std::fabs(double(v) - x)) << x << " code " << int(q);
    }
  }
}

}  // namespace
}  // namespace gift::kernels
