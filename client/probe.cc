#include "client/probe.h"

#include <cmath>
#include <vector>

#include "common/status_macros.h"
#include "kernels/quantize.h"

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

}  // namespace

absl::Status ProbeLayer(const float* grad, const BucketLayer& layer,
                        const LayerFactor& factor, GiftTransformer* transformer,
                        ProbeResult* result) {
  RETURN_IF_ERROR(factor.Validate(layer.d_in()));
  const int64_t n = layer.size(), rows = layer.d_out();
  const kernels::QuantizeSpec spec{layer.format, layer.block_size};
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(kernels::NumScales(n, spec.block_size));
  std::vector<float> a(n), b(n);
  RETURN_IF_ERROR(kernels::Quantize(grad, n, spec, codes.data(), scales.data(),
                                    nullptr, nullptr));
  RETURN_IF_ERROR(
      kernels::Dequantize(codes.data(), scales.data(), n, spec, a.data()));
  result->euclid_rel_l2 = RelL2(grad, a.data(), n);
  RETURN_IF_ERROR(transformer->Forward(factor, grad, rows, nullptr, a.data()));
  RETURN_IF_ERROR(kernels::Quantize(a.data(), n, spec, codes.data(),
                                    scales.data(), nullptr, nullptr));
  RETURN_IF_ERROR(
      kernels::Dequantize(codes.data(), scales.data(), n, spec, a.data()));
  RETURN_IF_ERROR(transformer->Inverse(factor, a.data(), rows, b.data()));
  result->gift_rel_l2 = RelL2(grad, b.data(), n);
  return absl::OkStatus();
}

}  // namespace gift::client
