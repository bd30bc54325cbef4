// The GIFT-transform part of an Fp8Backend (fp8_backend.h): a GIFT layer's
// forward map with fused error feedback, its inverse, and the re-projection
// of a worker residual at a factor switch, with the semantics of
// gift_transform.h (GiftTransformer is the host implementation).
//
//   RETURN_IF_ERROR(tf.Forward(f, grad, d_out, residual, whitened));  // W T+R
//   ...
//   RETURN_IF_ERROR(tf.Inverse(f, averaged, d_out, grad));            // Û T⁻¹
//
// Backends agree to GEMM rounding only.
//
// Thread safety: not thread-safe (implementations keep scratch space).
#ifndef GIFT_CLIENT_FP8_BACKEND_TRANSFORMS_H_
#define GIFT_CLIENT_FP8_BACKEND_TRANSFORMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "client/versioned_factors.h"

namespace gift::client {

class GiftTransforms {
 public:
  virtual ~GiftTransforms() = default;

  // out (rows × d_in) = x T + add (add nullable; may alias out, not x).
  virtual absl::Status Forward(const LayerFactor& f, const float* x,
                               int64_t rows, const float* add, float* out) = 0;
  // out = x T⁻¹. out must not alias x.
  virtual absl::Status Inverse(const LayerFactor& f, const float* x,
                               int64_t rows, float* out) = 0;
  // residual ← (residual T_old⁻¹) T_new, in place.
  virtual absl::Status Reproject(const LayerFactor& old_f,
                                 const LayerFactor& new_f, float* residual,
                                 int64_t rows) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_TRANSFORMS_H_
