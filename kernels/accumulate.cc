// Dequantize-and-accumulate, CPU reference. Works in tiles that stay in L1
// while every source is added, so acc is read and written once per call.
// Each product and each sum is rounded to float (-ffp-contract=off), in
// source order, exactly as the CUDA kernel does with __fmul_rn/__fadd_rn.
#include "kernels/accumulate.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gift::kernels {
namespace {

constexpr int64_t kTile = 2048;
// Tiles at least this long use a 256-entry table of scaled values.
constexpr int64_t kTableMin = 1024;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GIFT_ACC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GIFT_ACC_CLONES
#endif

template <Fp8Format F>
[[gnu::always_inline]] inline void AddTile(const uint8_t* __restrict codes,
                                           int64_t m, float s,
                                           float* __restrict acc) {
  for (int64_t j = 0; j < m; ++j) {
    acc[j] = acc[j] + internal::DecodeFp8Inline<F>(codes[j]) * s;
  }
}

GIFT_ACC_CLONES void AddTileE4M3(const uint8_t* __restrict codes, int64_t m,
                                 float s, float* __restrict acc) {
  AddTile<Fp8Format::kE4M3>(codes, m, s, acc);
}
GIFT_ACC_CLONES void AddTileE5M2(const uint8_t* __restrict codes, int64_t m,
                                 float s, float* __restrict acc) {
  AddTile<Fp8Format::kE5M2>(codes, m, s, acc);
}

// Long blocks: every source's scaled values in a 256-entry table, the sum
// kept in a register over the sources (acc read and written once).
void AddWithTables(const Fp8Source* sources, int num_sources, int64_t lo,
                   int64_t end, const float* tables, bool zero_first,
                   float* acc) {
  for (int64_t i = lo; i < end; ++i) {
    float a = zero_first ? 0.0f : acc[i];
    for (int k = 0; k < num_sources; ++k) {
      a = a + tables[256 * k + sources[k].codes[i]];
    }
    acc[i] = a;
  }
}

absl::Status CheckArgs(const Fp8Source* sources, int num_sources, int64_t n,
                       const QuantizeSpec& spec, const float* acc) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n, " < 0"));
  if (num_sources < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_sources = ", num_sources, " < 0"));
  }
  if (spec.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size = ", spec.block_size, " < 0"));
  }
  if (num_sources > 0 && sources == nullptr) {
    return absl::InvalidArgumentError("null sources");
  }
  if (n == 0) return absl::OkStatus();
  if (acc == nullptr) return absl::InvalidArgumentError("null acc");
  for (int k = 0; k < num_sources; ++k) {
    if (sources[k].codes == nullptr || sources[k].scales == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("null source ", k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DequantizeAccumulate(const Fp8Source* sources, int num_sources,
                                  int64_t n, const QuantizeSpec& spec,
                                  bool zero_first, float* acc) {
  if (auto s = CheckArgs(sources, num_sources, n, spec, acc); !s.ok()) {
    return s;
  }
  const auto add = spec.format == Fp8Format::kE4M3 ? AddTileE4M3 : AddTileE5M2;
  const int64_t block = spec.block_size > 0 ? spec.block_size : n;
  std::vector<float> tables;  // per source: its block's scaled values
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
    const int64_t end = std::min(n, lo + block);
    if (end - lo >= kTableMin) {
      tables.resize(size_t(num_sources) * 256);
      for (int k = 0; k < num_sources; ++k) {
        internal::ScaledDecodeTable(spec.format, sources[k].scales[b],
                                    tables.data() + 256 * k);
      }
      AddWithTables(sources, num_sources, lo, end, tables.data(), zero_first,
                    acc);
      continue;
    }
    for (int64_t t = lo; t < end; t += kTile) {
      const int64_t m = std::min(kTile, end - t);
      if (zero_first) std::fill(acc + t, acc + t + m, 0.0f);
      for (int k = 0; k < num_sources; ++k) {
        add(sources[k].codes + t, m, sources[k].scales[b], acc + t);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
