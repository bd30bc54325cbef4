#include "tools/fidelity/round_trip.h"

#include <vector>

#include "common/status_macros.h"

namespace gift::fidelity {

absl::StatusOr<RowMatrixd> QuantizeDequantize(const RowMatrixd& x,
                                              const WireSpec& spec) {
  const RowMatrixf xf = x.cast<float>();
  const int64_t n = xf.size();
  Encoded e;
  RETURN_IF_ERROR(Encode(xf.data(), n, spec, nullptr, &e));
  RowMatrixf out(x.rows(), x.cols());
  RETURN_IF_ERROR(Decode(e, n, spec, out.data()));
  return out.cast<double>();
}

absl::StatusOr<RowMatrixd> RoundTrip(const RowMatrixd& w, const Transform& t,
                                     const WireSpec& spec) {
  ASSIGN_OR_RETURN(RowMatrixd q, QuantizeDequantize(t.Forward(w), spec));
  return t.Backward(q);
}

absl::StatusOr<ErrorMetrics> OneStepRoundTrip(const RowMatrixd& w,
                                              const Transform& t,
                                              const WireSpec& spec) {
  ASSIGN_OR_RETURN(RowMatrixd w_hat, RoundTrip(w, t, spec));
  return CompareTo(w_hat, w);
}

}  // namespace gift::fidelity
