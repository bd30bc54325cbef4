// In-process simulation of the communication core of DESIGN §3 for R
// workers, to measure what the allreduced average loses in FP8 or 4-bit
// (codec.h: every quantization below is Encode, every dequantization
// Decode/DecodeAccumulate of the chosen format):
//
//   per step, each worker w: Ũ_w = float(Forward(g_w)) (+ R_w with error
//   feedback); the flattened Ũ_w is split into R contiguous chunks, each
//   quantized with its own scale(s) (EF keeps R_w = Ũ_w − deq(q));
//   chunk owner j: dequantize the R pieces and accumulate in FP32
//   (kernels::DequantizeAccumulate[Fp4]), add its own residual (EF),
//   re-quantize the sum with a fresh scale (EF keeps the new residual),
//   "all-gather"; every worker: dequantize, divide by R once in FP32, Backward
//   → ĝ.
//
// Error feedback is the same for every method, the Euclidean baseline
// included (euclid with error_feedback = true is "Euclidean with EF").
// Every worker computes the same ĝ, so it is computed once. Reported per
// step against the exact mean ḡ = Σ_w g_w / R: RelL2, Cos, and the drift
// ‖Σ_t ĝ_t − Σ_t ḡ_t‖ / ‖Σ_t ḡ_t‖.
//
//   ASSIGN_OR_RETURN(std::vector<WorkerStepMetrics> m,
//                    SimulateWorkers(grads, shape, *transform, spec, true));
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_FIDELITY_WORKERS_H_
#define GIFT_TOOLS_FIDELITY_WORKERS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/fidelity/codec.h"
#include "tools/fidelity/transform.h"

namespace gift::fidelity {

struct WorkerShape {
  int64_t steps = 1;
  int64_t workers = 1;
  int64_t d_out = 0;
  int64_t d_in = 0;
};

struct WorkerStepMetrics {
  int64_t step = 0;
  double rel_l2 = 0;
  double cos = 1;
  double drift = 0;
};

// Bytes one worker sends per step, ring-equivalent: (R − 1)/R of the
// encoded chunks (codes and scales, EncodedBytes) in each of the two
// phases; a plain FP32 ring allreduce sends 2 (R − 1)/R · N · 4 bytes.
struct WireBytes {
  double fp8 = 0;  // in the chosen format (the name predates 4-bit)
  double fp32 = 0;
};

// Chunk j of n elements split among `workers`: [Begin(j), Begin(j + 1)).
int64_t ChunkBegin(int64_t n, int64_t workers, int64_t j);

WireBytes WireBytesPerWorker(int64_t n, int64_t workers, const WireSpec& spec);
// FP8 with `block_size` elements per scale (0 = one per chunk).
WireBytes WireBytesPerWorker(int64_t n, int64_t workers, int64_t block_size);

// grads: steps × workers × d_out × d_in floats (C order).
// REQUIRES: workers >= 1, steps >= 1, d_out·d_in >= workers.
absl::StatusOr<std::vector<WorkerStepMetrics>> SimulateWorkers(
    const float* grads, const WorkerShape& shape, const Transform& t,
    const WireSpec& spec, bool error_feedback);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_WORKERS_H_
