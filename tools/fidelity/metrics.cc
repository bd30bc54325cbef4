#include "tools/fidelity/metrics.h"

#include <cmath>
#include <limits>

namespace gift::fidelity {

double RelativeError(const RowMatrixd& a, const RowMatrixd& b) {
  const double err = (a - b).norm();
  const double ref = b.norm();
  if (ref == 0) {
    return err == 0 ? 0 : std::numeric_limits<double>::infinity();
  }
  return err / ref;
}

ErrorMetrics CompareTo(const RowMatrixd& approx, const RowMatrixd& ref) {
  ErrorMetrics m;
  const RowMatrixd diff = approx - ref;
  m.rel_l2 = RelativeError(approx, ref);
  const double na = approx.norm(), nr = ref.norm();
  if (na == 0 && nr == 0) {
    m.cos = 1;
  } else if (na == 0 || nr == 0) {
    m.cos = 0;
  } else {
    m.cos = approx.cwiseProduct(ref).sum() / (na * nr);
  }
  m.max_err = diff.cwiseAbs().maxCoeff();
  m.mse = diff.squaredNorm() / static_cast<double>(diff.size());
  return m;
}

}  // namespace gift::fidelity
