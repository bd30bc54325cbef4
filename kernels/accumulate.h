// Dequantize-and-accumulate: the chunk owner's step of the two-phase
// quantized allreduce (DESIGN §3). Several FP8 sources, each with its own
// scales, are summed into an FP32 accumulator in source order:
//
//   acc[i] = (zero_first ? 0 : acc[i]) + x̂_0[i] + x̂_1[i] + ... + x̂_{K-1}[i]
//
// with x̂_k[i] = float(code) * scale exactly as Dequantize, each product and
// each sum rounded to float separately (no fused multiply-add), so the CPU
// reference and the GPU kernel agree bit for bit and every rank that runs
// the same backend gets the same sum. A NaN scale (non-finite flag) makes the
// block's sums NaN.
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_KERNELS_ACCUMULATE_H_
#define GIFT_KERNELS_ACCUMULATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/quantize.h"

namespace gift::kernels {

// One FP8 input: n codes and NumScales(n, spec.block_size) scales.
struct Fp8Source {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
};

// REQUIRES: num_sources >= 0 (0 with zero_first clears acc).
absl::Status DequantizeAccumulate(const Fp8Source* sources, int num_sources,
                                  int64_t n, const QuantizeSpec& spec,
                                  bool zero_first, float* acc);

namespace cuda {
// `sources` is a host array whose pointers are device pointers.
absl::Status DequantizeAccumulate(gpu::Context& ctx, const Fp8Source* sources,
                                  int num_sources, int64_t n,
                                  const QuantizeSpec& spec, bool zero_first,
                                  float* acc);
}  // namespace cuda

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_ACCUMULATE_H_
