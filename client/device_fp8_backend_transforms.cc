#include "client/device_fp8_backend_transforms.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "client/device_ops.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::client {
namespace {

cudaStream_t StreamOf(gpu::Context* ctx) {
  return static_cast<cudaStream_t>(ctx->stream());
}

}  // namespace

DeviceGiftTransforms::DeviceGiftTransforms(gpu::Context* ctx,
                                           BackendMemory* memory)
    : ctx_(ctx),
      memory_(memory),
      scratch_(memory->NewBuffer()),
      tmp_(memory->NewBuffer()) {}

absl::Status DeviceGiftTransforms::BeginStep() {
  ++steps_;
  bool stale = false;
  for (const auto& [key, d] : factors_) stale |= d.used < steps_ - 1;
  if (stale) {
    RETURN_IF_ERROR(ctx_->Synchronize());  // a failed step may be in flight
    std::erase_if(factors_,
                  [&](const auto& e) { return e.second.used < steps_ - 1; });
  }
  return absl::OkStatus();
}

absl::Status DeviceGiftTransforms::Forward(const LayerFactor& f, const float* x,
                                           int64_t rows, const float* add,
                                           float* out) {
  ASSIGN_OR_RETURN(DeviceFactor * d, Upload(f));
  if (f.kind == GiftTransform::kFull) {
    return kernels::cuda::ApplyDense(*ctx_, x, rows, f.d_in, d->t->floats(),
                                     add, out);
  }
  ASSIGN_OR_RETURN(float* ws, Scratch(rows, f.d_in, f.r));
  return kernels::cuda::ApplyLowRank(*ctx_, x, rows, View(*d, f, false), add,
                                     out, ws);
}

absl::Status DeviceGiftTransforms::Inverse(const LayerFactor& f, const float* x,
                                           int64_t rows, float* out) {
  ASSIGN_OR_RETURN(DeviceFactor * d, Upload(f));
  if (f.kind == GiftTransform::kFull) {
    return kernels::cuda::ApplyDense(*ctx_, x, rows, f.d_in, d->t_inv->floats(),
                                     nullptr, out);
  }
  ASSIGN_OR_RETURN(float* ws, Scratch(rows, f.d_in, f.r));
  return kernels::cuda::ApplyLowRank(*ctx_, x, rows, View(*d, f, true), nullptr,
                                     out, ws);
}

absl::Status DeviceGiftTransforms::Reproject(const LayerFactor& old_f,
                                             const LayerFactor& new_f,
                                             float* residual, int64_t rows) {
  if (old_f.kind == GiftTransform::kLowRank &&
      new_f.kind == GiftTransform::kLowRank) {
    ASSIGN_OR_RETURN(DeviceFactor * o, Upload(old_f));
    ASSIGN_OR_RETURN(DeviceFactor * n, Upload(new_f));
    ASSIGN_OR_RETURN(float* ws,
                     Scratch(rows, old_f.d_in, std::max(old_f.r, new_f.r)));
    return kernels::cuda::ReprojectResidual(*ctx_, residual, rows,
                                            View(*o, old_f, true),
                                            View(*n, new_f, false), ws);
  }
  const size_t bytes = static_cast<size_t>(rows * old_f.d_in) * sizeof(float);
  RETURN_IF_ERROR(tmp_->Grow(bytes));
  RETURN_IF_ERROR(Inverse(old_f, residual, rows, tmp_->floats()));
  if (new_f.kind == GiftTransform::kFull) {
    return Forward(new_f, tmp_->floats(), rows, nullptr, residual);
  }
  if (bytes > 0) {
    GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(residual, tmp_->data(), bytes,
                                              cudaMemcpyDeviceToDevice,
                                              StreamOf(ctx_)));
  }
  return Forward(new_f, residual, rows, nullptr, residual);
}

absl::StatusOr<float*> DeviceGiftTransforms::Scratch(int64_t rows, int64_t d,
                                                     int64_t r) {
  const int64_t floats = kernels::WhitenWorkspaceFloats(rows, d, r);
  RETURN_IF_ERROR(scratch_->Grow(std::max<int64_t>(floats, 1) * 4));
  return scratch_->floats();
}

kernels::LowRankView DeviceGiftTransforms::View(DeviceFactor& d,
                                                const LayerFactor& f,
                                                bool inverse) {
  return {d.u->floats(), inverse ? d.c_inv->floats() : d.c->floats(), f.d_in,
          f.r};
}

absl::Status DeviceGiftTransforms::Put(std::unique_ptr<Fp8Buffer>& dst,
                                       const std::vector<float>& src) {
  dst = memory_->NewBuffer();
  RETURN_IF_ERROR(dst->Resize(src.size() * sizeof(float)));
  if (!src.empty()) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data(), src.data(), src.size() * sizeof(float),
                        cudaMemcpyHostToDevice, StreamOf(ctx_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceGiftTransforms::DeviceFactor*>
DeviceGiftTransforms::Upload(const LayerFactor& f) {
  auto it = factors_.find(&f);
  if (it != factors_.end() && it->second.version == f.version &&
      it->second.host_u == f.u.data() && it->second.host_t == f.t.data()) {
    it->second.used = steps_;
    return &it->second;
  }
  if (it != factors_.end()) {
    // A different factor at a recycled address: its arrays may still be
    // read by queued work.
    RETURN_IF_ERROR(ctx_->Synchronize());
    factors_.erase(it);
  }
  DeviceFactor& d = factors_[&f];
  d.used = steps_;
  d.version = f.version;
  d.host_u = f.u.data();
  d.host_t = f.t.data();
  RETURN_IF_ERROR(Put(d.u, f.u));
  RETURN_IF_ERROR(Put(d.c, f.c));
  RETURN_IF_ERROR(Put(d.c_inv, f.c_inv));
  RETURN_IF_ERROR(Put(d.t, f.t));
  RETURN_IF_ERROR(Put(d.t_inv, f.t_inv));
  return &d;
}

DeviceLayerProbe::DeviceLayerProbe(gpu::Context* ctx, BackendMemory* memory,
                                   GiftTransforms* transforms)
    : ctx_(ctx),
      transforms_(transforms),
      codes_(memory->NewBuffer()),
      scales_(memory->NewBuffer()),
      a_(memory->NewBuffer()),
      b_(memory->NewBuffer()),
      sums_(memory->NewBuffer()) {}

absl::Status DeviceLayerProbe::RoundTrip(const float* x, int64_t n,
                                         const BucketLayer& layer, float* out) {
  if (layer.format.is_fp4()) {
    const kernels::Fp4Format f = layer.format.fp4();
    // Block scales, then the (4-byte aligned) tensor scale.
    const int64_t blocks = (kernels::Fp4NumBlocks(n, f) + 3) / 4 * 4;
    RETURN_IF_ERROR(codes_->Grow(kernels::Fp4PackedBytes(n)));
    RETURN_IF_ERROR(scales_->Grow(blocks + 4));
    uint8_t* q = codes_->u8();
    uint8_t* bs = scales_->u8();
    float* ts = reinterpret_cast<float*>(bs + blocks);
    RETURN_IF_ERROR(kernels::cuda::QuantizeFp4(*ctx_, x, n, f, q, bs, ts,
                                               nullptr, nullptr));
    return kernels::cuda::DequantizeFp4(*ctx_, q, bs, ts, n, f, out);
  }
  const kernels::QuantizeSpec spec{layer.format.fp8(), layer.block_size};
  RETURN_IF_ERROR(codes_->Grow(n));
  RETURN_IF_ERROR(scales_->Grow(kernels::NumScales(n, spec.block_size) * 4));
  uint8_t* q = codes_->u8();
  float* s = scales_->floats();
  RETURN_IF_ERROR(
      kernels::cuda::Quantize(*ctx_, x, n, spec, q, s, nullptr, nullptr));
  return kernels::cuda::Dequantize(*ctx_, q, s, n, spec, out);
}

absl::Status DeviceLayerProbe::Probe(const float* grad,
                                     const BucketLayer& layer,
                                     const LayerFactor& factor,
                                     ProbeResult* result) {
  RETURN_IF_ERROR(factor.Validate(layer.d_in()));
  const int64_t n = layer.size(), rows = layer.d_out();
  RETURN_IF_ERROR(a_->Grow(n * 4));
  RETURN_IF_ERROR(b_->Grow(n * 4));
  RETURN_IF_ERROR(sums_->Grow(4 * sizeof(double)));
  RETURN_IF_ERROR(sums_->Zero());
  float* a = a_->floats();
  float* b = b_->floats();
  auto* sums = static_cast<double*>(sums_->data());
  RETURN_IF_ERROR(RoundTrip(grad, n, layer, a));
  RETURN_IF_ERROR(device::AddSquaredError(*ctx_, grad, a, n, sums));
  RETURN_IF_ERROR(transforms_->Forward(factor, grad, rows, nullptr, a));
  RETURN_IF_ERROR(RoundTrip(a, n, layer, a));
  RETURN_IF_ERROR(transforms_->Inverse(factor, a, rows, b));
  RETURN_IF_ERROR(device::AddSquaredError(*ctx_, grad, b, n, sums + 2));
  double h[4];
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      h, sums, sizeof(h), cudaMemcpyDeviceToHost, StreamOf(ctx_)));
  RETURN_IF_ERROR(ctx_->Synchronize());
  result->euclid_rel_l2 = h[1] > 0 ? std::sqrt(h[0] / h[1]) : 0.0;
  result->gift_rel_l2 = h[3] > 0 ? std::sqrt(h[2] / h[3]) : 0.0;
  return absl::OkStatus();
}

}  // namespace gift::client
