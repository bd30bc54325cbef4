// Scaled FP8 quantization, CPU reference. Two passes per block: the amax
// (integer max over the magnitude bits, which orders non-negative floats
// like their values), then encode + dequantize + residual + telemetry.
//
// AVX2 path (run-time dispatch, internal::CpuHasAvx2Kernels): the first pass
// also counts zeros and tells whether the block is all finite; such a block
// (with a normal scale) is encoded 32 elements per iteration with
// internal::EncodeMag8, its double sums in four-lane FMA accumulators. Blocks
// with NaN/Inf, and CPUs without AVX2, take the portable path below, which
// GCC vectorises (the double sums, which may not be reassociated there, in
// GCC vector types).
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gift::kernels {
namespace {

using internal::BitsFloat;
using internal::DecodeFp8Inline;
using internal::EncodeFp8Inline;
using internal::FloatBits;
#ifdef GIFT_FP8_AVX2
using internal::HorizontalSum;
#endif

constexpr int32_t kInfBits = 0x7F800000;
// Dequantize blocks at least this long use a table of scaled values.
constexpr int64_t kTableMin = 1024;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GIFT_QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GIFT_QUANT_CLONES
#endif

struct BlockAmax {
  float amax;         // over finite elements
  int64_t nonfinite;  // NaN/Inf count
};

GIFT_QUANT_CLONES BlockAmax FiniteAmax(const float* x, int64_t n) {
  int32_t amax = 0;
  int64_t nonfinite = 0;
  // 32-bit counts vectorise better; chunks keep them from overflowing.
  for (int64_t i0 = 0; i0 < n; i0 += (int64_t{1} << 30)) {
    const int64_t m = std::min(n - i0, int64_t{1} << 30);
    int32_t bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t a = static_cast<int32_t>(FloatBits(x[i0 + i]) & 0x7FFFFFFF);
      const bool finite = a < kInfBits;
      amax = std::max(amax, finite ? a : 0);
      bad += finite ? 0 : 1;
    }
    nonfinite += bad;
  }
  return {BitsFloat(static_cast<uint32_t>(amax)), nonfinite};
}

// How the residual is written: not at all, to a separate buffer, or over x.
enum class Residual { kNone, kSeparate, kInPlace };

// The encode pass is written with GCC vector types, eight floats at a time:
// one AVX register in the AVX2 clone, two SSE2 registers otherwise. The
// auto-vectoriser cannot do it alone (double sums must not be reassociated).
typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef uint8_t V8b __attribute__((vector_size(8)));
typedef uint8_t V32b __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));

// (V8i)v and (V8f)v reinterpret the bits (GCC vector casts convert nothing).
//
// EncodeFp8Inline on eight lanes that also returns the decoded magnitude
// with x's sign (exact for finite x; unused for NaN/Inf): the rounded value
// is a by-product of the rounding (normal range: the rounded bits shifted
// back; subnormal range: the magic sum minus the magic constant).
template <Fp8Format F>
[[gnu::always_inline]] inline void EncodeDecode8(const V8f& v, V8i* code_out,
                                                 V8f* dec) {
  constexpr bool k43 = F == Fp8Format::kE4M3;
  constexpr int kShift = k43 ? 20 : 21;
  constexpr int32_t kMinNormal = k43 ? 0x3C800000 : 0x38800000;
  constexpr int32_t kSatAbove = k43 ? 0x43E80000 : 0x476FFFFF;
  constexpr int32_t kRebias = k43 ? (120 << 3) : (112 << 2);
  constexpr float kMagic = k43 ? 16384.0f : 128.0f;
  constexpr int32_t kMagicBits = k43 ? 0x46800000 : 0x43000000;
  constexpr int32_t kMaxBits = k43 ? 0x43E00000 : 0x47600000;  // 448, 57344
  const V8i u = (V8i)(v);
  const V8i a = u & 0x7FFFFFFF;
  const V8i rounded =
      (a + ((1 << (kShift - 1)) - 1) + ((a >> kShift) & 1)) >> kShift;
  const V8f a_f = (V8f)(a);
  const V8f sum = a_f + kMagic;
  const V8f sub_value = sum - kMagic;  // exact
  const V8i sub = (V8i)(sum)-kMagicBits;
  const V8i is_sub = a < kMinNormal;
  const V8i is_sat = a > kSatAbove;
  V8i code = is_sub ? sub : rounded - kRebias;
  V8i mag = is_sub ? (V8i)(sub_value) : rounded << kShift;
  code = is_sat ? V8i{} + Fp8MaxCode(F) : code;
  mag = is_sat ? V8i{} + kMaxBits : mag;
  code |= (u >> 24) & 0x80;
  code = a > 0x7F800000 ? V8i{} + 0x7F : code;
  const V8i signed_mag = mag | (u & static_cast<int32_t>(0x80000000u));
  *dec = (V8f)(signed_mag);
  *code_out = code;
}

// The low / high four lanes, widened to double.
#define GIFT_LO4(v) \
  __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), V4d)
#define GIFT_HI4(v) \
  __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), V4d)

// Encode pass over one block with scale s. kInPlace reads x through
// `residual` (the same memory). Inlined into each target clone below, so
// that the AVX2 clone really runs AVX2 code.
template <Fp8Format F, Residual R>
[[gnu::always_inline]] inline void EncodeBlockT(const float* x_in, int64_t n,
                                                float s, uint8_t* codes,
                                                float* residual,
                                                QuantizeStats* st) {
  const float* x = R == Residual::kInPlace ? residual : x_in;
  V4d ev = {}, xv2 = {}, hv = {};
  V8i upper = {}, lower = {};
  const V8f sv = V8f{} + s;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    V8f xv;
    std::memcpy(&xv, x + i, sizeof(xv));
    V8i q;
    V8f dec;
    EncodeDecode8<F>(xv / sv, &q, &dec);
    const V8f h = dec * sv;
    const V8i a = (V8i)(xv)&0x7FFFFFFF;
    const V8i finite = a < kInfBits;  // lanes: -1 or 0
    // Low byte of each lane (little endian); a byte shuffle, where
    // __builtin_convertvector would extract lane by lane.
    const V32b qbytes = (V32b)(q);
    const V8b qb =
        __builtin_shufflevector(qbytes, qbytes, 0, 4, 8, 12, 16, 20, 24, 28);
    std::memcpy(codes + i, &qb, sizeof(qb));
    if constexpr (R != Residual::kNone) {
      const V8f r = finite ? xv - h : V8f{};
      std::memcpy(residual + i, &r, sizeof(r));
    }
    const V8i mag = q & 0x7F;
    upper += finite & (mag == Fp8MaxCode(F));  // adds -1 per hit
    lower += finite & (mag <= 1) & (a != 0);
    const V8f xf = finite ? xv : V8f{};
    const V8f hf = finite ? h : V8f{};
    const V4d xa = GIFT_LO4(xf), xb = GIFT_HI4(xf);
    const V4d ha = GIFT_LO4(hf), hb = GIFT_HI4(hf);
    const V4d da = ha - xa, db = hb - xb;
    ev += da * da;
    ev += db * db;
    xv2 += xa * xa;
    xv2 += xb * xb;
    hv += ha * xa;
    hv += hb * xb;
  }
  double e = 0, xx = 0, hx = 0;
  for (; i < n; ++i) {  // tail, same operations one by one
    const float xv = x[i];
    const bool finite = (FloatBits(xv) & 0x7FFFFFFFu) < 0x7F800000u;
    const uint8_t q = EncodeFp8Inline<F>(xv / s);
    const float h = DecodeFp8Inline<F>(q) * s;
    codes[i] = q;
    if constexpr (R != Residual::kNone) residual[i] = finite ? xv - h : 0.0f;
    if (!finite) continue;
    const int mag = q & 0x7F;
    st->upper += mag == Fp8MaxCode(F);
    st->lower += mag <= 1 && xv != 0;
    const double xd = xv, hd = h, d = hd - xd;
    e += d * d;
    xx += xd * xd;
    hx += hd * xd;
  }
  for (int k = 0; k < 8; ++k) {
    st->upper -= upper[k];
    st->lower -= lower[k];
  }
  for (int k = 0; k < 4; ++k) {
    e += ev[k];
    xx += xv2[k];
    hx += hv[k];
  }
  st->err_sq += e;
  st->x_sq += xx;
  st->xhat_x += hx;
}
#undef GIFT_LO4
#undef GIFT_HI4

using EncodeFn = void (*)(const float*, int64_t, float, uint8_t*, float*,
                          QuantizeStats*);

#define GIFT_ENCODE_BLOCK(name, F, R)                             \
  GIFT_QUANT_CLONES void name(const float* x, int64_t n, float s, \
                              uint8_t* codes, float* residual,    \
                              QuantizeStats* st) {                \
    EncodeBlockT<F, R>(x, n, s, codes, residual, st);             \
  }
GIFT_ENCODE_BLOCK(EncodeE4M3, Fp8Format::kE4M3, Residual::kNone)
GIFT_ENCODE_BLOCK(EncodeE4M3Sep, Fp8Format::kE4M3, Residual::kSeparate)
GIFT_ENCODE_BLOCK(EncodeE4M3InPlace, Fp8Format::kE4M3, Residual::kInPlace)
GIFT_ENCODE_BLOCK(EncodeE5M2, Fp8Format::kE5M2, Residual::kNone)
GIFT_ENCODE_BLOCK(EncodeE5M2Sep, Fp8Format::kE5M2, Residual::kSeparate)
GIFT_ENCODE_BLOCK(EncodeE5M2InPlace, Fp8Format::kE5M2, Residual::kInPlace)
#undef GIFT_ENCODE_BLOCK

EncodeFn PickEncoder(Fp8Format f, const float* x, const float* residual) {
  const bool e4 = f == Fp8Format::kE4M3;
  if (residual == nullptr) return e4 ? EncodeE4M3 : EncodeE5M2;
  if (residual == x) return e4 ? EncodeE4M3InPlace : EncodeE5M2InPlace;
  return e4 ? EncodeE4M3Sep : EncodeE5M2Sep;
}

#ifdef GIFT_FP8_AVX2
struct MagScan {
  int32_t max_bits;  // of |x|, NaN and Inf included (>= kInfBits: not finite)
  int64_t zeros;     // elements with x == 0
};

// First pass of the AVX2 path over at most 2^31 elements (the 32-bit zero
// counts cannot wrap); counting zeros here keeps them out of the encode
// loop, which is short of registers.
GIFT_AVX2_TARGET MagScan ScanChunkAvx2(const float* x, int64_t n) {
  const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i zero = _mm256_setzero_si256();
  const __m256 fzero = _mm256_setzero_ps();
  __m256i m0 = zero, m1 = zero, z0 = zero, z1 = zero;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // More misses in flight than the hardware prefetcher keeps alone.
    _mm_prefetch(reinterpret_cast<const char*>(x + i + 2048), _MM_HINT_T0);
    const __m256i* p = reinterpret_cast<const __m256i*>(x + i);
    const __m256i a0 = _mm256_and_si256(_mm256_loadu_si256(p), abs);
    const __m256i a1 = _mm256_and_si256(_mm256_loadu_si256(p + 1), abs);
    m0 = _mm256_max_epi32(m0, a0);
    m1 = _mm256_max_epi32(m1, a1);
    // x == 0 as the scalar code compares it (so also under MXCSR.DAZ).
    z0 = _mm256_sub_epi32(z0, _mm256_castps_si256(_mm256_cmp_ps(
                                  _mm256_castsi256_ps(a0), fzero, _CMP_EQ_OQ)));
    z1 = _mm256_sub_epi32(z1, _mm256_castps_si256(_mm256_cmp_ps(
                                  _mm256_castsi256_ps(a1), fzero, _CMP_EQ_OQ)));
  }
  alignas(32) int32_t mx[8], zc[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(mx), _mm256_max_epi32(m0, m1));
  _mm256_store_si256(reinterpret_cast<__m256i*>(zc), _mm256_add_epi32(z0, z1));
  MagScan r{0, 0};
  for (int k = 0; k < 8; ++k) {
    r.max_bits = std::max(r.max_bits, mx[k]);
    r.zeros += uint32_t(zc[k]);
  }
  for (; i < n; ++i) {
    const int32_t a = static_cast<int32_t>(FloatBits(x[i]) & 0x7FFFFFFF);
    r.max_bits = std::max(r.max_bits, a);
    r.zeros += x[i] == 0.0f;
  }
  return r;
}

MagScan ScanAvx2(const float* x, int64_t n) {
  MagScan r{0, 0};
  for (int64_t lo = 0; lo < n; lo += int64_t{1} << 31) {
    const MagScan c = ScanChunkAvx2(x + lo, std::min(n - lo, int64_t{1} << 31));
    r.max_bits = std::max(r.max_bits, c.max_bits);
    r.zeros += c.zeros;
  }
  return r;
}

// The encode pass of a block without NaN/Inf, 32 elements per iteration:
// codes, residual and telemetry in one pass (sums in double, four lanes
// each, so their order differs from the scalar loop). `lower` here counts
// every code of magnitude <= 1, zeros of x included (the caller subtracts
// them). kStats = false: no telemetry (st untouched).
template <Fp8Format F, bool kResidual, bool kStats>
GIFT_AVX2_TARGET void EncodeFiniteAvx2(const float* x, int64_t n, float s,
                                       uint8_t* codes, float* residual,
                                       QuantizeStats* st) {
  const __m256 sv = _mm256_set1_ps(s);
  __m256d e0 = _mm256_setzero_pd(), e1 = e0, xx0 = e0, xx1 = e0, hx0 = e0,
          hx1 = e0;
  int64_t upper = 0, lower = 0;
  alignas(32) float hbuf[32];
  constexpr int64_t kAhead = 1024;  // elements (4 KiB)
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // The loop is compute-bound; fetching ahead overlaps DRAM with it.
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAhead + 16),
                 _MM_HINT_T0);
    // Pairs of eight lanes narrowed to 16 bits as soon as they are done
    // (fewer live registers): magnitude codes and x's bits (for the sign).
    __m256i pm[2], pb[2];
    for (int p = 0; p < 2; ++p) {
      __m256i mag[2], bits[2];
      for (int k = 0; k < 2; ++k) {
        const __m256 xv = _mm256_loadu_ps(x + i + 16 * p + 8 * k);
        __m256 dec;
        mag[k] = internal::EncodeMag8<F, /*kNaN=*/false>(_mm256_div_ps(xv, sv),
                                                         &dec);
        bits[k] = _mm256_castps_si256(xv);
        // dec has the sign of x / s, which is x's (s > 0).
        _mm256_store_ps(hbuf + 16 * p + 8 * k, _mm256_mul_ps(dec, sv));
      }
      pm[p] = _mm256_packs_epi32(mag[0], mag[1]);
      pb[p] = _mm256_packs_epi32(bits[0], bits[1]);
    }
    // Residual and sums, from L1 (in registers they would crowd out the
    // encoder's).
    if constexpr (!kStats) {
      if constexpr (kResidual) {
        for (int k = 0; k < 4; ++k) {
          _mm256_storeu_ps(residual + i + 8 * k,
                           _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * k),
                                         _mm256_load_ps(hbuf + 8 * k)));
        }
      }
    } else {
      for (int k = 0; k < 4; ++k) {
        const float* xk = x + i + 8 * k;
        const float* hk = hbuf + 8 * k;
        // Widened straight from memory (no lane extraction), before the
        // residual may overwrite x.
        const __m256d xl = _mm256_cvtps_pd(_mm_loadu_ps(xk));
        const __m256d xh = _mm256_cvtps_pd(_mm_loadu_ps(xk + 4));
        if constexpr (kResidual) {
          _mm256_storeu_ps(
              residual + i + 8 * k,
              _mm256_sub_ps(_mm256_loadu_ps(xk), _mm256_load_ps(hk)));
        }
        const __m256d hl = _mm256_cvtps_pd(_mm_load_ps(hk));
        const __m256d hh = _mm256_cvtps_pd(_mm_load_ps(hk + 4));
        const __m256d dl = _mm256_sub_pd(hl, xl), dh = _mm256_sub_pd(hh, xh);
        e0 = _mm256_fmadd_pd(dl, dl, e0);
        e1 = _mm256_fmadd_pd(dh, dh, e1);
        xx0 = _mm256_fmadd_pd(xl, xl, xx0);
        xx1 = _mm256_fmadd_pd(xh, xh, xx1);
        hx0 = _mm256_fmadd_pd(hl, xl, hx0);
        hx1 = _mm256_fmadd_pd(hh, xh, hx1);
      }
    }
    // Bytes in the order of PackCodes32 (signed saturation keeps each sign
    // in bit 7).
    const __m256i m = _mm256_packus_epi16(pm[0], pm[1]);
    const __m256i sg = _mm256_packs_epi16(pb[0], pb[1]);
    const __m256i q =
        _mm256_or_si256(m, _mm256_and_si256(sg, _mm256_set1_epi8(char(0x80))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i),
                        _mm256_permutevar8x32_epi32(
                            q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    if constexpr (!kStats) continue;
    // Telemetry on the packed magnitudes (byte order does not matter).
    const __m256i up = _mm256_cmpeq_epi8(m, _mm256_set1_epi8(Fp8MaxCode(F)));
    const __m256i lo = _mm256_cmpgt_epi8(_mm256_set1_epi8(2), m);
    upper += __builtin_popcount(uint32_t(_mm256_movemask_epi8(up)));
    lower += __builtin_popcount(uint32_t(_mm256_movemask_epi8(lo)));
  }
  double e = 0, xx = 0, hx = 0;
  for (; i < n; ++i) {  // tail, as EncodeBlockT
    const float xv = x[i];
    const uint8_t q = EncodeFp8Inline<F>(xv / s);
    const float h = DecodeFp8Inline<F>(q) * s;
    codes[i] = q;
    if constexpr (kResidual) residual[i] = xv - h;
    if constexpr (!kStats) continue;
    const int mg = q & 0x7F;
    upper += mg == Fp8MaxCode(F);
    lower += mg <= 1;
    const double xd = xv, hd = h, d = hd - xd;
    e += d * d;
    xx += xd * xd;
    hx += hd * xd;
  }
  if constexpr (!kStats) return;
  st->upper += upper;
  st->lower += lower;
  st->err_sq += e + HorizontalSum(_mm256_add_pd(e0, e1));
  st->x_sq += xx + HorizontalSum(_mm256_add_pd(xx0, xx1));
  st->xhat_x += hx + HorizontalSum(_mm256_add_pd(hx0, hx1));
}

// Encodes a block whose elements are all finite with the AVX2 kernel; st
// null: no telemetry.
void EncodeFinite(Fp8Format f, const float* x, int64_t n, float s,
                  uint8_t* codes, float* residual, QuantizeStats* st) {
  using Fn =
      void (*)(const float*, int64_t, float, uint8_t*, float*, QuantizeStats*);
  using enum Fp8Format;
  static constexpr Fn kFns[2][2][2] = {{{EncodeFiniteAvx2<kE4M3, false, false>,
                                         EncodeFiniteAvx2<kE4M3, false, true>},
                                        {EncodeFiniteAvx2<kE4M3, true, false>,
                                         EncodeFiniteAvx2<kE4M3, true, true>}},
                                       {{EncodeFiniteAvx2<kE5M2, false, false>,
                                         EncodeFiniteAvx2<kE5M2, false, true>},
                                        {EncodeFiniteAvx2<kE5M2, true, false>,
                                         EncodeFiniteAvx2<kE5M2, true, true>}}};
  kFns[f == kE5M2][residual != nullptr][st != nullptr](x, n, s, codes, residual,
                                                       st);
}

// out[i] = DecodeFp8(codes[i]) * s, with m from internal::HalvesMultiplier.
template <Fp8Format F>
GIFT_AVX2_TARGET void DequantAvx2(const uint8_t* codes, int64_t n, float s,
                                  float m, float* out) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 lo, hi;
    internal::DecodeHalves16<F>(codes + i, &lo, &hi);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(lo, mv));
    _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(hi, mv));
  }
  for (; i < n; ++i) out[i] = DecodeFp8Inline<F>(codes[i]) * s;
}
#endif  // GIFT_FP8_AVX2

template <Fp8Format F>
[[gnu::always_inline]] inline void DequantBlockT(
    const uint8_t* __restrict codes, int64_t n, float s,
    float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = DecodeFp8Inline<F>(codes[i]) * s;
}
GIFT_QUANT_CLONES void DequantE4M3(const uint8_t* __restrict codes, int64_t n,
                                   float s, float* __restrict out) {
  DequantBlockT<Fp8Format::kE4M3>(codes, n, s, out);
}
GIFT_QUANT_CLONES void DequantE5M2(const uint8_t* __restrict codes, int64_t n,
                                   float s, float* __restrict out) {
  DequantBlockT<Fp8Format::kE5M2>(codes, n, s, out);
}

absl::Status CheckArgs(int64_t n, const QuantizeSpec& spec, const void* a,
                       const void* b, const void* c) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("n = ", n, " < 0"));
  if (spec.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size = ", spec.block_size, " < 0"));
  }
  if (n > 0 && (a == nullptr || b == nullptr || c == nullptr)) {
    return absl::InvalidArgumentError("null buffer");
  }
  return absl::OkStatus();
}

}  // namespace

void QuantizeStats::Merge(const QuantizeStats& o) {
  n += o.n;
  upper += o.upper;
  lower += o.lower;
  nonfinite += o.nonfinite;
  err_sq += o.err_sq;
  x_sq += o.x_sq;
  xhat_x += o.xhat_x;
}

double QuantizeStats::RelL2() const {
  return x_sq > 0 ? std::sqrt(err_sq / x_sq) : 0.0;
}

double QuantizeStats::Cosine() const {
  const double xhat_sq = std::max(0.0, err_sq - x_sq + 2 * xhat_x);
  if (xhat_sq == 0 && x_sq == 0) return 1.0;
  if (xhat_sq == 0 || x_sq == 0) return 0.0;
  return xhat_x / std::sqrt(xhat_sq * x_sq);
}

int64_t NumScales(int64_t n, int64_t block_size) {
  if (block_size <= 0) return 1;
  return (n + block_size - 1) / block_size;
}

float ScaleForAmax(float amax, Fp8Format f) {
  if (amax == 0) return 1.0f;
  const float s = amax / Fp8Max(f);
  return s > 0 ? s : std::numeric_limits<float>::denorm_min();
}

absl::Status Quantize(const float* x, int64_t n, const QuantizeSpec& spec,
                      uint8_t* codes, float* scales, float* residual,
                      QuantizeStats* stats) {
  if (n == 0 && spec.block_size == 0 && scales == nullptr) {
    return absl::InvalidArgumentError("null scales");
  }
  if (auto s = CheckArgs(n, spec, x, codes, scales); !s.ok()) return s;
  const int64_t block = spec.block_size > 0 ? spec.block_size : n;
  const EncodeFn encode = PickEncoder(spec.format, x, residual);
  QuantizeStats st;
  st.n = n;
  if (n == 0 && spec.block_size == 0) scales[0] = 1.0f;
#ifdef GIFT_FP8_AVX2
  const bool avx2 = internal::CpuHasAvx2Kernels();
#endif
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
    const int64_t m = std::min(block, n - lo);
#ifdef GIFT_FP8_AVX2
    if (avx2) {
      const MagScan scan = ScanAvx2(x + lo, m);
      const float s =
          ScaleForAmax(BitsFloat(uint32_t(scan.max_bits)), spec.format);
      // All finite, and a normal scale (so that x / s is the same under
      // MXCSR.DAZ and never NaN).
      if (scan.max_bits < kInfBits && s >= std::numeric_limits<float>::min()) {
        EncodeFinite(spec.format, x + lo, m, s, codes + lo,
                     residual ? residual + lo : nullptr, stats ? &st : nullptr);
        st.lower -= scan.zeros;  // a zero's code is 0 but it is no hit
        scales[b] = s;
        continue;
      }
    }
#endif
    const BlockAmax am = FiniteAmax(x + lo, m);
    const float s = ScaleForAmax(am.amax, spec.format);
    encode(x + lo, m, s, codes + lo, residual ? residual + lo : nullptr, &st);
    st.nonfinite += am.nonfinite;
    scales[b] = am.nonfinite > 0 ? std::numeric_limits<float>::quiet_NaN() : s;
  }
  if (stats) *stats = st;
  return absl::OkStatus();
}

absl::Status Dequantize(const uint8_t* codes, const float* scales, int64_t n,
                        const QuantizeSpec& spec, float* out) {
  if (auto s = CheckArgs(n, spec, codes, scales, out); !s.ok()) return s;
  const int64_t block = spec.block_size > 0 ? spec.block_size : n;
#ifdef GIFT_FP8_AVX2
  const bool avx2 = internal::CpuHasAvx2Kernels();
#endif
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
    const int64_t m = std::min(block, n - lo);
#ifdef GIFT_FP8_AVX2
    float mult;
    if (avx2 && internal::HalvesMultiplier(spec.format, scales[b], &mult)) {
      (spec.format == Fp8Format::kE4M3
           ? DequantAvx2<Fp8Format::kE4M3>
           : DequantAvx2<Fp8Format::kE5M2>)(codes + lo, m, scales[b], mult,
                                            out + lo);
      continue;
    }
#endif
    if (m >= kTableMin) {
      float table[256];
      internal::ScaledDecodeTable(spec.format, scales[b], table);
      for (int64_t i = 0; i < m; ++i) out[lo + i] = table[codes[lo + i]];
    } else if (spec.format == Fp8Format::kE4M3) {
      DequantE4M3(codes + lo, m, scales[b], out + lo);
    } else {
      DequantE5M2(codes + lo, m, scales[b], out + lo);
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
