// FP8 codec: E4M3 (max 448, no infinities) and E5M2 (max 57344).
//
// Encoding is round-to-nearest-even with saturation to +-max for every
// out-of-range value (infinities included) and NaN kept NaN: bit-identical to
// CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind) for all 2^32 float
// inputs (tests/exhaustive). Decoding is exact.
//
//   uint8_t q = gift::kernels::EncodeFp8(x / scale, Fp8Format::kE4M3);
//   float xhat = gift::kernels::DecodeFp8(q, Fp8Format::kE4M3) * scale;
//
// Thread safety: all functions are pure.
#ifndef GIFT_KERNELS_FP8_H_
#define GIFT_KERNELS_FP8_H_

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__)
#include <immintrin.h>
// The AVX2 kernels (also FMA and F16C) are compiled into every x86-64 build
// and chosen at run time by internal::CpuHasAvx2Kernels().
#define GIFT_FP8_AVX2 1
#define GIFT_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define GIFT_AVX2_INLINE \
  __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#endif

namespace gift::gpu {
class Context;
}

namespace gift::kernels {

enum class Fp8Format : uint8_t { kE4M3 = 0, kE5M2 = 1 };

// Largest finite magnitude: 448 (E4M3) or 57344 (E5M2).
constexpr float Fp8Max(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}
// Magnitude bits (sign cleared) of the code of +-Fp8Max: 0x7E or 0x7B.
constexpr uint8_t Fp8MaxCode(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 0x7E : 0x7B;
}

// "e4m3" / "e5m2".
const char* Fp8FormatName(Fp8Format f);
// Accepts "e4m3" / "e5m2" (case-insensitive); INVALID_ARGUMENT otherwise.
absl::StatusOr<Fp8Format> ParseFp8Format(std::string_view name);

namespace internal {

inline uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Branch-free encoder, the body of EncodeFp8 (inline so that the quantize
// loops vectorise it). Normal range: round the float mantissa to nearest even
// in integer arithmetic and rebias the exponent. Subnormal range: adding a
// power of two whose ulp is the FP8 subnormal step makes the FPU round to
// nearest even for us (the sum is never subnormal, so FTZ/DAZ cannot matter
// except for float subnormal inputs, which encode to 0 either way).
template <Fp8Format F>
inline uint8_t EncodeFp8Inline(float x) {
  constexpr bool k43 = F == Fp8Format::kE4M3;
  constexpr int kShift = k43 ? 20 : 21;  // 23 - mantissa bits
  constexpr int32_t kMinNormal = k43 ? 0x3C800000 : 0x38800000;  // 2^-6, 2^-14
  // Largest |x| that still rounds to max: 464 (E4M3, tie to even 448) and
  // below 61440 (E5M2; 61440 would round to 65536).
  constexpr int32_t kSatAbove = k43 ? 0x43E80000 : 0x476FFFFF;
  constexpr int32_t kRebias = k43 ? (120 << 3) : (112 << 2);
  constexpr float kMagic = k43 ? 16384.0f : 128.0f;  // ulp = 2^-9, 2^-16
  constexpr int32_t kMagicBits = k43 ? 0x46800000 : 0x43000000;
  const uint32_t u = FloatBits(x);
  const int32_t a = static_cast<int32_t>(u & 0x7FFFFFFFu);
  const int32_t sign = static_cast<int32_t>((u >> 24) & 0x80u);
  const int32_t normal =
      ((a + ((1 << (kShift - 1)) - 1) + ((a >> kShift) & 1)) >> kShift) -
      kRebias;
  const int32_t sub = static_cast<int32_t>(FloatBits(
                          BitsFloat(static_cast<uint32_t>(a)) + kMagic)) -
                      kMagicBits;
  int32_t code = a < kMinNormal ? sub : normal;
  code = a > kSatAbove ? Fp8MaxCode(F) : code;
  code |= sign;
  code = a > 0x7F800000 ? 0x7F : code;  // NaN: canonical, positive
  return static_cast<uint8_t>(code);
}

// Exact, branch-free decoder (no float multiply on subnormal operands, so it
// is exact under FTZ/DAZ too). NaN codes give a quiet NaN, E5M2 0x7C +-Inf.
template <Fp8Format F>
inline float DecodeFp8Inline(uint8_t q) {
  constexpr bool k43 = F == Fp8Format::kE4M3;
  constexpr int kShift = k43 ? 20 : 21;
  constexpr int kMantBits = k43 ? 3 : 2;
  constexpr uint32_t kRebias = k43 ? 120u : 112u;
  constexpr float kSubStep = k43 ? 1.0f / 512 : 1.0f / 65536;
  const uint32_t mag = q & 0x7Fu;
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t normal = (mag << kShift) + (kRebias << 23);
  const uint32_t sub =
      FloatBits(static_cast<float>(static_cast<int32_t>(mag)) * kSubStep);
  uint32_t bits = (mag >> kMantBits) == 0 ? sub : normal;
  if constexpr (k43) {
    bits = mag == 0x7F ? 0x7FC00000u : bits;
  } else {
    const uint32_t special =
        0x7F800000u | ((mag & 3u) << 21) | (mag > 0x7C ? 0x400000u : 0u);
    bits = mag >= 0x7C ? special : bits;
  }
  return BitsFloat(bits | sign);
}

#ifdef GIFT_FP8_AVX2
// True when this CPU has AVX2, FMA and F16C.
bool CpuHasAvx2Kernels();

// EncodeFp8Inline on eight floats: returns the magnitude codes (sign bit
// clear, one per 32-bit lane) and sets *dec to the decoded magnitudes with
// v's sign (exact). One rounding serves both ranges: with C = 2^(e + 23 - m)
// (e = the exponent of |v|, at least the FP8 minimum normal exponent, m = the
// mantissa bits), |v| + C rounds |v| to the FP8 grid to nearest even, and
// the sum's bits minus C's count the FP8 steps above 2^e. Saturation: |v| is
// clamped to max first (rounding is monotonic). kNaN = false: the caller
// guarantees no NaN (Inf saturates either way).
template <Fp8Format F, bool kNaN>
GIFT_AVX2_INLINE __m256i EncodeMag8(__m256 v, __m256* dec) {
  constexpr bool k43 = F == Fp8Format::kE4M3;
  constexpr int kShift = k43 ? 20 : 21;
  constexpr int32_t kMinNormal = k43 ? 0x3C800000 : 0x38800000;
  constexpr int32_t kMaxBits = k43 ? 0x43E00000 : 0x47600000;  // 448, 57344
  // code = sum - C + (E_C - E_C(minimum normal)) << m.
  constexpr int32_t kCodeBias = k43 ? 1128 : 536;
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(INT32_MIN));
  __m256i a = _mm256_xor_si256(u, sign);
  a = _mm256_min_epi32(a, _mm256_set1_epi32(kMaxBits));
  const __m256i c = _mm256_add_epi32(
      _mm256_max_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0x7F800000)),
                       _mm256_set1_epi32(kMinNormal)),
      _mm256_set1_epi32(kShift << 23));
  const __m256 cf = _mm256_castsi256_ps(c);
  const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(a), cf);
  *dec = _mm256_or_ps(_mm256_sub_ps(sum, cf), _mm256_castsi256_ps(sign));
  __m256i code = _mm256_sub_epi32(_mm256_castps_si256(sum), c);
  code = _mm256_add_epi32(code, _mm256_srli_epi32(c, kShift));
  code = _mm256_sub_epi32(code, _mm256_set1_epi32(kCodeBias));
  if constexpr (kNaN) {
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_xor_si256(u, sign),
                                           _mm256_set1_epi32(0x7F800000));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), nan);
  }
  return code;
}

// Bytes of the full codes (magnitude | sign) of 4 x 8 lanes, in order.
GIFT_AVX2_INLINE __m256i PackCodes32(const __m256i mag[4],
                                     const __m256i bits[4]) {
  const __m256i m = _mm256_packus_epi16(_mm256_packs_epi32(mag[0], mag[1]),
                                        _mm256_packs_epi32(mag[2], mag[3]));
  // Signed saturation keeps each lane's sign in bit 7 of its byte.
  const __m256i s = _mm256_packs_epi16(_mm256_packs_epi32(bits[0], bits[1]),
                                       _mm256_packs_epi32(bits[2], bits[3]));
  const __m256i q =
      _mm256_or_si256(m, _mm256_and_si256(s, _mm256_set1_epi8(char(0x80))));
  return _mm256_permutevar8x32_epi32(q,
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Decodes 16 codes to floats: the values themselves (E5M2) or the values
// times 2^-8 (E4M3), via F16C. E5M2 codes are the top byte of a binary16;
// E4M3 codes shifted into a binary16 are 2^-8 times their value (subnormals
// included: the conversion of binary16 subnormals is exact and does not
// depend on MXCSR.DAZ), except the NaN code, patched to the binary16 NaN.
template <Fp8Format F>
GIFT_AVX2_INLINE void DecodeHalves16(const uint8_t* p, __m256* lo, __m256* hi) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i h;
  if constexpr (F == Fp8Format::kE4M3) {
    h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(c), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16(short(0xBFFF)));
    const __m256i nan =
        _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                           _mm256_set1_epi16(0x3F80));
    h = _mm256_xor_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x4180)));
  } else {
    h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(c), 8);
  }
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// The multiplier m with DecodeHalves16(c) * m == DecodeFp8(c) * s bit for
// bit: s (E5M2) or 256 * s (E4M3, exact). False when 256 * s overflows.
// Also false when 256 * s is below the normal range but s is not zero (FTZ
// would flush it).
inline bool HalvesMultiplier(Fp8Format f, float s, float* m) {
  *m = f == Fp8Format::kE4M3 ? s * 256.0f : s;
  if (std::isnan(s) || std::isinf(s) || s == 0) return true;
  return std::isfinite(*m) && std::fabs(*m) >= FLT_MIN;
}

// (v[0] + v[1]) + (v[2] + v[3]): the four-lane double sums of the AVX2
// quantize kernels.
GIFT_AVX2_INLINE double HorizontalSum(__m256d v) {
  alignas(32) double d[4];
  _mm256_store_pd(d, v);
  return (d[0] + d[1]) + (d[2] + d[3]);
}
#endif  // GIFT_FP8_AVX2

// table[c] = DecodeFp8(c, f) * s for all 256 codes (the same float
// products, so a lookup equals the direct computation bit for bit): long
// dequantize loops become one load per element.
void ScaledDecodeTable(Fp8Format f, float s, float* table);

}  // namespace internal

uint8_t EncodeFp8(float x, Fp8Format f);
float DecodeFp8(uint8_t code, Fp8Format f);

// Bulk versions over n elements (CPU).
void EncodeFp8(const float* x, int64_t n, Fp8Format f, uint8_t* out);
void DecodeFp8(const uint8_t* codes, int64_t n, Fp8Format f, float* out);

namespace cuda {
// Same semantics on device pointers, queued on ctx's stream.
absl::Status EncodeFp8(gpu::Context& ctx, const float* x, int64_t n,
                       Fp8Format f, uint8_t* out);
absl::Status DecodeFp8(gpu::Context& ctx, const uint8_t* codes, int64_t n,
                       Fp8Format f, float* out);
}  // namespace cuda

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_FP8_H_
