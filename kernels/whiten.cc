// CPU reference of the whitening transforms: float32 Eigen GEMMs over
// row-major maps. The low-rank path goes through the rows × r product only,
// never a d × d matrix.
#include "kernels/whiten.h"

#include <Eigen/Core>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::kernels {
namespace {

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;
using ConstMapVec = Eigen::Map<const Eigen::VectorXf>;

absl::Status NullError(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is null"));
}

bool Overlaps(const float* a, const float* b, int64_t n) {
  return a != nullptr && b != nullptr && a < b + n && b < a + n;
}

}  // namespace

int64_t WhitenWorkspaceFloats(int64_t rows, int64_t d, int64_t r) {
  if (rows < 0 || d < 0 || r < 0) return 0;
  return rows * (d + r);
}

namespace internal {

absl::Status CheckLowRankArgs(const float* x, int64_t rows,
                              const LowRankView& f, const float* out,
                              const float* workspace) {
  if (rows < 0 || f.d < 0 || f.r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative size: rows=", rows, " d=", f.d, " r=", f.r));
  }
  if (f.r > f.d) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank r=", f.r, " exceeds d=", f.d));
  }
  const bool has_data = rows > 0 && f.d > 0;
  if (has_data && x == nullptr) return NullError("x");
  if (has_data && out == nullptr) return NullError("out");
  if (f.r > 0 && f.d > 0 && f.u == nullptr) return NullError("factor u");
  if (f.r > 0 && f.c == nullptr) return NullError("factor c");
  if (has_data && f.r > 0 && workspace == nullptr)
    return NullError("workspace");
  return absl::OkStatus();
}

absl::Status CheckDenseArgs(const float* x, int64_t rows, int64_t d,
                            const float* t, const float* out) {
  if (rows < 0 || d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative size: rows=", rows, " d=", d));
  }
  if (rows == 0 || d == 0) return absl::OkStatus();
  if (x == nullptr) return NullError("x");
  if (t == nullptr) return NullError("t");
  if (out == nullptr) return NullError("out");
  if (Overlaps(x, out, rows * d)) {
    return absl::InvalidArgumentError("ApplyDense: out must not alias x");
  }
  return absl::OkStatus();
}

absl::Status CheckReprojectArgs(const float* residual, int64_t rows,
                                const LowRankView& old_inverse,
                                const LowRankView& new_forward,
                                const float* workspace) {
  if (old_inverse.d != new_forward.d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor dimensions differ: ", old_inverse.d, " vs ", new_forward.d));
  }
  RETURN_IF_ERROR(
      CheckLowRankArgs(residual, rows, old_inverse, residual, workspace));
  RETURN_IF_ERROR(
      CheckLowRankArgs(residual, rows, new_forward, residual, workspace));
  if (rows > 0 && old_inverse.d > 0 && workspace == nullptr) {
    return NullError("workspace");
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ApplyLowRank(const float* x, int64_t rows, const LowRankView& f,
                          const float* add, float* out, float* workspace) {
  RETURN_IF_ERROR(internal::CheckLowRankArgs(x, rows, f, out, workspace));
  const int64_t d = f.d;
  if (rows == 0 || d == 0) return absl::OkStatus();
  ConstMapMat xm(x, rows, d);
  // P = (X U) diag(c) is computed from x before out is written, so out may
  // alias x (or add).
  if (f.r > 0) {
    ConstMapMat um(f.u, d, f.r);
    MapMat p(workspace, rows, f.r);
    p.noalias() = xm * um;
    p *= ConstMapVec(f.c, f.r).asDiagonal();
  }
  MapMat om(out, rows, d);
  if (add != nullptr) {
    om = xm + ConstMapMat(add, rows, d);  // element-wise: aliasing is safe
  } else if (out != x) {
    om = xm;
  }
  if (f.r > 0) {
    om.noalias() += ConstMapMat(workspace, rows, f.r) *
                    ConstMapMat(f.u, d, f.r).transpose();
  }
  return absl::OkStatus();
}

absl::Status ApplyDense(const float* x, int64_t rows, int64_t d, const float* t,
                        const float* add, float* out) {
  RETURN_IF_ERROR(internal::CheckDenseArgs(x, rows, d, t, out));
  if (rows == 0 || d == 0) return absl::OkStatus();
  ConstMapMat xm(x, rows, d);
  ConstMapMat tm(t, d, d);
  MapMat om(out, rows, d);
  if (add == nullptr) {
    om.noalias() = xm * tm;
    return absl::OkStatus();
  }
  if (add != out) om = ConstMapMat(add, rows, d);
  om.noalias() += xm * tm;
  return absl::OkStatus();
}

absl::Status ReprojectResidual(float* residual, int64_t rows,
                               const LowRankView& old_inverse,
                               const LowRankView& new_forward,
                               float* workspace) {
  RETURN_IF_ERROR(internal::CheckReprojectArgs(residual, rows, old_inverse,
                                               new_forward, workspace));
  const int64_t d = old_inverse.d;
  if (rows == 0 || d == 0) return absl::OkStatus();
  float* moved = workspace;               // rows × d: R T_old⁻¹
  float* scratch = workspace + rows * d;  // rows × max(r)
  RETURN_IF_ERROR(
      ApplyLowRank(residual, rows, old_inverse, nullptr, moved, scratch));
  return ApplyLowRank(moved, rows, new_forward, nullptr, residual, scratch);
}

}  // namespace gift::kernels
