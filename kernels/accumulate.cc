// Dequantize-and-accumulate, CPU reference. Each product and each sum is
// rounded to float (-ffp-contract=off), in source order, exactly as the CUDA
// kernel does with __fmul_rn/__fadd_rn. AVX2 path: 16 elements at a time
// held in registers while every source is decoded (F16C) and added, so acc
// is read and written once. Portable path: tiles that stay in L1 while every
// source is added, or 256-entry tables of scaled values for long blocks.
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

#ifdef GIFT_FP8_AVX2
// Sources' values in source order, 16 elements at a time kept in registers
// (separate multiply and add: -ffp-contract=off and no FMA intrinsic here);
// mult[k] from internal::HalvesMultiplier, scales[k] for the scalar tail.
template <Fp8Format F>
GIFT_AVX2_TARGET void AddSourcesAvx2(const Fp8Source* sources, int num_sources,
                                     const float* mult, const float* scales,
                                     int64_t lo, int64_t end, bool zero_first,
                                     float* acc) {
  int64_t i = lo;
  for (; i + 16 <= end; i += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    if (!zero_first) {
      a0 = _mm256_loadu_ps(acc + i);
      a1 = _mm256_loadu_ps(acc + i + 8);
    }
    for (int k = 0; k < num_sources; ++k) {
      const __m256 m = _mm256_set1_ps(mult[k]);
      __m256 d0, d1;
      internal::DecodeHalves16<F>(sources[k].codes + i, &d0, &d1);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(d0, m));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(d1, m));
    }
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
  }
  for (; i < end; ++i) {
    float a = zero_first ? 0.0f : acc[i];
    for (int k = 0; k < num_sources; ++k) {
      a = a + internal::DecodeFp8Inline<F>(sources[k].codes[i]) * scales[k];
    }
    acc[i] = a;
  }
}

// The AVX2 path for one block; false (nothing written) when a scale has no
// exact multiplier.
bool AddBlockAvx2(const Fp8Source* sources, int num_sources, Fp8Format f,
                  int64_t b, int64_t lo, int64_t end, bool zero_first,
                  float* acc, std::vector<float>* buf) {
  buf->resize(2 * size_t(num_sources));
  float* mult = buf->data();
  float* scales = mult + num_sources;
  for (int k = 0; k < num_sources; ++k) {
    scales[k] = sources[k].scales[b];
    if (!internal::HalvesMultiplier(f, scales[k], &mult[k])) return false;
  }
  (f == Fp8Format::kE4M3
       ? AddSourcesAvx2<Fp8Format::kE4M3>
       : AddSourcesAvx2<Fp8Format::kE5M2>)(sources, num_sources, mult, scales,
                                           lo, end, zero_first, acc);
  return true;
}
#endif  // GIFT_FP8_AVX2

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
#ifdef GIFT_FP8_AVX2
  const bool avx2 = internal::CpuHasAvx2Kernels();
#endif
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
    const int64_t end = std::min(n, lo + block);
#ifdef GIFT_FP8_AVX2
    if (avx2 && AddBlockAvx2(sources, num_sources, spec.format, b, lo, end,
                             zero_first, acc, &tables)) {
      continue;
    }
#endif
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
