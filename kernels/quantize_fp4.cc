// Block-scaled 4-bit quantization, CPU reference. Per block: the finite amax
// (integer max over the magnitude bits, which orders non-negative floats
// like their values) and the non-finite count, the block's scale code, then
// the codes (packed two per byte), the residual and the telemetry (double
// sums in element order; the boundary hits through a second coder, that of
// the block holding the segment's amax). The reference for the CUDA kernels,
// in short per-block loops without branches, whole blocks with a constant
// trip count (the codes of both coders in one loop; decoded values from a
// 16-entry table of the block's coder, the same products as decoding each
// element). Against the per-element loops it replaced, side by side in
// bench/quantize_bench.cc (2 runs, 1M and 16M elements): quantize in place
// with residual and telemetry nvfp4 0.49-0.55 -> 1.41-1.47 GB/s, mxfp4
// 0.61-1.31 -> 1.77-1.85; dequantize-accumulate of 4 sources 0.35-0.38 ->
// 2.41-3.39; the same codes, scales and residuals.
#include "kernels/quantize_fp4.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/fp8.h"

namespace gift::kernels {
namespace {

using internal::BitsFloat;
using internal::FloatBits;

constexpr uint32_t kInfBits = 0x7F800000u;

struct BlockAmax {
  float amax;         // over finite elements
  int64_t nonfinite;  // NaN/Inf count
};

BlockAmax FiniteAmax(const float* x, int64_t n) {
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
      c.block = DecodeFp8(code, Fp8Format::kE4M3);
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

uint8_t BlockScaleCode(Fp4Format f, float amax, float s_t) {
  return f == Fp4Format::kNvfp4 ? Nvfp4BlockScaleCode(amax, s_t)
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
  if (block_amax == 0) return 0x00;
  const uint8_t c =
      EncodeFp8((block_amax / tensor_scale) / 6.0f, Fp8Format::kE4M3);
  return c == 0 ? uint8_t{0x01} : c;
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
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
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
  for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
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
    for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block) {
      const int64_t m = std::min(block, n - lo);
      (m == block ? add : &AccumulateBlock<0>)(BlockCoder::For(
                                                   f, src.block_scales[b], s_t),
                                               src.codes + lo / 2, m, acc + lo);
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
