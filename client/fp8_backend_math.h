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

#include <cstdint>

#include "absl/status/status.h"

namespace gift::client {

class VectorMath {
 public:
  virtual ~VectorMath() = default;

  // acc[i] = acc[i] + x[i].
  virtual absl::Status AddInPlace(float* acc, const float* x, int64_t n) = 0;
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
