#include "tools/fidelity/nystrom_sketch.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/sketch.h"
#include "linalg/nystrom.h"

namespace gift::fidelity {

absl::StatusOr<SketchedFactor> SketchEigenpairs(const RowMatrixf& x, int r,
                                                const Eigen::MatrixXd* u_prev,
                                                uint64_t seed, int oversample) {
  const int64_t d = x.cols();
  const int64_t k = static_cast<int64_t>(r) + oversample;
  if (x.rows() < 1 || r < 1 || k > d) {
    return absl::InvalidArgumentError(
        absl::StrCat("Nyström rank ", r, " needs r + ", oversample,
                     " <= d_in = ", d, " and at least one activation row"));
  }
  if (u_prev != nullptr && (u_prev->rows() != d || u_prev->cols() > k)) {
    return absl::InvalidArgumentError("warm-start factor has the wrong shape");
  }
  const Eigen::MatrixXd omega = linalg::MakeTestMatrix(d, k, u_prev, seed);
  // The published Ω is float32; reconstruct with exactly what was sketched.
  const RowMatrixf omega_f = omega.cast<float>();
  RowMatrixf y = RowMatrixf::Zero(d, k);
  double trace = 0;
  int64_t count = 0;
  kernels::SketchAccumulator acc{y.data(), &trace, &count};
  std::vector<float> workspace(kernels::SketchWorkspaceFloats(
      std::min<int64_t>(kSketchBatchRows, x.rows()), k));
  for (int64_t row = 0; row < x.rows(); row += kSketchBatchRows) {
    const int64_t rows = std::min<int64_t>(kSketchBatchRows, x.rows() - row);
    RETURN_IF_ERROR(kernels::SketchAccumulate(
        x.data() + row * d, rows, d, omega_f.data(), k, acc, workspace.data()));
  }
  const Eigen::MatrixXd y_mean = y.cast<double>() / static_cast<double>(count);
  SketchedFactor out;
  ASSIGN_OR_RETURN(
      out.pairs, linalg::NystromEigenpairs(y_mean, omega_f.cast<double>(), r));
  out.trace = trace / static_cast<double>(count);
  return out;
}

}  // namespace gift::fidelity
