// Every one of the 2^32 float bit patterns through the CPU FP8 encoder, both
// formats, against CUDA's own host conversion __nv_cvt_float_to_fp8 with
// __NV_SATFINITE (cuda_fp8.h compiles with the host compiler), through the
// bulk encoder as well as the scalar one; and decode(encode(x)) is the
// nearest FP8 value (within half an FP8 ulp, or max, or NaN).
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/fp8.h"
#include "tests/exhaustive/exhaustive_testutil.h"

namespace gift::kernels {
namespace {

using exhaustive::Failures;
using exhaustive::FromBits;
using exhaustive::kChunk;

// Checks bit patterns [begin, end) in chunks, bulk and scalar.
void CheckRange(uint64_t begin, uint64_t end, Fp8Format f, Failures* fail) {
  const __nv_fp8_interpretation_t kind =
      f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  std::vector<float> x(kChunk);
  std::vector<uint8_t> bulk(kChunk);
  for (uint64_t base = begin; base < end; base += kChunk) {
    const int64_t m = static_cast<int64_t>(std::min(kChunk, end - base));
    for (int64_t j = 0; j < m; ++j) x[j] = FromBits(uint32_t(base + j));
    EncodeFp8(x.data(), m, f, bulk.data());
    for (int64_t j = 0; j < m; ++j) {
      const uint8_t want = __nv_cvt_float_to_fp8(x[j], __NV_SATFINITE, kind);
      const uint8_t one = EncodeFp8(x[j], f);
      if (bulk[j] != want || one != want) {
        fail->Add(absl::StrFormat(
            "%s x=0x%08x (%g): cuda 0x%02x scalar 0x%02x bulk 0x%02x",
            Fp8FormatName(f), uint32_t(base + j), x[j], want, one, bulk[j]));
      }
      const float back = DecodeFp8(one, f);
      const float ax = std::fabs(x[j]);
      if (std::isnan(x[j])) {
        if (!std::isnan(back)) fail->Add("NaN did not decode to NaN");
        continue;
      }
      if (ax >= Fp8Max(f)) {
        if (std::fabs(back) != Fp8Max(f)) fail->Add("saturation lost");
        continue;
      }
      // Half an FP8 ulp at x's binade, floored at half the subnormal step.
      const int mant = f == Fp8Format::kE4M3 ? 3 : 2;
      const int emin = f == Fp8Format::kE4M3 ? -6 : -14;
      const int e = ax > 0 ? std::max(std::ilogb(ax), emin) : emin;
      const double half_ulp = std::ldexp(1.0, e - mant - 1);
      if (std::fabs(double(back) - double(x[j])) > half_ulp ||
          std::signbit(back) != std::signbit(x[j])) {
        fail->Add(absl::StrFormat("%s x=%a decodes to %a", Fp8FormatName(f),
                                  x[j], back));
      }
    }
  }
}

void RunExhaustive(Fp8Format f) {
  exhaustive::ForAllFloats([f](uint64_t b, uint64_t e, Failures* fail) {
    CheckRange(b, e, f, fail);
  });
}

TEST(Fp8ExhaustiveTest, E4M3MatchesCudaForAllFloats) {
  RunExhaustive(Fp8Format::kE4M3);
}

TEST(Fp8ExhaustiveTest, E5M2MatchesCudaForAllFloats) {
  RunExhaustive(Fp8Format::kE5M2);
}

TEST(Fp8ExhaustiveTest, DecodeMatchesCudaForAllCodes) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const __nv_fp8_interpretation_t kind =
        f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    for (int c = 0; c < 256; ++c) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(uint8_t(c), kind);
      const float want = __half2float(__half(h));
      const float got = DecodeFp8(uint8_t(c), f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << Fp8FormatName(f) << " code " << c;
      } else {
        EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
            << Fp8FormatName(f) << " code " << c << ": " << got << " vs "
            << want;
      }
    }
  }
}

}  // namespace
}  // namespace gift::kernels
