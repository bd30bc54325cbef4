// The vector-math part of an Fp8Backend (fp8_backend.h): the FP32
// elementwise steps between the codec's kernels and of the plain modes
// (addition, the division by W, NaN fill, bfloat16 conversion).
//
//   RETURN_IF_ERROR(math.AddInPlace(acc, residual, n));
//   RETURN_IF_ERROR(math.Divide(acc, n, static_cast<float>(world_size)));
//
// Bit-identity: every operation gives the same bits on every backend (IEEE
// single operations, no contraction).
//
// Thread safety: not thread-safe; one user at a time.
#ifndef GIFT_CLIENT_FP8_BACKEND_MATH_H_
#define GIFT_CLIENT_FP8_BACKEND_MATH_H_

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"

#if defined(__CUDACC__)
#define GIFT_MATH_HD __host__ __device__ inline
#else
#define GIFT_MATH_HD inline
#endif

namespace gift::client {

// VectorMath::AddCapped's release factor from sa = Σacc², sr = Σres²: the
// share of the residual that keeps ‖f·res‖ ≤ cap·‖acc‖, 1 when all of it
// does or when a sum is not finite.
GIFT_MATH_HD float ReleaseFactor(double sa, double sr, float cap) {
  const double c = cap;
  return sr > c * c * sa && sr <= DBL_MAX
             ? static_cast<float>(c * sqrt(sa / sr))
             : 1.0f;
}

class VectorMath {
 public:
  virtual ~VectorMath() = default;

  // acc[i] = acc[i] + x[i].
  virtual absl::Status AddInPlace(float* acc, const float* x, int64_t n) = 0;
  // Error feedback with a capped release: with sa = Σacc[i]², sr = Σres[i]²
  // (in double) and f = cap · √(sa / sr) as a float when sr > cap² · sa,
  // else 1: acc[i] = acc[i] + f · res[i], keep[i] = res[i] − f · res[i]
  // (each product and sum rounded once; f = ReleaseFactor). f = 1 gives
  // AddInPlace's bits and keep = 0; a non-finite sum or residual gives
  // f = 1. The order of the two sums is the backend's, so f (alone among
  // these operations) may differ in its last bit between backends unless
  // the sums are exact. REQUIRES: cap > 0; keep aliases neither.
  virtual absl::Status AddCapped(float* acc, const float* res, int64_t n,
                                 float cap, float* keep) = 0;
  // x[i] = x[i] / w.
  virtual absl::Status Divide(float* x, int64_t n, float w) = 0;
  // x[i] = quiet NaN (0x7FC00000).
  virtual absl::Status FillNaN(float* x, int64_t n) = 0;
  // Round to nearest even bfloat16; NaN stays NaN.
  virtual absl::Status ToBf16(const float* x, int64_t n, uint16_t* out) = 0;
  virtual absl::Status FromBf16(const uint16_t* x, int64_t n, float* out) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_MATH_H_
