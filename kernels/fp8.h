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

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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
