// The one-step round trip of a gradient through a transform:
//   W̃ = Forward(W) (double) → float → quantize (FP8: kernels::Quantize,
//   scale per tensor or per block; 4-bit: kernels::QuantizeFp4 over the
//   row-major flattening, see codec.h) → dequantize → double →
//   Backward → Ŵ, and its error against W.
//
//   WireSpec spec(kernels::Fp8Format::kE4M3, 0);  // or WireSpec(kNvfp4)
//   ASSIGN_OR_RETURN(ErrorMetrics e, OneStepRoundTrip(w, *transform, spec));
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_FIDELITY_ROUND_TRIP_H_
#define GIFT_TOOLS_FIDELITY_ROUND_TRIP_H_

#include "absl/status/statusor.h"
#include "tools/fidelity/codec.h"
#include "tools/fidelity/matrix.h"
#include "tools/fidelity/metrics.h"
#include "tools/fidelity/transform.h"

namespace gift::fidelity {

// float(x) quantized and dequantized over its row-major flattening.
absl::StatusOr<RowMatrixd> QuantizeDequantize(const RowMatrixd& x,
                                              const WireSpec& spec);

// Ŵ = Backward(QuantizeDequantize(Forward(w))).
absl::StatusOr<RowMatrixd> RoundTrip(const RowMatrixd& w, const Transform& t,
                                     const WireSpec& spec);

// CompareTo(RoundTrip(w, t, spec), w).
absl::StatusOr<ErrorMetrics> OneStepRoundTrip(const RowMatrixd& w,
                                              const Transform& t,
                                              const WireSpec& spec);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_ROUND_TRIP_H_
