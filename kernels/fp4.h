// 4-bit codec: E2M1 elements and the E8M0 (power-of-two) scale of the OCP MX
// formats, plus the names and block sizes of the two block-scaled 4-bit
// formats (nvfp4, mxfp4) that kernels/quantize_fp4.h implements.
//
// E2M1 (1 sign, 2 exponent bits with bias 1, 1 mantissa bit; no Inf, no NaN)
// holds ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; code = s | e1 e0 | m (bit 3 = sign),
// so codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 their negatives.
// EncodeE2M1 rounds to nearest even and saturates to ±6 (infinities
// included); NaN encodes to +6 (code 0x7): bit-identical to CUDA's
// __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest) (cuda_fp4.hpp: "NaN
// input values result in positive MAXNORM") for all 2^32 float inputs
// (tests/exhaustive/fp4_exhaustive_test.cc). ±0 and every |x| <= 0.25 encode
// to ±0 (sign kept). DecodeE2M1 is exact.
//
// E8M0 (OCP MX v1.0 scale, 8 exponent bits, bias 127, no sign, no mantissa)
// decodes to 2^(e - 127); 0xFF is NaN; code 0 is 2^-127 (a float
// subnormal). EncodeE8M0 rounds toward zero (it takes |x|'s exponent, i.e.
// 2^floor(log2|x|)), saturates +-Inf to 0xFE and maps NaN to 0xFF, zero and
// float subnormals to 0: bit-identical to CUDA's __nv_cvt_float_to_e8m0(x,
// __NV_SATFINITE, cudaRoundZero) (cuda_fp8.h; CUDA offers only round-to-zero
// and round-up here). DecodeE8M0 equals __nv_cvt_e8m0_to_bf16raw widened to
// float.
//
//   const uint8_t q = gift::kernels::EncodeE2M1(x / scale);
//   const float xhat = gift::kernels::DecodeE2M1(q) * scale;
//
// Thread safety: all functions are pure.
#ifndef GIFT_KERNELS_FP4_H_
#define GIFT_KERNELS_FP4_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

#if defined(__CUDACC__)
#define GIFT_FP4_HD __host__ __device__ __forceinline__
#define GIFT_FP4_HOST_DEVICE __host__ __device__
#else
#define GIFT_FP4_HD inline
#define GIFT_FP4_HOST_DEVICE
#endif

namespace gift::kernels {

// The block-scaled 4-bit formats (DESIGN §2):
//  * kNvfp4: 16 consecutive elements share an E4M3 block scale; one FP32
//    scale per tensor segment puts the block scales in E4M3's range.
//  * kMxfp4: 32 consecutive elements share an E8M0 scale (OCP MX v1.0).
enum class Fp4Format : uint8_t { kNvfp4 = 0, kMxfp4 = 1 };

// Elements per block scale: 16 (nvfp4) or 32 (mxfp4).
GIFT_FP4_HOST_DEVICE constexpr int64_t Fp4BlockSize(Fp4Format f) {
  return f == Fp4Format::kNvfp4 ? 16 : 32;
}

// Largest E2M1 magnitude and the magnitude bits of its code.
constexpr float kE2M1Max = 6.0f;
constexpr uint8_t kE2M1MaxCode = 0x7;
// E8M0's NaN code.
constexpr uint8_t kE8M0NaN = 0xFF;
// The largest mxfp4 block-scale code a finite block gets (amax <= FLT_MAX:
// 2^127 · 2^-2): 6 · 2^125 is finite, 6 · 2^126 is not.
constexpr uint8_t kMaxFiniteMxfp4ScaleCode = 252;

// "nvfp4" / "mxfp4".
const char* Fp4FormatName(Fp4Format f);
// Accepts "nvfp4" / "mxfp4" (case-insensitive); INVALID_ARGUMENT otherwise.
absl::StatusOr<Fp4Format> ParseFp4Format(std::string_view name);

namespace internal {

GIFT_FP4_HD uint32_t Fp4FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}
GIFT_FP4_HD float Fp4BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

}  // namespace internal

// Round-to-nearest-even with saturation, as described above. Normal range
// (|x| >= 1): round the float mantissa to one bit in integer arithmetic and
// rebias the exponent. Below 1: |x| + 2^22 (whose ulp is 0.5, E2M1's
// subnormal step) makes the FPU round to nearest even; the sum is never
// subnormal, so FTZ/DAZ change nothing (float subnormals encode to ±0
// either way). Runs on the host and, compiled by nvcc, on the device.
GIFT_FP4_HD uint8_t EncodeE2M1(float x) {
  const uint32_t u = internal::Fp4FloatBits(x);
  const int32_t a = static_cast<int32_t>(u & 0x7FFFFFFFu);
  // 1.0f's bits >> 22 are 254, its code 2.
  const int32_t normal = ((a + ((1 << 21) - 1) + ((a >> 22) & 1)) >> 22) - 252;
  const int32_t sub =
      static_cast<int32_t>(internal::Fp4FloatBits(
          internal::Fp4BitsFloat(static_cast<uint32_t>(a)) + 4194304.0f)) -
      0x4A800000;  // 2^22's bits
  int32_t code = a < 0x3F800000 ? sub : normal;
  code = a > 0x40C00000 ? kE2M1MaxCode : code;  // above 6 (and Inf)
  code |= static_cast<int32_t>((u >> 28) & 0x8u);
  code = a > 0x7F800000 ? kE2M1MaxCode : code;  // NaN: +6
  return static_cast<uint8_t>(code);
}

// Exact; only the low four bits of `code` are read.
GIFT_FP4_HD float DecodeE2M1(uint8_t code) {
  const uint32_t e = (code >> 1) & 3u, m = code & 1u;
  const uint32_t mag = e != 0 ? ((e + 126u) << 23) | (m << 22)
                              : (m != 0 ? 0x3F000000u : 0u);  // 0.5 or 0
  return internal::Fp4BitsFloat(mag | (static_cast<uint32_t>(code & 8u) << 28));
}

// Round toward zero to a power of two, as described above.
GIFT_FP4_HD uint8_t EncodeE8M0(float x) {
  const uint32_t a = internal::Fp4FloatBits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE8M0NaN;
  const uint32_t e = a >> 23;
  return static_cast<uint8_t>(e == 0xFF ? 0xFE : e);
}

// 2^(code - 127); code 0 is 2^-127 (subnormal), 0xFF a quiet NaN.
GIFT_FP4_HD float DecodeE8M0(uint8_t code) {
  if (code == kE8M0NaN) return internal::Fp4BitsFloat(0x7FC00000u);
  if (code == 0) return internal::Fp4BitsFloat(0x00400000u);
  return internal::Fp4BitsFloat(static_cast<uint32_t>(code) << 23);
}

// Bulk versions over n elements (CPU), one code per byte (unpacked).
void EncodeE2M1(const float* x, int64_t n, uint8_t* out);
void DecodeE2M1(const uint8_t* codes, int64_t n, float* out);

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_FP4_H_
