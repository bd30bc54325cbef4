// Scaled FP8 quantization of one tensor (or one segment of a fused bucket)
// with its telemetry, in one call.
//
// Numerics (DESIGN §2): per block of B consecutive elements (B = 0: the whole
// tensor is one block) the scale is s = amax(|x|) / fmax over the block's
// finite elements; codes q = fp8(x / s) (IEEE division, no reciprocal);
// x̂ = float(q) * s. An all-zero block has s = 1. When s underflows to 0 for a
// non-zero block, s = the smallest positive float. A block holding a NaN or an
// infinity gets the scale NaN: that is the non-finite flag that travels with
// the scales, so every x̂ of the block (and every sum it enters) is NaN, as
// the FP32 result would be non-finite. It is counted in stats, never hidden.
//
// In a non-finite block the codes are still those of the finite scale
// (amax over the block's finite elements; NaN encodes to 0x7F, +-Inf to
// +-max), and so are the residuals of its finite elements and the telemetry:
// only the transmitted scale carries the flag.
//
// Telemetry per call (QuantizeStats): n = all elements; nonfinite = NaN/Inf
// inputs; over finite elements only: upper = elements whose code is +-fmax,
// lower = non-zero elements whose code is +-0 or the smallest subnormal,
// err_sq = Σ(x̂−x)², x_sq = Σx², xhat_x = Σx̂·x (accumulated in double).
//
// Error feedback: when `residual` is non-null, residual[i] = x[i] − x̂[i]
// (0 for non-finite inputs). `residual` may alias `x`.
//
//   QuantizeSpec spec{Fp8Format::kE4M3, /*block_size=*/0};
//   std::vector<uint8_t> q(n);
//   std::vector<float> s(NumScales(n, spec.block_size));
//   QuantizeStats st;
//   RETURN_IF_ERROR(Quantize(x, n, spec, q.data(), s.data(), nullptr, &st));
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_KERNELS_QUANTIZE_H_
#define GIFT_KERNELS_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/fp8.h"

namespace gift::kernels {

struct QuantizeSpec {
  // Default: E4M3.
  Fp8Format format = Fp8Format::kE4M3;
  // Elements per scale block; 0 = one scale for the whole tensor.
  // Default: 0. REQUIRES: >= 0.
  int64_t block_size = 0;
};

// Plain data (also written by GPU kernels: keep it trivially copyable).
struct QuantizeStats {
  int64_t n = 0;
  int64_t upper = 0;
  int64_t lower = 0;
  int64_t nonfinite = 0;
  double err_sq = 0;
  double x_sq = 0;
  double xhat_x = 0;

  void Merge(const QuantizeStats& o);
  // ‖x̂ − x‖ / ‖x‖ (0 when x = 0).
  double RelL2() const;
  // x̂·x / (‖x̂‖‖x‖), with ‖x̂‖² = err_sq − x_sq + 2·xhat_x (1 when both 0).
  double Cosine() const;
};

// Number of scales for n elements: ceil(n / block_size), or 1 when
// block_size == 0 (also for n == 0).
int64_t NumScales(int64_t n, int64_t block_size);

// The scale of a block whose finite amax is `amax` (>= 0): amax / fmax, 1 for
// amax == 0, the smallest positive float (denormal) when amax / fmax
// underflows to 0.
float ScaleForAmax(float amax, Fp8Format f);

// REQUIRES: n >= 0; codes has n entries, scales NumScales(n, block) entries.
// stats (nullable) is overwritten, not merged.
absl::Status Quantize(const float* x, int64_t n, const QuantizeSpec& spec,
                      uint8_t* codes, float* scales, float* residual,
                      QuantizeStats* stats);

// out[i] = float(codes[i]) * scale of i's block.
absl::Status Dequantize(const uint8_t* codes, const float* scales, int64_t n,
                        const QuantizeSpec& spec, float* out);

namespace cuda {
// Device pointers; `stats` (nullable) is a device pointer to one
// QuantizeStats, overwritten. Counters are exact; the double sums may differ
// from the CPU reference in the last bits (summation order). Codes, scales
// and residuals are bit-identical to the CPU reference.
absl::Status Quantize(gpu::Context& ctx, const float* x, int64_t n,
                      const QuantizeSpec& spec, uint8_t* codes, float* scales,
                      float* residual, QuantizeStats* stats);
absl::Status Dequantize(gpu::Context& ctx, const uint8_t* codes,
                        const float* scales, int64_t n,
                        const QuantizeSpec& spec, float* out);
}  // namespace cuda

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_QUANTIZE_H_
