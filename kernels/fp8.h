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
