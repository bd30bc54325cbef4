#include "tools/fidelity/round_trip.h"

#include <vector>

#include "common/status_macros.h"

namespace gift::fidelity {

absl::StatusOr<RowMatrixd> QuantizeDequantize(
    const RowMatrixd& x, const kernels::QuantizeSpec& spec) {
  const RowMatrixf xf = x.cast<float>();
  const int64_t n = xf.size();
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(kernels::NumScales(n, spec.block_size));
  RETURN_IF_ERROR(kernels::Quantize(xf.data(), n, spec, codes.data(),
                                    scales.data(), nullptr, nullptr));
  RowMatrixf out(x.rows(), x.cols());
  RETURN_IF_ERROR(
      kernels::Dequantize(codes.data(), scales.data(), n, spec, out.data()));
  return out.cast<double>();
}

absl::StatusOr<RowMatrixd> RoundTrip(const RowMatrixd& w, const Transform& t,
                                     const kernels::QuantizeSpec& spec) {
  ASSIGN_OR_RETURN(RowMatrixd q, QuantizeDequantize(t.Forward(w), spec));
  return t.Backward(q);
}

absl::StatusOr<ErrorMetrics> OneStepRoundTrip(
    const RowMatrixd& w, const Transform& t,
    const kernels::QuantizeSpec& spec) {
  ASSIGN_OR_RETURN(RowMatrixd w_hat, RoundTrip(w, t, spec));
  return CompareTo(w_hat, w);
}

}  // namespace gift::fidelity
