// Symmetric matrix functions via LAPACK: powers through the full
// eigen-decomposition (dsyevr), the Cholesky factor through dpotrf.
#include "linalg/matrix_function.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "linalg/eigen_pairs.h"

namespace gift::linalg {
namespace {

absl::Status CheckSquareFinite(const Eigen::MatrixXd& a, const char* who) {
  if (a.rows() != a.cols() || a.rows() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": need a non-empty square matrix, got ", a.rows(),
                     " x ", a.cols()));
  }
  if (!a.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": non-finite entry"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::StatusOr<Eigen::VectorXd> ShiftedEigenvaluePower(Eigen::VectorXd lambda,
                                                       double shift,
                                                       double power) {
  Eigen::VectorXd mu = lambda.array() + shift;
  const double zero_tol = static_cast<double>(mu.size()) *
                          std::numeric_limits<double>::epsilon() *
                          mu.cwiseAbs().maxCoeff();
  for (double& m : mu) {
    if (std::abs(m) <= zero_tol) m = 0.0;
  }
  const double min_mu = mu.minCoeff();
  const bool fractional = power != std::floor(power);
  if ((power < 0 && min_mu <= 0) || (fractional && min_mu < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SymmetricPower: A + shift·I has eigenvalue ", min_mu,
                     ", not allowed with power ", power));
  }
  return mu.unaryExpr([power](double m) { return std::pow(m, power); }).eval();
}

}  // namespace internal

absl::StatusOr<Eigen::MatrixXd> SymmetricPower(const Eigen::MatrixXd& a,
                                               double shift, double power) {
  if (absl::Status s = CheckSquareFinite(a, "SymmetricPower"); !s.ok()) {
    return s;
  }
  if (!std::isfinite(shift) || !std::isfinite(power)) {
    return absl::InvalidArgumentError(
        "SymmetricPower: non-finite shift or power");
  }
  absl::StatusOr<EigenPairs> e = AllEigenpairs(a);
  if (!e.ok()) return e.status();
  absl::StatusOr<Eigen::VectorXd> f =
      internal::ShiftedEigenvaluePower(e->lambda, shift, power);
  if (!f.ok()) return f.status();
  Eigen::MatrixXd out = (e->u * f->asDiagonal()) * e->u.transpose();
  return (0.5 * (out + out.transpose())).eval();
}

absl::StatusOr<Eigen::MatrixXd> CholeskyLower(const Eigen::MatrixXd& a,
                                              double shift) {
  if (absl::Status s = CheckSquareFinite(a, "CholeskyLower"); !s.ok()) {
    return s;
  }
  const lapack_int n = static_cast<lapack_int>(a.rows());
  Eigen::MatrixXd l = a;
  l.diagonal().array() += shift;
  const lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, l.data(), n);
  if (info > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CholeskyLower: A + shift·I is not positive definite (leading minor ",
        info, ")"));
  }
  if (info < 0) {
    return absl::InternalError(
        absl::StrCat("LAPACKE_dpotrf: bad argument ", -info));
  }
  return Eigen::MatrixXd(l.triangularView<Eigen::Lower>());
}

absl::Status CheckSymmetricPsd(const Eigen::MatrixXd& a, double tol) {
  if (absl::Status s = CheckSquareFinite(a, "CheckSymmetricPsd"); !s.ok()) {
    return s;
  }
  const double scale = a.cwiseAbs().maxCoeff();
  const double asym = (a - a.transpose()).cwiseAbs().maxCoeff();
  if (asym > tol * scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckSymmetricPsd: not symmetric: max|A − Aᵀ| = ", asym,
                     " > ", tol, " · max|A| = ", tol * scale));
  }
  if (scale == 0) return absl::OkStatus();
  Eigen::MatrixXd work = a;
  Eigen::VectorXd w(a.rows());
  const lapack_int n = static_cast<lapack_int>(a.rows());
  const lapack_int info =
      LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', n, work.data(), n, w.data());
  if (info != 0) {
    return absl::InternalError(
        absl::StrCat("LAPACKE_dsyevd failed: info=", info));
  }
  const double lo = w.minCoeff(), hi = std::max(w.maxCoeff(), 0.0);
  if (lo < -tol * hi || (hi == 0 && lo < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CheckSymmetricPsd: not positive semi-definite: smallest eigenvalue ",
        lo, " < −", tol, " · largest ", hi));
  }
  return absl::OkStatus();
}

}  // namespace gift::linalg
