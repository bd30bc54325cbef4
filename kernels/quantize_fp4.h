// Block-scaled 4-bit quantization (nvfp4, mxfp4) of one tensor segment with
// its telemetry and error feedback in one call, dequantization, and the
// chunk owner's dequantize-and-accumulate: the 4-bit counterparts of
// kernels/quantize.h and kernels/accumulate.h (DESIGN §2, issue 27).
//
// Layout. Element i's E2M1 code (kernels/fp4.h) is in byte i / 2 of `codes`,
// the low nibble for even i, the high nibble for odd i; for odd n the last
// byte's high nibble is 0 (Fp4PackedBytes(n) bytes). Blocks are
// Fp4BlockSize(f) consecutive elements (16 or 32, along the contiguous
// d_in); the last block may be shorter (ragged, nothing padded is sent).
// One scale byte per block (Fp4NumBlocks(n, f)); nvfp4 adds one float per
// call (the tensor scale s_t). Blocks have an even size, so no byte holds
// two blocks' codes.
//
// nvfp4 (NVIDIA's two-level NVFP4 scaling: an E4M3 scale per 16-element
// micro-block and an FP32 scale per tensor that maps the block scales into
// E4M3's range; NVIDIA technical blog "Introducing NVFP4 for Efficient and
// Accurate Low-Precision Inference", 2025,
// developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-
// low-precision-inference; Transformer Engine's NVFP4 recipe takes the
// per-tensor scale as amax / (448 · 6) as well). Exactly, with IEEE float
// operations in this order (a = the segment's finite amax(|x|), a_b = the
// block's):
//   s_t = a / 2688 (6 · 448); 1 when a == 0; the smallest positive float
//         when the quotient underflows to 0 (as ScaleForAmax);
//   y_i = x_i / s_t;  block code c_b = e4m3((a_b / s_t) / 6) (RNE,
//         saturating at 448);
//   q_i = e2m1(y_i / e4m3val(c_b));  x̂_i = (e2m1val(q_i) · e4m3val(c_b)) · s_t
//         (the first product is exact: one rounding per element).
// All-zero block: c_b = 0x00 (scale 0), codes ±0, x̂ = ±0. E4M3 block-scale
// underflow ((a_b / s_t) / 6 rounds to 0 in E4M3, i.e. is <= 2^-10, for a
// non-zero block): c_b = 0x01, the smallest positive E4M3 subnormal 2^-9,
// so the block keeps what it can (|x_i / scale| <= 3, no saturation, every
// element's error <= |x_i|) instead of decoding to 0.
//
// mxfp4 (OCP Microscaling Formats (MX) v1.0, §5.3 / §6.3): shared exponent
// X = 2^(floor(log2 a_b) − 2) (emax of E2M1 = 2) as an E8M0 code
// e_b = max(EncodeE8M0(a_b) − 2, 0) (clamped at 2^-127 for tiny blocks;
// never above 252 for finite a_b); q_i = e2m1(x_i / X) with saturation to
// ±6 (values in [6, 8)·X saturate, as the spec's conversion does);
// x̂_i = e2m1val(q_i) · X (exact). x_i / X is computed as x_i · 2^(127 −
// e_b), the exact reciprocal, which gives the same correctly rounded value.
// All-zero block: e_b = 127 (scale 1), codes ±0.
//
// Non-finite input (as kernels/quantize.h): a block holding NaN or ±Inf
// gets its scale code replaced by the NaN flag (E4M3 0x7F for nvfp4, E8M0
// 0xFF for mxfp4), so every x̂ of the block and every sum it enters is NaN;
// it is counted in stats.nonfinite. Everything else (s_t, the other blocks,
// the block's codes, its finite elements' residuals and telemetry) is
// computed as if with the finite amax; NaN encodes to +6 and ±Inf to ±6
// (cuda_fp4.h's conversion), their residuals are 0. s_t stays finite.
//
// Telemetry (QuantizeStats, over finite elements, sums in double): err_sq,
// x_sq, xhat_x of the codes sent, as for FP8. The boundary hits are
// tensor-relative: counted against the segment's finite amax a, as one
// scale for the whole call would see them, not against each element's own
// block scale. Each finite x_i gets a second code t_i from the coder of the
// block that holds a (the largest block scale of the call):
//   nvfp4: t_i = e2m1((x_i / s_t) / e4m3val(c_a)), c_a = e4m3((a / s_t) / 6)
//          (e4m3val(c_a) = 448 unless s_t is subnormal), so t_i = ±0 for
//          |x_i| <= a / 24 and ±6 for |x_i| > 5a / 6;
//   mxfp4: t_i = e2m1(x_i · 2^(127 − e_a)), e_a = max(EncodeE8M0(a) − 2, 0)
//          (mxfp4 has no tensor scale: the amax block's shared exponent),
//          so t_i = ±0 for |x_i| <= 2^(⌊log2 a⌋ − 4);
// upper = elements with t_i = ±6, lower = non-zero elements with t_i = ±0;
// no hits when a = 0. In the block holding a, t_i is the code sent. Why not
// the codes sent: each block scale follows its own block, so block-relative
// hits measure the range inside blocks and did not rank layers by GIFT's
// gain (Spearman −0.36 nvfp4, −0.36 mxfp4 on the 8 committed MLP
// gradients), while the tensor-relative count measures the tensor's heavy
// tails and does (+0.81, +0.79; +0.90, +0.86 summed over the workers'
// local gradients as the selector sees them): tools/fidelity/
// hit_score_rank_test.cc. A call's count is over its segment only.
//
// Error feedback: when `residual` is non-null, residual[i] = x_i − x̂_i (0
// for non-finite x_i); `residual` may alias `x`. Whitening is a separate,
// format-independent pass (kernels/whiten.h: ApplyLowRank with `add` =
// residual forms Ũ = W T + R; QuantizeFp4 with residual = Ũ in place then
// leaves R = Ũ − x̂), exactly as on the FP8 path, which has no fused
// whiten+quantize kernel either.
//
// Arithmetic is IEEE single precision in round-to-nearest (no FTZ/DAZ);
// the CUDA kernels use the same operations (__fdiv_rn, __fmul_rn, ...) and
// give bit-identical codes, scales, residuals, dequantized values and sums.
//
//   std::vector<uint8_t> q(Fp4PackedBytes(n)), sc(Fp4NumBlocks(n, f));
//   float s_t;
//   QuantizeStats st;
//   RETURN_IF_ERROR(QuantizeFp4(x, n, f, q.data(), sc.data(), &s_t,
//                               /*residual=*/x, &st));
//   RETURN_IF_ERROR(DequantizeFp4(q.data(), sc.data(), &s_t, n, f, out));
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_KERNELS_QUANTIZE_FP4_H_
#define GIFT_KERNELS_QUANTIZE_FP4_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/fp4.h"
#include "kernels/quantize.h"

namespace gift::kernels {

// 6 · 448: nvfp4's tensor scale is amax / kNvfp4TensorDivisor.
constexpr float kNvfp4TensorDivisor = 2688.0f;
// The E4M3 NaN code that flags a non-finite nvfp4 block.
constexpr uint8_t kNvfp4NaNScale = 0x7F;

// Bytes of packed codes for n elements: ceil(n / 2) (0 for n <= 0).
int64_t Fp4PackedBytes(int64_t n);
// Block scales for n elements: ceil(n / Fp4BlockSize(f)) (0 for n <= 0).
int64_t Fp4NumBlocks(int64_t n, Fp4Format f);

// The scales of the recipes above, for finite amax >= 0.
float Nvfp4TensorScale(float amax);
uint8_t Nvfp4BlockScaleCode(float block_amax, float tensor_scale);
uint8_t Mxfp4ScaleCode(float block_amax);

// REQUIRES: n >= 0; codes has Fp4PackedBytes(n) bytes, block_scales
// Fp4NumBlocks(n, f); tensor_scale one float (required for nvfp4, also for
// n == 0; for mxfp4 nullable, and set to 1 when given). stats (nullable) is
// overwritten, not merged.
absl::Status QuantizeFp4(const float* x, int64_t n, Fp4Format f, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale,
                         float* residual, QuantizeStats* stats);

// out[i] = x̂_i as defined above. tensor_scale: nvfp4 only (mxfp4 ignores
// it; nullable).
absl::Status DequantizeFp4(const uint8_t* codes, const uint8_t* block_scales,
                           const float* tensor_scale, int64_t n, Fp4Format f,
                           float* out);

// One 4-bit input of DequantizeAccumulateFp4 (tensor_scale: nvfp4 only).
struct Fp4Source {
  const uint8_t* codes = nullptr;
  const uint8_t* block_scales = nullptr;
  const float* tensor_scale = nullptr;
};

// acc[i] = (zero_first ? 0 : acc[i]) + x̂_0[i] + ... + x̂_{K-1}[i], each x̂
// exactly as DequantizeFp4, each sum rounded to float separately, in source
// order (as kernels/accumulate.h). REQUIRES: num_sources >= 0.
absl::Status DequantizeAccumulateFp4(const Fp4Source* sources, int num_sources,
                                     int64_t n, Fp4Format f, bool zero_first,
                                     float* acc);

namespace cuda {
// Device pointers (tensor_scale and `stats` too), queued on ctx's stream;
// `sources` is a host array of device pointers. Same contracts; counters
// exact, the double sums may differ from the CPU reference in the last bits
// (summation order), everything else is bit-identical.
absl::Status QuantizeFp4(gpu::Context& ctx, const float* x, int64_t n,
                         Fp4Format f, uint8_t* codes, uint8_t* block_scales,
                         float* tensor_scale, float* residual,
                         QuantizeStats* stats);
absl::Status DequantizeFp4(gpu::Context& ctx, const uint8_t* codes,
                           const uint8_t* block_scales,
                           const float* tensor_scale, int64_t n, Fp4Format f,
                           float* out);
absl::Status DequantizeAccumulateFp4(gpu::Context& ctx,
                                     const Fp4Source* sources, int num_sources,
                                     int64_t n, Fp4Format f, bool zero_first,
                                     float* acc);
}  // namespace cuda

namespace internal {
// Argument checks shared by the CPU and CUDA entry points (they read no
// data, so device pointers are fine).
absl::Status CheckQuantizeFp4Args(const float* x, int64_t n, Fp4Format f,
                                  const uint8_t* codes,
                                  const uint8_t* block_scales,
                                  const float* tensor_scale);
absl::Status CheckDequantizeFp4Args(const uint8_t* codes,
                                    const uint8_t* block_scales,
                                    const float* tensor_scale, int64_t n,
                                    Fp4Format f, const float* out);
absl::Status CheckAccumulateFp4Args(const Fp4Source* sources, int num_sources,
                                    int64_t n, Fp4Format f, const float* acc);
}  // namespace internal

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_QUANTIZE_FP4_H_
