#include "client/probe.h"

#include <cmath>
#include <vector>

#include "common/status_macros.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::client {
namespace {

double RelL2(const float* x, const float* xhat, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(xhat[i]) - x[i];
    err += d * d;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return ref > 0 ? std::sqrt(err / ref) : 0.0;
}

// out = x̂ of x (the whole layer) in the layer's wire format (FP8: with its
// scale granularity).
absl::Status RoundTrip(const float* x, int64_t n, const BucketLayer& layer,
                       float* out) {
  if (layer.format.is_fp4()) {
    const kernels::Fp4Format f = layer.format.fp4();
    std::vector<uint8_t> codes(kernels::Fp4PackedBytes(n));
    std::vector<uint8_t> scales(kernels::Fp4NumBlocks(n, f));
    float tensor_scale = 1.0f;
    RETURN_IF_ERROR(kernels::QuantizeFp4(x, n, f, codes.data(), scales.data(),
                                         &tensor_scale, nullptr, nullptr));
    return kernels::DequantizeFp4(codes.data(), scales.data(), &tensor_scale, n,
                                  f, out);
  }
  const kernels::QuantizeSpec spec{layer.format.fp8(), layer.block_size};
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(kernels::NumScales(n, spec.block_size));
  RETURN_IF_ERROR(kernels::Quantize(x, n, spec, codes.data(), scales.data(),
                                    nullptr, nullptr));
  return kernels::Dequantize(codes.data(), scales.data(), n, spec, out);
}

}  // namespace

absl::Status ProbeLayer(const float* grad, const BucketLayer& layer,
                        const LayerFactor& factor, GiftTransformer* transformer,
                        ProbeResult* result) {
  RETURN_IF_ERROR(factor.Validate(layer.d_in()));
  const int64_t n = layer.size(), rows = layer.d_out();
  std::vector<float> a(n), b(n);
  RETURN_IF_ERROR(RoundTrip(grad, n, layer, a.data()));
  result->euclid_rel_l2 = RelL2(grad, a.data(), n);
  RETURN_IF_ERROR(transformer->Forward(factor, grad, rows, nullptr, a.data()));
  RETURN_IF_ERROR(RoundTrip(a.data(), n, layer, a.data()));
  RETURN_IF_ERROR(transformer->Inverse(factor, a.data(), rows, b.data()));
  result->gift_rel_l2 = RelL2(grad, b.data(), n);
  return absl::OkStatus();
}

}  // namespace gift::client
