// Block-scaled 4-bit quantization, CPU reference. Per block: the finite amax
// (integer max over the magnitude bits, which orders non-negative floats
// like their values) and the non-finite count, the block's scale code, then
// the codes (packed two per byte), the residual and the telemetry (the
// boundary hits through a second coder, that of the block holding the
// segment's amax). The reference for the CUDA kernels.
//
// Portable path: short per-block loops without branches, whole blocks with
// a constant trip count (the codes of both coders in one loop; decoded
// values from a 16-entry table of the block's coder), double sums in
// element order per block.
//
// AVX2 path (run-time dispatch, internal::CpuHasAvx2Kernels), whole blocks:
// eight lanes of EncodeE2M1's integer steps, the table looked up by
// permutes, the codes packed by shifts and a byte shuffle; the same codes,
// scales, residuals and hit counts bit for bit, the double sums in
// four-lane FMA accumulators (as the FP8 kernel's; their order differs). A
// block with NaN/Inf and the ragged last block take the portable path. The
// finite amax (of the segment: nvfp4's tensor scale) in eight lanes too.
// Side by side with the portable path (bench/quantize_bench, 2 runs, 1M and
// 16M elements, GB/s): quantize in place with residual and telemetry nvfp4
// 0.97-1.47 -> 3.22-3.41, mxfp4 1.47-1.85 -> 4.40-4.98; dequantize-
// accumulate of 4 sources nvfp4 1.94-2.55 -> 7.87-9.20, mxfp4 3.07-3.34 ->
// 9.44-14.5. The AVX2 amax and the inline block-scale code on top, side by
// side again: quantize nvfp4 2.62-2.91 -> 3.86-4.37, mxfp4 3.80-4.16 ->
// 6.02-7.20.
#include "kernels/quantize_fp4.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/fp8.h"

namespace gift::kernels {
namespace {

using internal::BitsFloat;
using internal::FloatBits;
#ifdef GIFT_FP8_AVX2
using internal::HorizontalSum;
#endif

constexpr uint32_t kInfBits = 0x7F800000u;

struct BlockAmax {
  float amax;         // over finite elements
  int64_t nonfinite;  // NaN/Inf count
};

#ifdef GIFT_FP8_AVX2
GIFT_AVX2_INLINE uint32_t HorizontalMax(__m256i v) {
  __m128i m =
      _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  return uint32_t(_mm_cvtsi128_si32(m));
}

// The finite amax over eight lanes of x: *amax takes the magnitude bits of
// the finite lanes; returns the mask of the finite lanes.
GIFT_AVX2_INLINE __m256i FiniteAmaxStep(__m256 x, __m256i* amax) {
  const __m256i a =
      _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i fin =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(kInfBits)), a);
  *amax = _mm256_max_epi32(*amax, _mm256_and_si256(a, fin));
  return fin;
}

// FiniteAmax below, eight lanes at a time (GCC at -O2 leaves that loop
// scalar).
GIFT_AVX2_TARGET BlockAmax FiniteAmaxAvx2(const float* x, int64_t n) {
  __m256i amax = _mm256_setzero_si256();
  int64_t bad = 0;
  int64_t i = 0;
  // 32-bit lane counts per chunk: at most 2^27 each.
  for (int64_t lo = 0; lo + 8 <= n; lo += int64_t{1} << 30) {
    const int64_t hi = std::min(n, lo + (int64_t{1} << 30)) & ~int64_t{7};
    __m256i count = _mm256_setzero_si256();
    for (i = lo; i < hi; i += 8) {
      const __m256i fin = FiniteAmaxStep(_mm256_loadu_ps(x + i), &amax);
      count = _mm256_sub_epi32(count,
                               _mm256_andnot_si256(fin, _mm256_set1_epi32(-1)));
    }
    alignas(32) int32_t c[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), count);
    for (int k = 0; k < 8; ++k) bad += c[k];
  }
  uint32_t r = HorizontalMax(amax);
  for (; i < n; ++i) {
    const uint32_t a = FloatBits(x[i]) & 0x7FFFFFFFu;
    if (a < kInfBits) {
      r = std::max(r, a);
    } else {
      ++bad;
    }
  }
  return {BitsFloat(r), bad};
}
#endif

BlockAmax FiniteAmax(const float* x, int64_t n) {
#ifdef GIFT_FP8_AVX2
  if (internal::CpuHasAvx2Kernels()) return FiniteAmaxAvx2(x, n);
#endif
  // 32-bit counts per chunk: no 64-bit add in the inner loop.
  constexpr int64_t kChunk = int64_t{1} << 20;
  uint32_t amax = 0;
  int64_t bad = 0;
  for (int64_t lo = 0; lo < n; lo += kChunk) {
    const float* c = x + lo;
    const int64_t m = std::min(kChunk, n - lo);
    uint32_t chunk_amax = 0, chunk_bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      const uint32_t a = FloatBits(c[i]) & 0x7FFFFFFFu;
      const uint32_t finite = a < kInfBits ? 1u : 0u;
      chunk_amax = std::max(chunk_amax, finite != 0 ? a : 0u);
      chunk_bad += 1u - finite;
    }
    amax = std::max(amax, chunk_amax);
    bad += chunk_bad;
  }
  return {BitsFloat(amax), bad};
}

// How one block's elements map to codes and back: q = e2m1(pre(x)) and
// x̂ = post(e2m1val(q)), as the header defines them per format.
struct BlockCoder {
  Fp4Format f;
  float tensor;  // nvfp4: s_t
  float block;   // nvfp4: e4m3val(c_b); mxfp4: X
  float div;     // nvfp4: e4m3val(c_b), 1 for an all-zero block
  float recip;   // mxfp4: 2^(127 - e_b)

  static BlockCoder For(Fp4Format f, uint8_t code, float s_t) {
    BlockCoder c{f, s_t, 0, 1, 1};
    if (f == Fp4Format::kNvfp4) {
      c.block = internal::DecodeFp8Inline<Fp8Format::kE4M3>(code);
      c.div = code == 0 ? 1.0f : c.block;
    } else {
      c.block = DecodeE8M0(code);
      c.recip = BitsFloat(uint32_t(254 - code) << 23);
    }
    return c;
  }
  float Decode(uint8_t q) const {
    return f == Fp4Format::kNvfp4 ? (DecodeE2M1(q) * block) * tensor
                                  : DecodeE2M1(q) * block;
  }
};

// Nvfp4BlockScaleCode, inline for the per-block loops.
inline uint8_t Nvfp4ScaleCode(float block_amax, float tensor_scale) {
  if (block_amax == 0) return 0x00;
  const uint8_t c = internal::EncodeFp8Inline<Fp8Format::kE4M3>(
      (block_amax / tensor_scale) / 6.0f);
  return c == 0 ? uint8_t{0x01} : c;
}

uint8_t BlockScaleCode(Fp4Format f, float amax, float s_t) {
  return f == Fp4Format::kNvfp4 ? Nvfp4ScaleCode(amax, s_t)
                                : Mxfp4ScaleCode(amax);
}

// The largest block.
constexpr int64_t kMaxBlock = Fp4BlockSize(Fp4Format::kMxfp4);
static_assert(Fp4BlockSize(Fp4Format::kNvfp4) <= kMaxBlock);

// table[q] = c.Decode(q) for every 4-bit code q.
void DecodeTable(const BlockCoder& c, float table[16]) {
  for (int q = 0; q < 16; ++q) table[q] = c.Decode(static_cast<uint8_t>(q));
}

// Codes of x[0, m) under `c` into q, and the low three bits of the codes
// under `hits` into t: e2m1((x / s_t) / div) for nvfp4 (x / s_t once for
// both coders, which share s_t), e2m1(x · recip) for mxfp4. kM > 0: m is kM
// (a whole block: a constant trip count).
template <int64_t kM>
void EncodeCodes(const BlockCoder& c, const BlockCoder& hits, const float* x,
                 int64_t m_arg, uint8_t* q, uint8_t* t) {
  const int64_t m = kM > 0 ? kM : m_arg;
  if (c.f == Fp4Format::kNvfp4) {
    const float s_t = c.tensor, div = c.div, hdiv = hits.div;
    for (int64_t i = 0; i < m; ++i) {
      const float v = x[i] / s_t;
      q[i] = EncodeE2M1(v / div);
      t[i] = EncodeE2M1(v / hdiv) & 7;
    }
  } else {
    const float recip = c.recip, hrecip = hits.recip;
    for (int64_t i = 0; i < m; ++i) {
      q[i] = EncodeE2M1(x[i] * recip);
      t[i] = EncodeE2M1(x[i] * hrecip) & 7;
    }
  }
}

// Encodes elements [0, m) (m <= kMaxBlock; kM as in EncodeCodes) of one
// block into packed bytes at `codes`; the boundary hits are those of `hits`,
// the coder of the segment's amax block.
template <int64_t kM>
void EncodeBlock(const BlockCoder& c, const BlockCoder& hits, const float* x,
                 int64_t m_arg, uint8_t* codes, float* residual,
                 QuantizeStats* st) {
  const int64_t m = kM > 0 ? kM : m_arg;
  float xs[kMaxBlock], h[kMaxBlock], table[16];
  uint8_t q[kMaxBlock], t[kMaxBlock];
  std::copy(x, x + m, xs);  // residual may alias x
  EncodeCodes<kM>(c, hits, xs, m, q, t);
  DecodeTable(c, table);
  for (int64_t i = 0; i < m; ++i) h[i] = table[q[i]];
  for (int64_t i = 0; i + 1 < m; i += 2) {
    codes[i / 2] = uint8_t(q[i] | (q[i + 1] << 4));
  }
  if (m % 2 != 0) codes[m / 2] = q[m - 1];
  double e = 0, xx = 0, hx = 0;
  int64_t upper = 0, lower = 0;
  bool finite[kMaxBlock];
  for (int64_t i = 0; i < m; ++i) {
    finite[i] = (FloatBits(xs[i]) & 0x7FFFFFFFu) < kInfBits;
  }
  if (residual) {
    for (int64_t i = 0; i < m; ++i) {
      residual[i] = finite[i] ? xs[i] - h[i] : 0.0f;
    }
  }
  for (int64_t i = 0; i < m; ++i) {  // & (not &&): no branches
    const int f = finite[i];
    upper += f & int{t[i] == kE2M1MaxCode};
    lower += f & int{t[i] == 0} & int{xs[i] != 0.0f};
  }
  // In element order; a non-finite element adds +0 (sums unchanged).
  for (int64_t i = 0; i < m; ++i) {
    const double xd = finite[i] ? xs[i] : 0.0f, hd = finite[i] ? h[i] : 0.0f,
                 d = hd - xd;
    e += d * d;
    xx += xd * xd;
    hx += hd * xd;
  }
  st->upper += upper;
  st->lower += lower;
  st->err_sq += e;
  st->x_sq += xx;
  st->xhat_x += hx;
}

// acc[0, m) += the block's decoded codes (packed, from element 0); kM as in
// EncodeCodes.
template <int64_t kM>
void AccumulateBlock(const BlockCoder& c, const uint8_t* codes, int64_t m_arg,
                     float* acc) {
  const int64_t m = kM > 0 ? kM : m_arg;
  float table[16];
  DecodeTable(c, table);
  for (int64_t i = 0; i + 1 < m; i += 2) {
    const uint8_t b = codes[i / 2];
    acc[i] = acc[i] + table[b & 15];
    acc[i + 1] = acc[i + 1] + table[b >> 4];
  }
  if (m % 2 != 0) acc[m - 1] = acc[m - 1] + table[codes[m / 2] & 15];
}

float TensorScaleOf(Fp4Format f, const float* tensor_scale) {
  return f == Fp4Format::kNvfp4 ? *tensor_scale : 1.0f;
}

#ifdef GIFT_FP8_AVX2
// The AVX2 path of whole blocks (the file's comment).

// EncodeE2M1 on eight lanes: the same integer steps.
GIFT_AVX2_INLINE __m256i EncodeE2M1x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  __m256i normal = _mm256_add_epi32(
      a, _mm256_and_si256(_mm256_srli_epi32(a, 22), _mm256_set1_epi32(1)));
  normal = _mm256_add_epi32(normal, _mm256_set1_epi32((1 << 21) - 1));
  normal =
      _mm256_sub_epi32(_mm256_srli_epi32(normal, 22), _mm256_set1_epi32(252));
  const __m256i sub =
      _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(
                           _mm256_castsi256_ps(a), _mm256_set1_ps(4194304.0f))),
                       _mm256_set1_epi32(0x4A800000));
  __m256i code = _mm256_blendv_epi8(
      normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F800000), a));
  const __m256i max_code = _mm256_set1_epi32(kE2M1MaxCode);
  code = _mm256_blendv_epi8(
      code, max_code, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x40C00000)));
  code = _mm256_or_si256(
      code, _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(8)));
  return _mm256_blendv_epi8(
      code, max_code, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)));
}

// The coder's decoded values of codes 0..7 (lo) and 8..15 (hi): the same
// products as Decode.
struct Table8 {
  __m256 lo, hi;
};
GIFT_AVX2_INLINE Table8 DecodeTable8(const BlockCoder& c) {
  const __m256 e2m1 =
      _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256 block = _mm256_set1_ps(c.block);
  __m256 lo = _mm256_mul_ps(e2m1, block);
  __m256 hi = _mm256_mul_ps(_mm256_xor_ps(e2m1, _mm256_set1_ps(-0.0f)), block);
  if (c.f == Fp4Format::kNvfp4) {
    const __m256 tensor = _mm256_set1_ps(c.tensor);
    lo = _mm256_mul_ps(lo, tensor);
    hi = _mm256_mul_ps(hi, tensor);
  }
  return {lo, hi};
}

// table[q] for eight codes (one per 32-bit lane, low four bits).
GIFT_AVX2_INLINE __m256 Lookup8(const Table8& t, __m256i q) {
  // permutevar reads bits 0-2; bit 3 shifted into the sign picks the half.
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t.lo, q),
                          _mm256_permutevar8x32_ps(t.hi, q),
                          _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
}

// Eight codes (one per 32-bit lane) packed two per byte: 4 bytes.
GIFT_AVX2_INLINE uint32_t PackNibbles8(__m256i q) {
  // Byte 0 of each 64-bit lane: q[2k] | q[2k+1] << 4.
  const __m256i p = _mm256_or_si256(q, _mm256_srli_epi64(q, 28));
  const __m256i b = _mm256_shuffle_epi8(
      p, _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                          -1, -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                          -1, -1, -1, -1));
  return uint32_t(_mm256_extract_epi16(b, 0)) |
         (uint32_t(_mm256_extract_epi16(b, 8)) << 16);
}

// The eight codes of 4 packed bytes, one per 32-bit lane.
GIFT_AVX2_INLINE __m256i UnpackNibbles8(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(int(w)),
                        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      _mm256_set1_epi32(15));
}

// Quantizes whole blocks [0, num_blocks) of format F as QuantizeFp4's loop
// does; a block with NaN/Inf goes through EncodeBlock.
template <Fp4Format F>
GIFT_AVX2_TARGET void QuantizeBlocksAvx2(const float* x, int64_t num_blocks,
                                         float s_t, const BlockCoder& hits,
                                         uint8_t* codes, uint8_t* block_scales,
                                         float* residual, QuantizeStats* st) {
  constexpr bool kNv = F == Fp4Format::kNvfp4;
  constexpr int64_t kB = Fp4BlockSize(F), kV = kB / 8;
  __m256d e = _mm256_setzero_pd(), xx = e, hx = e;
  int64_t upper = 0, lower = 0;
  const __m256 st_v = _mm256_set1_ps(s_t);
  const __m256 hscale = _mm256_set1_ps(kNv ? hits.div : hits.recip);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* xb = x + b * kB;
    __m256 xv[kV];
    __m256i amax = _mm256_setzero_si256(), bad = amax;
    for (int k = 0; k < kV; ++k) {
      xv[k] = _mm256_loadu_ps(xb + 8 * k);
      const __m256i fin = FiniteAmaxStep(xv[k], &amax);
      bad = _mm256_or_si256(bad, _mm256_andnot_si256(fin, abs_mask));
    }
    const float am = BitsFloat(HorizontalMax(amax));
    const uint8_t code = BlockScaleCode(F, am, s_t);
    const BlockCoder c = BlockCoder::For(F, code, s_t);
    float* rb = residual ? residual + b * kB : nullptr;
    if (!_mm256_testz_si256(bad, bad)) {  // NaN/Inf: the scalar block
      // Counted before the residual (which may be x) overwrites them.
      st->nonfinite += FiniteAmax(xb, kB).nonfinite;
      EncodeBlock<kB>(c, hits, xb, kB, codes + b * kB / 2, rb, st);
      block_scales[b] = kNv ? kNvfp4NaNScale : kE8M0NaN;
      continue;
    }
    block_scales[b] = code;
    const Table8 table = DecodeTable8(c);
    const __m256 scale = _mm256_set1_ps(kNv ? c.div : c.recip);
    uint32_t packed[kV];
    for (int k = 0; k < kV; ++k) {
      __m256 v, vt;
      if constexpr (kNv) {
        const __m256 w = _mm256_div_ps(xv[k], st_v);
        v = _mm256_div_ps(w, scale);
        vt = _mm256_div_ps(w, hscale);
      } else {
        v = _mm256_mul_ps(xv[k], scale);
        vt = _mm256_mul_ps(xv[k], hscale);
      }
      const __m256i q = EncodeE2M1x8(v);
      const __m256i t =
          _mm256_and_si256(EncodeE2M1x8(vt), _mm256_set1_epi32(7));
      packed[k] = PackNibbles8(q);
      const __m256 h = Lookup8(table, q);
      if (rb) _mm256_storeu_ps(rb + 8 * k, _mm256_sub_ps(xv[k], h));
      const __m256i nonzero = _mm256_xor_si256(
          _mm256_cmpeq_epi32(
              _mm256_and_si256(_mm256_castps_si256(xv[k]), abs_mask),
              _mm256_setzero_si256()),
          _mm256_set1_epi32(-1));
      upper +=
          __builtin_popcount(uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(
              _mm256_cmpeq_epi32(t, _mm256_set1_epi32(kE2M1MaxCode))))));
      lower += __builtin_popcount(
          uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(
              _mm256_cmpeq_epi32(t, _mm256_setzero_si256()), nonzero)))));
      for (int half = 0; half < 2; ++half) {
        const __m256d xd =
            _mm256_cvtps_pd(half == 0 ? _mm256_castps256_ps128(xv[k])
                                      : _mm256_extractf128_ps(xv[k], 1));
        const __m256d hd =
            _mm256_cvtps_pd(half == 0 ? _mm256_castps256_ps128(h)
                                      : _mm256_extractf128_ps(h, 1));
        const __m256d d = _mm256_sub_pd(hd, xd);
        e = _mm256_fmadd_pd(d, d, e);
        xx = _mm256_fmadd_pd(xd, xd, xx);
        hx = _mm256_fmadd_pd(hd, xd, hx);
      }
    }
    std::memcpy(codes + b * kB / 2, packed, sizeof(packed));
  }
  st->upper += upper;
  st->lower += lower;
  st->err_sq += HorizontalSum(e);
  st->x_sq += HorizontalSum(xx);
  st->xhat_x += HorizontalSum(hx);
}

// The decoded codes of num_blocks whole blocks of format F written to out
// (kAcc false) or added to it (kAcc true): the same products and sums as
// the portable loops of DequantizeFp4 and AccumulateBlock.
template <Fp4Format F, bool kAcc>
GIFT_AVX2_TARGET void DecodeBlocksAvx2(const uint8_t* codes,
                                       const uint8_t* block_scales, float s_t,
                                       int64_t num_blocks, float* out) {
  constexpr int64_t kB = Fp4BlockSize(F);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const Table8 table = DecodeTable8(BlockCoder::For(F, block_scales[b], s_t));
    for (int64_t i = 0; i < kB; i += 8) {
      float* o = out + b * kB + i;
      const __m256 h = Lookup8(table, UnpackNibbles8(codes + (b * kB + i) / 2));
      _mm256_storeu_ps(o, kAcc ? _mm256_add_ps(_mm256_loadu_ps(o), h) : h);
    }
  }
}

template <bool kAcc>
void DecodeBlocks(Fp4Format f, const uint8_t* codes,
                  const uint8_t* block_scales, float s_t, int64_t num_blocks,
                  float* out) {
  (f == Fp4Format::kNvfp4
       ? &DecodeBlocksAvx2<Fp4Format::kNvfp4, kAcc>
       : &DecodeBlocksAvx2<Fp4Format::kMxfp4, kAcc>)(codes, block_scales, s_t,
                                                     num_blocks, out);
}
#endif  // GIFT_FP8_AVX2

}  // namespace

int64_t Fp4PackedBytes(int64_t n) { return n > 0 ? (n + 1) / 2 : 0; }

int64_t Fp4NumBlocks(int64_t n, Fp4Format f) {
  const int64_t b = Fp4BlockSize(f);
  return n > 0 ? (n + b - 1) / b : 0;
}

float Nvfp4TensorScale(float amax) {
  if (amax == 0) return 1.0f;
  const float s = amax / kNvfp4TensorDivisor;
  return s > 0 ? s : std::numeric_limits<float>::denorm_min();
}

uint8_t Nvfp4BlockScaleCode(float block_amax, float tensor_scale) {
  return Nvfp4ScaleCode(block_amax, tensor_scale);
}

uint8_t Mxfp4ScaleCode(float block_amax) {
  if (block_amax == 0) return 127;
  const uint8_t e = EncodeE8M0(block_amax);
  return e > 2 ? uint8_t(e - 2) : uint8_t{0};
}

absl::Status internal::CheckQuantizeFp4Args(const float* x, int64_t n,
                                            Fp4Format f, const uint8_t* codes,
                                            const uint8_t* block_scales,
                                            const float* tensor_scale) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n, " < 0"));
  if (f == Fp4Format::kNvfp4 && tensor_scale == nullptr) {
    return absl::InvalidArgumentError("null tensor_scale (nvfp4)");
  }
  if (n > 0 && (x == nullptr || codes == nullptr || block_scales == nullptr)) {
    return absl::InvalidArgumentError("null buffer");
  }
  return absl::OkStatus();
}

absl::Status internal::CheckDequantizeFp4Args(const uint8_t* codes,
                                              const uint8_t* block_scales,
                                              const float* tensor_scale,
                                              int64_t n, Fp4Format f,
                                              const float* out) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n, " < 0"));
  if (n > 0 && (codes == nullptr || block_scales == nullptr || out == nullptr ||
                (f == Fp4Format::kNvfp4 && tensor_scale == nullptr))) {
    return absl::InvalidArgumentError("null buffer");
  }
  return absl::OkStatus();
}

absl::Status internal::CheckAccumulateFp4Args(const Fp4Source* sources,
                                              int num_sources, int64_t n,
                                              Fp4Format f, const float* acc) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n, " < 0"));
  if (num_sources < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_sources = ", num_sources, " < 0"));
  }
  if (num_sources > 0 && sources == nullptr) {
    return absl::InvalidArgumentError("null sources");
  }
  if (n == 0) return absl::OkStatus();
  if (acc == nullptr) return absl::InvalidArgumentError("null acc");
  for (int k = 0; k < num_sources; ++k) {
    if (sources[k].codes == nullptr || sources[k].block_scales == nullptr ||
        (f == Fp4Format::kNvfp4 && sources[k].tensor_scale == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("null source ", k));
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizeFp4(const float* x, int64_t n, Fp4Format f, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale,
                         float* residual, QuantizeStats* stats) {
  if (auto s = internal::CheckQuantizeFp4Args(x, n, f, codes, block_scales,
                                              tensor_scale);
      !s.ok()) {
    return s;
  }
  const bool nv = f == Fp4Format::kNvfp4;
  // The segment's finite amax: nvfp4's tensor scale, and the scale of the
  // boundary hits (mxfp4 needs it for those only).
  const float amax = nv || stats != nullptr ? FiniteAmax(x, n).amax : 0.0f;
  const float s_t = nv ? Nvfp4TensorScale(amax) : 1.0f;
  if (tensor_scale != nullptr) *tensor_scale = s_t;
  const BlockCoder hits = BlockCoder::For(f, BlockScaleCode(f, amax, s_t), s_t);
  QuantizeStats st;
  st.n = n;
  const int64_t block = Fp4BlockSize(f);
  auto encode = block == 16   ? &EncodeBlock<16>
                : block == 32 ? &EncodeBlock<32>
                              : &EncodeBlock<0>;
  int64_t b = 0, lo = 0;
#ifdef GIFT_FP8_AVX2
  if (internal::CpuHasAvx2Kernels()) {
    b = n / block;
    lo = b * block;
    (nv ? &QuantizeBlocksAvx2<Fp4Format::kNvfp4>
        : &QuantizeBlocksAvx2<Fp4Format::kMxfp4>)(x, b, s_t, hits, codes,
                                                  block_scales, residual, &st);
  }
#endif
  for (; lo < n; ++b, lo += block) {
    const int64_t m = std::min(block, n - lo);
    const BlockAmax am = FiniteAmax(x + lo, m);
    const uint8_t code = BlockScaleCode(f, am.amax, s_t);
    (m == block ? encode : &EncodeBlock<0>)(BlockCoder::For(f, code, s_t), hits,
                                            x + lo, m, codes + lo / 2,
                                            residual ? residual + lo : nullptr,
                                            &st);
    st.nonfinite += am.nonfinite;
    block_scales[b] = am.nonfinite == 0 ? code : nv ? kNvfp4NaNScale : kE8M0NaN;
  }
  if (stats) *stats = st;
  return absl::OkStatus();
}

absl::Status DequantizeFp4(const uint8_t* codes, const uint8_t* block_scales,
                           const float* tensor_scale, int64_t n, Fp4Format f,
                           float* out) {
  if (auto s = internal::CheckDequantizeFp4Args(codes, block_scales,
                                                tensor_scale, n, f, out);
      !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  const float s_t = TensorScaleOf(f, tensor_scale);
  const int64_t block = Fp4BlockSize(f);
  int64_t b = 0, lo = 0;
#ifdef GIFT_FP8_AVX2
  if (internal::CpuHasAvx2Kernels()) {
    b = n / block;
    lo = b * block;
    DecodeBlocks<false>(f, codes, block_scales, s_t, b, out);
  }
#endif
  for (; lo < n; ++b, lo += block) {
    const int64_t m = std::min(block, n - lo);
    const BlockCoder c = BlockCoder::For(f, block_scales[b], s_t);
    float table[16];
    DecodeTable(c, table);
    for (int64_t i = 0; i < m; ++i) {
      out[lo + i] = table[(codes[(lo + i) / 2] >> (4 * (i % 2))) & 15];
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeAccumulateFp4(const Fp4Source* sources, int num_sources,
                                     int64_t n, Fp4Format f, bool zero_first,
                                     float* acc) {
  if (auto s =
          internal::CheckAccumulateFp4Args(sources, num_sources, n, f, acc);
      !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  if (zero_first) std::fill(acc, acc + n, 0.0f);
  const int64_t block = Fp4BlockSize(f);
  auto add = block == 16   ? &AccumulateBlock<16>
             : block == 32 ? &AccumulateBlock<32>
                           : &AccumulateBlock<0>;
  for (int k = 0; k < num_sources; ++k) {
    const Fp4Source& src = sources[k];
    const float s_t = TensorScaleOf(f, src.tensor_scale);
    int64_t b = 0, lo = 0;
#ifdef GIFT_FP8_AVX2
    if (internal::CpuHasAvx2Kernels()) {
      b = n / block;
      lo = b * block;
      DecodeBlocks<true>(f, src.codes, src.block_scales, s_t, b, acc);
    }
#endif
    for (; lo < n; ++b, lo += block) {
      const int64_t m = std::min(block, n - lo);
      (m == block ? add : &AccumulateBlock<0>)(BlockCoder::For(
                                                   f, src.block_scales[b], s_t),
                                               src.codes + lo / 2, m, acc + lo);
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
