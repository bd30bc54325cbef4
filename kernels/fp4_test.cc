#include "kernels/fp4.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

// The contract tests against CUDA's own host conversions need cuda_fp4.h
// (it compiles with the host compiler); CMake adds its folder when present.
#if defined(GIFT_HAVE_CUDA_FP4_H)
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;

float Bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint32_t FBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float NextUp(float x) { return std::nextafter(x, INFINITY); }
float NextDown(float x) { return std::nextafter(x, -INFINITY); }

constexpr float kValues[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

TEST(Fp4Test, NamesAndBlockSizes) {
  EXPECT_STREQ(Fp4FormatName(Fp4Format::kNvfp4), "nvfp4");
  EXPECT_STREQ(Fp4FormatName(Fp4Format::kMxfp4), "mxfp4");
  EXPECT_EQ(ParseFp4Format("NVFP4").value(), Fp4Format::kNvfp4);
  EXPECT_EQ(ParseFp4Format("mxfp4").value(), Fp4Format::kMxfp4);
  EXPECT_THAT(ParseFp4Format("fp4"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseFp4Format(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Fp4BlockSize(Fp4Format::kNvfp4), 16);
  EXPECT_EQ(Fp4BlockSize(Fp4Format::kMxfp4), 32);
}

TEST(Fp4Test, DecodeAllCodes) {
  for (int c = 0; c < 16; ++c) {
    const float v = DecodeE2M1(uint8_t(c));
    EXPECT_EQ(std::fabs(v), kValues[c & 7]) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;
    // Only the low nibble counts.
    EXPECT_EQ(FBits(DecodeE2M1(uint8_t(c | 0xA0))), FBits(v)) << c;
  }
}

TEST(Fp4Test, EncodeInvertsDecode) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(EncodeE2M1(DecodeE2M1(uint8_t(c))), c) << c;
  }
}

TEST(Fp4Test, EncodeSpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(EncodeE2M1(0.0f), 0x0);
  EXPECT_EQ(EncodeE2M1(-0.0f), 0x8);
  EXPECT_EQ(EncodeE2M1(Bits(1)), 0x0);  // float denormal
  EXPECT_EQ(EncodeE2M1(-Bits(0x7FFFFF)), 0x8);
  EXPECT_EQ(EncodeE2M1(0.25f), 0x0);  // tie -> even 0
  EXPECT_EQ(EncodeE2M1(-0.25f), 0x8);
  EXPECT_EQ(EncodeE2M1(NextUp(0.25f)), 0x1);
  EXPECT_EQ(EncodeE2M1(0.75f), 0x2);  // tie 0.5 / 1 -> even 1 (code 2)
  EXPECT_EQ(EncodeE2M1(NextDown(0.75f)), 0x1);
  EXPECT_EQ(EncodeE2M1(1.25f), 0x2);  // tie 1 / 1.5 -> 1
  EXPECT_EQ(EncodeE2M1(NextUp(1.25f)), 0x3);
  EXPECT_EQ(EncodeE2M1(1.75f), 0x4);  // tie 1.5 / 2 -> 2
  EXPECT_EQ(EncodeE2M1(NextDown(1.75f)), 0x3);
  EXPECT_EQ(EncodeE2M1(2.5f), 0x4);  // tie 2 / 3 -> 2
  EXPECT_EQ(EncodeE2M1(3.5f), 0x6);  // tie 3 / 4 -> 4
  EXPECT_EQ(EncodeE2M1(-3.5f), 0xE);
  EXPECT_EQ(EncodeE2M1(5.0f), 0x6);  // tie 4 / 6 -> 4
  EXPECT_EQ(EncodeE2M1(NextUp(5.0f)), 0x7);
  EXPECT_EQ(EncodeE2M1(6.0f), 0x7);
  EXPECT_EQ(EncodeE2M1(7.0f), 0x7);  // saturates
  EXPECT_EQ(EncodeE2M1(1e30f), 0x7);
  EXPECT_EQ(EncodeE2M1(-1e30f), 0xF);
  EXPECT_EQ(EncodeE2M1(inf), 0x7);
  EXPECT_EQ(EncodeE2M1(-inf), 0xF);
  EXPECT_EQ(EncodeE2M1(nan), 0x7);  // cuda_fp4.h: NaN -> positive max
  EXPECT_EQ(EncodeE2M1(-nan), 0x7);
  EXPECT_EQ(EncodeE2M1(Bits(0xFF800001)), 0x7);
}

TEST(Fp4Test, RoundsToNearestOnRandomInputs) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng);
    const double d = std::fabs(double(DecodeE2M1(EncodeE2M1(x))) - x);
    for (int c = 0; c < 16; ++c) {
      ASSERT_LE(d, std::fabs(double(DecodeE2M1(uint8_t(c))) - x)) << x;
    }
  }
}

TEST(Fp4Test, E8M0) {
  EXPECT_EQ(DecodeE8M0(127), 1.0f);
  EXPECT_EQ(DecodeE8M0(128), 2.0f);
  EXPECT_EQ(DecodeE8M0(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(DecodeE8M0(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(DecodeE8M0(0xFF)));
  for (int e = 1; e < 255; ++e) {
    EXPECT_EQ(DecodeE8M0(uint8_t(e)), std::ldexp(1.0f, e - 127)) << e;
    EXPECT_EQ(EncodeE8M0(DecodeE8M0(uint8_t(e))), e) << e;
  }
  EXPECT_EQ(EncodeE8M0(1.0f), 127);
  EXPECT_EQ(EncodeE8M0(1.999f), 127);  // toward zero
  EXPECT_EQ(EncodeE8M0(-3.0f), 128);   // sign ignored
  EXPECT_EQ(EncodeE8M0(0.0f), 0);
  EXPECT_EQ(EncodeE8M0(Bits(5)), 0);  // float subnormal
  EXPECT_EQ(EncodeE8M0(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(EncodeE8M0(std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(EncodeE8M0(std::numeric_limits<float>::quiet_NaN()), 0xFF);
}

TEST(Fp4Test, BulkMatchesScalar) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int64_t n : {0, 1, 7, 33, 1001}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    if (n > 2) {
      x[0] = std::numeric_limits<float>::quiet_NaN();
      x[1] = -std::numeric_limits<float>::infinity();
    }
    std::vector<uint8_t> q(n + 1, 0xAB);
    std::vector<float> back(n + 1, -7.0f);
    EncodeE2M1(x.data(), n, q.data());
    DecodeE2M1(q.data(), n, back.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(q[i], EncodeE2M1(x[i])) << i;
      ASSERT_EQ(FBits(back[i]), FBits(DecodeE2M1(q[i]))) << i;
    }
    EXPECT_EQ(q[n], 0xAB);
    EXPECT_EQ(back[n], -7.0f);
  }
}

// The contract on a sample (the exhaustive test, label exhaustive, checks
// all 2^32 inputs): every 4093rd bit pattern (about 2^20, all binades and
// signs) plus the values around every rounding boundary and the specials.
TEST(Fp4Test, MatchesCudaOnSample) {
#if !defined(GIFT_HAVE_CUDA_FP4_H)
  GTEST_SKIP() << "cuda_fp4.h not available";
#else
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) {
    xs.push_back(Bits(uint32_t(u)));
  }
  for (float b : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f,
                  2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}) {
    for (float s : {1.0f, -1.0f}) {
      xs.push_back(s * b);
      xs.push_back(s * NextUp(b));
      xs.push_back(s * NextDown(b));
    }
  }
  for (uint32_t u :
       {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
        0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu}) {
    xs.push_back(Bits(u));
  }
  int64_t bad = 0;
  for (float x : xs) {
    const uint8_t want = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    const uint8_t got = EncodeE2M1(x);
    if (got != want && ++bad < 10) {
      ADD_FAILURE() << "x=0x" << std::hex << FBits(x) << " cuda " << int(want)
                    << " ours " << int(got);
    }
    const uint8_t e8 = __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero);
    if (EncodeE8M0(x) != e8 && ++bad < 10) {
      ADD_FAILURE() << "e8m0 x=0x" << std::hex << FBits(x) << " cuda "
                    << int(e8) << " ours " << int(EncodeE8M0(x));
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(xs.size(), size_t{1} << 20);
  for (int c = 0; c < 16; ++c) {
    const __half_raw h = __nv_cvt_fp4_to_halfraw(uint8_t(c), __NV_E2M1);
    const float want = __half2float(__half(h));
    EXPECT_EQ(FBits(DecodeE2M1(uint8_t(c))), FBits(want)) << c;
  }
  for (int c = 0; c < 256; ++c) {
    const __nv_bfloat16_raw b = __nv_cvt_e8m0_to_bf16raw(uint8_t(c));
    const float want = Bits(uint32_t(b.x) << 16);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(DecodeE8M0(uint8_t(c)))) << c;
    } else {
      EXPECT_EQ(FBits(DecodeE8M0(uint8_t(c))), FBits(want)) << c;
    }
  }
#endif
}

}  // namespace
}  // namespace gift::kernels
