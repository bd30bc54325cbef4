// Every one of the 2^32 float bit patterns through the CPU 4-bit coders
// against CUDA's own host conversions (cuda_fp4.h / cuda_fp8.h compile with
// the host compiler): EncodeE2M1 (scalar and bulk) against
// __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest), EncodeE8M0 against
// __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero); decode(encode(x))
// is a nearest E2M1 value (or ±6 above the range); and every code back
// against __nv_cvt_fp4_to_halfraw / __nv_cvt_e8m0_to_bf16raw.
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/fp4.h"
#include "tests/exhaustive/exhaustive_testutil.h"

namespace gift::kernels {
namespace {

using exhaustive::Failures;
using exhaustive::FromBits;
using exhaustive::kChunk;

// Bit patterns [begin, end), in chunks.
void CheckRange(uint64_t begin, uint64_t end, Failures* fail) {
  std::vector<float> x(kChunk);
  std::vector<uint8_t> bulk(kChunk);
  for (uint64_t base = begin; base < end; base += kChunk) {
    const int64_t m = static_cast<int64_t>(std::min(kChunk, end - base));
    for (int64_t j = 0; j < m; ++j) x[j] = FromBits(uint32_t(base + j));
    EncodeE2M1(x.data(), m, bulk.data());
    for (int64_t j = 0; j < m; ++j) {
      const float v = x[j];
      const uint8_t want =
          __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest);
      const uint8_t one = EncodeE2M1(v);
      if (bulk[j] != want || one != want) {
        fail->Add(absl::StrFormat(
            "e2m1 x=0x%08x (%g): cuda 0x%x scalar 0x%x bulk 0x%x",
            uint32_t(base + j), v, want, one, bulk[j]));
      }
      const uint8_t e8 =
          __nv_cvt_float_to_e8m0(v, __NV_SATFINITE, cudaRoundZero);
      if (EncodeE8M0(v) != e8) {
        fail->Add(absl::StrFormat("e8m0 x=0x%08x (%g): cuda 0x%02x ours 0x%02x",
                                  uint32_t(base + j), v, e8, EncodeE8M0(v)));
      }
      if (std::isnan(v)) continue;
      // Nearest: no code is strictly closer (within the range), else +-6.
      const double back = DecodeE2M1(one);
      const double ax = std::fabs(double(v));
      if (ax >= 6) {
        if (std::fabs(back) != 6.0) fail->Add("saturation lost");
        continue;
      }
      const double err = std::fabs(back - v);
      // The grid's spacing at |x|: 0.5 below 2, 1 below 4, 2 above.
      const double half = ax < 2 ? 0.25 : ax < 4 ? 0.5 : 1.0;
      if (err > half || (back != 0 && std::signbit(back) != std::signbit(v))) {
        fail->Add(absl::StrFormat("e2m1 x=%a decodes to %a", v, back));
      }
    }
  }
}

TEST(Fp4ExhaustiveTest, E2M1AndE8M0MatchCudaForAllFloats) {
  exhaustive::ForAllFloats(CheckRange);
}

TEST(Fp4ExhaustiveTest, DecodeMatchesCudaForAllCodes) {
  for (int c = 0; c < 256; ++c) {  // only the low nibble counts
    const __half_raw h = __nv_cvt_fp4_to_halfraw(uint8_t(c & 15), __NV_E2M1);
    const float want = __half2float(__half(h));
    const float got = DecodeE2M1(uint8_t(c));
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
        << "e2m1 code " << c << ": " << got << " vs " << want;
  }
  for (int c = 0; c < 256; ++c) {
    const __nv_bfloat16_raw b = __nv_cvt_e8m0_to_bf16raw(uint8_t(c));
    const float want = FromBits(uint32_t(b.x) << 16);
    const float got = DecodeE8M0(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "e8m0 code " << c;
    } else {
      EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
          << "e8m0 code " << c << ": " << got << " vs " << want;
    }
  }
}

}  // namespace
}  // namespace gift::kernels
