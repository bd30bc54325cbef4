// 4-bit codec, CPU: format names and the bulk loops over the inline coders
// of fp4.h (which GCC vectorises; cloned for AVX2 on x86-64).
#include "kernels/fp4.h"

#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"

namespace gift::kernels {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GIFT_FP4_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GIFT_FP4_CLONES
#endif

GIFT_FP4_CLONES void EncodeLoop(const float* __restrict x, int64_t n,
                                uint8_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = EncodeE2M1(x[i]);
}

GIFT_FP4_CLONES void DecodeLoop(const uint8_t* __restrict codes, int64_t n,
                                float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = DecodeE2M1(codes[i]);
}

}  // namespace

const char* Fp4FormatName(Fp4Format f) {
  return f == Fp4Format::kNvfp4 ? "nvfp4" : "mxfp4";
}

absl::StatusOr<Fp4Format> ParseFp4Format(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(c));
  if (lower == "nvfp4") return Fp4Format::kNvfp4;
  if (lower == "mxfp4") return Fp4Format::kMxfp4;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown FP4 format '", std::string(name), "' (want nvfp4 or mxfp4)"));
}

void EncodeE2M1(const float* x, int64_t n, uint8_t* out) {
  EncodeLoop(x, n, out);
}

void DecodeE2M1(const uint8_t* codes, int64_t n, float* out) {
  DecodeLoop(codes, n, out);
}

}  // namespace gift::kernels
