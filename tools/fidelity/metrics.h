// Error of an approximation Ŵ of a reference W (paper Eq. 21 and the
// companions the reports show).
//
//   ErrorMetrics e = CompareTo(w_hat, w);  // e.rel_l2, e.cos, ...
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_FIDELITY_METRICS_H_
#define GIFT_TOOLS_FIDELITY_METRICS_H_

#include "tools/fidelity/matrix.h"

namespace gift::fidelity {

struct ErrorMetrics {
  // ‖Ŵ − W‖_F / ‖W‖_F (0 when both are zero, +inf when only W is).
  double rel_l2 = 0;
  // ⟨Ŵ, W⟩ / (‖Ŵ‖_F ‖W‖_F) (1 when both are zero, 0 when one is).
  double cos = 1;
  // max |Ŵ − W|.
  double max_err = 0;
  // mean (Ŵ − W)².
  double mse = 0;
};

// REQUIRES: same shape, non-empty.
ErrorMetrics CompareTo(const RowMatrixd& approx, const RowMatrixd& ref);

// ‖a − b‖_F / ‖b‖_F with the same zero conventions as rel_l2.
double RelativeError(const RowMatrixd& a, const RowMatrixd& b);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_METRICS_H_
