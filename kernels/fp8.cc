// FP8 codec, CPU reference. The scalar and bulk paths share the inline
// branch-free coders of fp8.h; the bulk loops are written so that GCC
// vectorises them, and are cloned for AVX2 with run-time dispatch.
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

}  // namespace

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
  if (f == Fp8Format::kE4M3) {
    EncodeE4M3(x, n, out);
  } else {
    EncodeE5M2(x, n, out);
  }
}

void DecodeFp8(const uint8_t* codes, int64_t n, Fp8Format f, float* out) {
  if (f == Fp8Format::kE4M3) {
    DecodeE4M3(codes, n, out);
  } else {
    DecodeE5M2(codes, n, out);
  }
}

}  // namespace gift::kernels
