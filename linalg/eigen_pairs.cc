// Top-r symmetric eigenpairs via LAPACK dsyevr (MRRR, index range 'I'): it
// computes only the wanted eigenvectors, which at r = 32 of d = 4096 is far
// cheaper than a full decomposition. All eigenpairs via dsyevd.
#include "linalg/eigen_pairs.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gift::linalg {
namespace {

bool LowerTriangleFinite(const Eigen::MatrixXd& a) {
  for (Eigen::Index j = 0; j < a.cols(); ++j) {
    for (Eigen::Index i = j; i < a.rows(); ++i) {
      if (!std::isfinite(a(i, j))) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<EigenPairs> TopEigenpairs(const Eigen::MatrixXd& a, int r) {
  const Eigen::Index n = a.rows();
  if (a.cols() != n || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopEigenpairs: need a non-empty square matrix, got ",
                     a.rows(), " x ", a.cols()));
  }
  if (r < 1 || r > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopEigenpairs: r=", r, " not in [1, ", n, "]"));
  }
  if (!LowerTriangleFinite(a)) {
    return absl::InvalidArgumentError("TopEigenpairs: non-finite entry");
  }
  Eigen::MatrixXd work = a;  // dsyevr overwrites its input
  Eigen::VectorXd w(n);
  Eigen::MatrixXd z(n, r);
  std::vector<lapack_int> isuppz(2 * static_cast<size_t>(r));
  lapack_int found = 0;
  const lapack_int ln = static_cast<lapack_int>(n);
  const lapack_int info = LAPACKE_dsyevr(
      LAPACK_COL_MAJOR, 'V', 'I', 'L', ln, work.data(), ln, 0.0, 0.0,
      ln - r + 1, ln, 0.0, &found, w.data(), z.data(), ln, isuppz.data());
  if (info != 0 || found != r) {
    return absl::InternalError(
        absl::StrCat("LAPACKE_dsyevr failed: info=", info, ", found ", found,
                     " of ", r, " eigenpairs"));
  }
  // dsyevr returns ascending order; the contract is descending.
  EigenPairs e;
  e.lambda = w.head(r).reverse();
  e.u = z.rowwise().reverse();
  return e;
}

absl::StatusOr<EigenPairs> AllEigenpairs(const Eigen::MatrixXd& a) {
  const Eigen::Index n = a.rows();
  if (a.cols() != n || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllEigenpairs: need a non-empty square matrix, got ",
                     a.rows(), " x ", a.cols()));
  }
  if (!LowerTriangleFinite(a)) {
    return absl::InvalidArgumentError("AllEigenpairs: non-finite entry");
  }
  // Divide and conquer (dsyevd) is several times faster than dsyevr when
  // every eigenvector is wanted (the dense matrix functions need them all).
  Eigen::MatrixXd z = a;  // overwritten with the eigenvectors
  Eigen::VectorXd w(n);
  const lapack_int ln = static_cast<lapack_int>(n);
  const lapack_int info =
      LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', ln, z.data(), ln, w.data());
  if (info != 0) {
    return absl::InternalError(
        absl::StrCat("LAPACKE_dsyevd failed: info=", info));
  }
  EigenPairs e;
  e.lambda = w.reverse();
  e.u = z.rowwise().reverse();
  return e;
}

LowRankFactor MakeLowRankFactor(const EigenPairs& e, double trace, int64_t d,
                                const FactorDamping& damping) {
  const int64_t r = e.lambda.size();
  const double tail = d > r ? (trace - e.lambda.sum()) / (d - r) : 0.0;
  const double floor = damping.floor_coef * trace / d;
  LowRankFactor f;
  f.u = e.u;
  f.sigma2 = std::max(tail, floor);
  f.lambda.resize(r);
  f.c.resize(r);
  f.c_inv.resize(r);
  for (int64_t j = 0; j < r; ++j) {
    const double lambda = e.lambda(j);
    // Clipped: never amplify a direction above its floor. Unclipped: λ as
    // is, except λ <= 0 (rank-deficient A) which would make c infinite.
    const double used = damping.clip    ? std::max(lambda, f.sigma2)
                        : lambda <= 0.0 ? f.sigma2
                                        : lambda;
    f.lambda(j) = used;
    f.c(j) = std::sqrt(f.sigma2 / used) - 1.0;
    f.c_inv(j) = std::sqrt(used / f.sigma2) - 1.0;
  }
  return f;
}

}  // namespace gift::linalg
