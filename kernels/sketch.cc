// CPU reference of the activation statistics: float32 Eigen GEMMs over
// row-major maps, the trace summed in double.
#include "kernels/sketch.h"

#include <Eigen/Core>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::kernels {
namespace {

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;

absl::Status NullError(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is null"));
}

// Σ‖a_i‖² in double: float squares would lose the small rows next to the
// large ones over a window of thousands of rows.
double SumOfSquares(const float* a, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = a[i];
    s += v * v;
  }
  return s;
}

}  // namespace

int64_t SketchWorkspaceFloats(int64_t rows, int64_t k) {
  if (rows < 0 || k < 0) return 0;
  return rows * k;
}

namespace internal {

absl::Status CheckSecondMomentArgs(const float* a, int64_t rows, int64_t d,
                                   const SketchAccumulator& acc) {
  if (rows < 0 || d <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size: rows=", rows, " (>= 0), d=", d, " (> 0)"));
  }
  if (acc.y == nullptr) return NullError("acc.y");
  if (acc.trace == nullptr) return NullError("acc.trace");
  if (acc.count == nullptr) return NullError("acc.count");
  if (rows > 0 && a == nullptr) return NullError("a");
  return absl::OkStatus();
}

absl::Status CheckSketchArgs(const float* a, int64_t rows, int64_t d,
                             const float* omega, int64_t k,
                             const SketchAccumulator& acc,
                             const float* workspace) {
  if (k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size: k=", k, " (> 0)"));
  }
  RETURN_IF_ERROR(CheckSecondMomentArgs(a, rows, d, acc));
  if (omega == nullptr) return NullError("omega");
  if (rows > 0 && workspace == nullptr) return NullError("workspace");
  return absl::OkStatus();
}

}  // namespace internal

absl::Status SketchAccumulate(const float* a, int64_t rows, int64_t d,
                              const float* omega, int64_t k,
                              const SketchAccumulator& acc, float* workspace) {
  RETURN_IF_ERROR(
      internal::CheckSketchArgs(a, rows, d, omega, k, acc, workspace));
  if (rows == 0) return absl::OkStatus();
  ConstMapMat am(a, rows, d);
  MapMat w(workspace, rows, k);
  w.noalias() = am * ConstMapMat(omega, d, k);
  MapMat(acc.y, d, k).noalias() += am.transpose() * w;
  *acc.trace += SumOfSquares(a, rows * d);
  *acc.count += rows;
  return absl::OkStatus();
}

absl::Status SecondMomentAccumulate(const float* a, int64_t rows, int64_t d,
                                    const SketchAccumulator& acc) {
  RETURN_IF_ERROR(internal::CheckSecondMomentArgs(a, rows, d, acc));
  if (rows == 0) return absl::OkStatus();
  ConstMapMat am(a, rows, d);
  MapMat(acc.y, d, d).noalias() += am.transpose() * am;
  *acc.trace += SumOfSquares(a, rows * d);
  *acc.count += rows;
  return absl::OkStatus();
}

}  // namespace gift::kernels
