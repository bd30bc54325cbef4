#include "client/gift_transform.h"

#include <algorithm>
#include <cstring>

#include "common/status_macros.h"
#include "kernels/whiten.h"

namespace gift::client {
namespace {

kernels::LowRankView View(const LayerFactor& f, bool inverse) {
  return {f.u.data(), inverse ? f.c_inv.data() : f.c.data(), f.d_in, f.r};
}

}  // namespace

float* GiftTransformer::Scratch(int64_t floats) {
  if (static_cast<int64_t>(scratch_.size()) < floats) scratch_.resize(floats);
  return scratch_.data();
}

absl::Status GiftTransformer::Forward(const LayerFactor& f, const float* x,
                                      int64_t rows, const float* add,
                                      float* out) {
  if (f.kind == GiftTransform::kFull) {
    return kernels::ApplyDense(x, rows, f.d_in, f.t.data(), add, out);
  }
  return kernels::ApplyLowRank(
      x, rows, View(f, false), add, out,
      Scratch(kernels::WhitenWorkspaceFloats(rows, f.d_in, f.r)));
}

absl::Status GiftTransformer::Inverse(const LayerFactor& f, const float* x,
                                      int64_t rows, float* out) {
  if (f.kind == GiftTransform::kFull) {
    return kernels::ApplyDense(x, rows, f.d_in, f.t_inv.data(), nullptr, out);
  }
  return kernels::ApplyLowRank(
      x, rows, View(f, true), nullptr, out,
      Scratch(kernels::WhitenWorkspaceFloats(rows, f.d_in, f.r)));
}

absl::Status GiftTransformer::Reproject(const LayerFactor& old_f,
                                        const LayerFactor& new_f,
                                        float* residual, int64_t rows) {
  if (old_f.kind == GiftTransform::kLowRank &&
      new_f.kind == GiftTransform::kLowRank) {
    const int64_t r = std::max(old_f.r, new_f.r);
    return kernels::ReprojectResidual(
        residual, rows, View(old_f, true), View(new_f, false),
        Scratch(kernels::WhitenWorkspaceFloats(rows, old_f.d_in, r)));
  }
  // A switch that involves the dense transform: two explicit products.
  const size_t n = static_cast<size_t>(rows * old_f.d_in);
  tmp_.resize(n);
  RETURN_IF_ERROR(Inverse(old_f, residual, rows, tmp_.data()));
  if (new_f.kind == GiftTransform::kFull) {
    return Forward(new_f, tmp_.data(), rows, nullptr, residual);
  }
  std::memcpy(residual, tmp_.data(), n * sizeof(float));
  return Forward(new_f, residual, rows, nullptr, residual);
}

}  // namespace gift::client
