// Checks shared by the quantized-allreduce rank workers: deterministic
// per-rank gradients (every rank can regenerate every other rank's input),
// the error bound the FP8 format implies for the two-phase allreduce, and a
// bucket hash to compare ranks bit for bit.
//
// Error bound (per element, Euclidean path, before averaging): rank p's
// quantization errs by at most rel·|x_p| + sub·s_p (rel = 2^-4 for E4M3,
// 2^-3 for E5M2: half an ulp of a 3- or 2-bit mantissa; sub = half the
// subnormal step, 2^-10 or 2^-17, times the scale s_p <= amax_p / fmax); the
// owner's FP32 sum A adds at most W·2^-24·A, and its re-quantization
// rel·|A| + sub·s_o with s_o <= Σ amax_p (1 + rel) / fmax. Divided by W.
//
//   double b = ElementBound(spec, xs, amaxes);
//
// Thread safety: pure functions.
#ifndef GIFT_TESTS_MULTIPROCESS_ALLREDUCE_CHECK_H_
#define GIFT_TESTS_MULTIPROCESS_ALLREDUCE_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/epoch_plan.h"
#include "client/versioned_factors.h"

namespace gift::multiprocess {

// Gradient element i of `layer` on `rank` in `step`: spread over 12 octaves
// so that boundary hits and subnormal codes occur.
float GradValue(int rank, int layer, int step, int64_t i);

// Fills the layers of `bucket` (plan order) with rank's step gradients; gaps
// get a sentinel pattern (GapValue).
void FillBucket(const client::EpochPlan& plan, int rank, int step,
                float* bucket);
float GapValue(int64_t i);

struct Fp8Bound {
  double rel = 0, sub = 0, fmax = 0;
};
Fp8Bound BoundOf(kernels::Fp8Format f);

// |result − mean(xs)| bound for one element; amax[p] is rank p's amax over
// the layer (an upper bound of its segment / block amax).
double ElementBound(const Fp8Bound& b, const std::vector<double>& xs,
                    const std::vector<double>& amax);

// Checks a Euclidean layer of `result` against every rank's inputs
// (world_size ranks, step). Returns "" or a description of the failures;
// `nonzero_err` counts elements that differ from the exact mean.
std::string CheckEuclidLayer(const client::EpochPlan& plan, int layer,
                             int world_size, int step, const float* result,
                             int64_t* nonzero_err);

// Checks a GIFT layer: rows of (result − mean) within ‖T⁻¹‖₂ times the
// row norm of the element bounds in whitened coordinates (first step of a
// fresh allreduce: residuals are zero), plus FP32 transform slack.
std::string CheckGiftLayer(const client::EpochPlan& plan, int layer,
                           const client::LayerFactor& f, int world_size,
                           int step, const float* result);

// FNV-1a of the bucket bytes, hex.
std::string HashHex(const float* data, int64_t n);

}  // namespace gift::multiprocess

#endif  // GIFT_TESTS_MULTIPROCESS_ALLREDUCE_CHECK_H_
