// The GIFT whitening of one layer's gradient with a LayerFactor, whichever
// its kind (low-rank or full): the forward map with fused error feedback,
// the inverse map after communication, and the residual re-projection at a
// factor switch (DESIGN §2). Thin dispatch over kernels/whiten.h that owns
// the scratch space.
//
//   GiftTransformer tf;
//   RETURN_IF_ERROR(tf.Forward(f, grad, d_out, residual, whitened));  // W T +
//   R
//   ...
//   RETURN_IF_ERROR(tf.Inverse(f, averaged, d_out, grad));            // Û T⁻¹
//
// Thread safety: not thread-safe (one scratch buffer); use one per thread.
#ifndef GIFT_CLIENT_GIFT_TRANSFORM_H_
#define GIFT_CLIENT_GIFT_TRANSFORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/fp8_backend_transforms.h"
#include "client/versioned_factors.h"

namespace gift::client {

// The host implementation of GiftTransforms (fp8_backend_transforms.h).
class GiftTransformer : public GiftTransforms {
 public:
  // out (rows × d_in) = x T + add (add nullable; may alias out, not x).
  absl::Status Forward(const LayerFactor& f, const float* x, int64_t rows,
                       const float* add, float* out) override;
  // out = x T⁻¹. out must not alias x.
  absl::Status Inverse(const LayerFactor& f, const float* x, int64_t rows,
                       float* out) override;
  // residual ← (residual T_old⁻¹) T_new, in place.
  absl::Status Reproject(const LayerFactor& old_f, const LayerFactor& new_f,
                         float* residual, int64_t rows) override;

 private:
  float* Scratch(int64_t floats);

  std::vector<float> scratch_;
  std::vector<float> tmp_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_GIFT_TRANSFORM_H_
