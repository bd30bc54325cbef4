// FP8 codec, CPU reference. The scalar path is the inline branch-free coder
// of fp8.h. The bulk loops run the AVX2 coders of fp8.h (EncodeMag8,
// DecodeHalves16) when the CPU has AVX2, FMA and F16C, and otherwise loops
// over the scalar coder that GCC vectorises (cloned for AVX2 as well). Both
// are covered by the exhaustive test.
#include "kernels/fp8.h"

#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"

namespace gift::kernels {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GIFT_FP8_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GIFT_FP8_CLONES
#endif

template <Fp8Format F>
[[gnu::always_inline]] inline void EncodeLoop(const float* __restrict x,
                                              int64_t n,
                                              uint8_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = internal::EncodeFp8Inline<F>(x[i]);
}

template <Fp8Format F>
[[gnu::always_inline]] inline void DecodeLoop(const uint8_t* __restrict codes,
                                              int64_t n,
                                              float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = internal::DecodeFp8Inline<F>(codes[i]);
  }
}

GIFT_FP8_CLONES void EncodeE4M3(const float* __restrict x, int64_t n,
                                uint8_t* __restrict out) {
  EncodeLoop<Fp8Format::kE4M3>(x, n, out);
}
GIFT_FP8_CLONES void EncodeE5M2(const float* __restrict x, int64_t n,
                                uint8_t* __restrict out) {
  EncodeLoop<Fp8Format::kE5M2>(x, n, out);
}
GIFT_FP8_CLONES void DecodeE4M3(const uint8_t* __restrict codes, int64_t n,
                                float* __restrict out) {
  DecodeLoop<Fp8Format::kE4M3>(codes, n, out);
}
GIFT_FP8_CLONES void DecodeE5M2(const uint8_t* __restrict codes, int64_t n,
                                float* __restrict out) {
  DecodeLoop<Fp8Format::kE5M2>(codes, n, out);
}

#ifdef GIFT_FP8_AVX2
template <Fp8Format F>
GIFT_AVX2_TARGET void EncodeAvx2(const float* x, int64_t n, uint8_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i mag[4], bits[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      __m256 dec;
      mag[k] = internal::EncodeMag8<F, /*kNaN=*/true>(v, &dec);
      // NaN encodes to the positive 0x7F: drop its sign.
      const __m256i u = _mm256_castps_si256(v);
      const __m256i nan =
          _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(INT32_MAX)),
                             _mm256_set1_epi32(0x7F800000));
      bits[k] = _mm256_andnot_si256(nan, u);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        internal::PackCodes32(mag, bits));
  }
  for (; i < n; ++i) out[i] = internal::EncodeFp8Inline<F>(x[i]);
}

template <Fp8Format F>
GIFT_AVX2_TARGET void DecodeAvx2(const uint8_t* codes, int64_t n, float* out) {
  int64_t i = 0;
  const __m256 m = _mm256_set1_ps(F == Fp8Format::kE4M3 ? 256.0f : 1.0f);
  for (; i + 16 <= n; i += 16) {
    __m256 lo, hi;
    internal::DecodeHalves16<F>(codes + i, &lo, &hi);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(lo, m));
    _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(hi, m));
  }
  for (; i < n; ++i) out[i] = internal::DecodeFp8Inline<F>(codes[i]);
}
#endif

}  // namespace

#ifdef GIFT_FP8_AVX2
bool internal::CpuHasAvx2Kernels() {
  static const bool has = __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}
#endif

const char* Fp8FormatName(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

absl::StatusOr<Fp8Format> ParseFp8Format(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(c));
  if (lower == "e4m3") return Fp8Format::kE4M3;
  if (lower == "e5m2") return Fp8Format::kE5M2;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown FP8 format '", std::string(name), "' (want e4m3 or e5m2)"));
}

void internal::ScaledDecodeTable(Fp8Format f, float s, float* table) {
  for (int c = 0; c < 256; ++c) table[c] = DecodeFp8(uint8_t(c), f) * s;
}

uint8_t EncodeFp8(float x, Fp8Format f) {
  return f == Fp8Format::kE4M3 ? internal::EncodeFp8Inline<Fp8Format::kE4M3>(x)
                               : internal::EncodeFp8Inline<Fp8Format::kE5M2>(x);
}

float DecodeFp8(uint8_t code, Fp8Format f) {
  return f == Fp8Format::kE4M3
             ? internal::DecodeFp8Inline<Fp8Format::kE4M3>(code)
             : internal::DecodeFp8Inline<Fp8Format::kE5M2>(code);
}

void EncodeFp8(const float* x, int64_t n, Fp8Format f, uint8_t* out) {
#ifdef GIFT_FP8_AVX2
  if (internal::CpuHasAvx2Kernels()) {
    f == Fp8Format::kE4M3 ? EncodeAvx2<Fp8Format::kE4M3>(x, n, out)
                          : EncodeAvx2<Fp8Format::kE5M2>(x, n, out);
    return;
  }
#endif
  if (f == Fp8Format::kE4M3) {
    EncodeE4M3(x, n, out);
  } else {
    EncodeE5M2(x, n, out);
  }
}

void DecodeFp8(const uint8_t* codes, int64_t n, Fp8Format f, float* out) {
#ifdef GIFT_FP8_AVX2
  if (internal::CpuHasAvx2Kernels()) {
    f == Fp8Format::kE4M3 ? DecodeAvx2<Fp8Format::kE4M3>(codes, n, out)
                          : DecodeAvx2<Fp8Format::kE5M2>(codes, n, out);
    return;
  }
#endif
  if (f == Fp8Format::kE4M3) {
    DecodeE4M3(codes, n, out);
  } else {
    DecodeE5M2(codes, n, out);
  }
}

}  // namespace gift::kernels
