// Dense matrix functions for the `full` transform and the offline ablations
// (DESIGN §2): symmetric powers (A + shift·I)^p and the Cholesky factor.
//
//   ASSIGN_OR_RETURN(Eigen::MatrixXd t, SymmetricPower(a, tau, -0.5));
//   ASSIGN_OR_RETURN(Eigen::MatrixXd t_inv, SymmetricPower(a, tau, 0.5));
//
// Thread safety: pure functions.
#ifndef GIFT_LINALG_MATRIX_FUNCTION_H_
#define GIFT_LINALG_MATRIX_FUNCTION_H_

#include <Eigen/Dense>

#include "absl/status/statusor.h"

namespace gift::linalg {

// (A + shift·I)^power for symmetric A via its eigen-decomposition.
// INVALID_ARGUMENT if A + shift·I has an eigenvalue <= 0 and power < 0, or
// < 0 and power is fractional. Eigenvalues within d·eps·max|μ| of zero count
// as zero (so a rank-deficient PSD matrix has a square root but no inverse).
absl::StatusOr<Eigen::MatrixXd> SymmetricPower(const Eigen::MatrixXd& a,
                                               double shift, double power);

// Lower-triangular L with A + shift·I = L Lᵀ. INVALID_ARGUMENT when not
// positive definite.
absl::StatusOr<Eigen::MatrixXd> CholeskyLower(const Eigen::MatrixXd& a,
                                              double shift);

// Checks that `a` is square, finite, symmetric (max|A − Aᵀ| <= tol·max|A|)
// and positive semi-definite (smallest eigenvalue >= −tol·max eigenvalue).
// INVALID_ARGUMENT with what failed.
absl::Status CheckSymmetricPsd(const Eigen::MatrixXd& a, double tol = 1e-6);

namespace internal {
// f(μ) = μ^power for μ = λ + shift, the spectral step shared by the CPU and
// GPU SymmetricPower: eigenvalues within d·eps·max|μ| of zero count as zero
// (a rank-deficient PSD A keeps its square root), and INVALID_ARGUMENT when
// the power is not defined (μ <= 0 with power < 0, μ < 0 with a fractional
// power).
absl::StatusOr<Eigen::VectorXd> ShiftedEigenvaluePower(Eigen::VectorXd lambda,
                                                       double shift,
                                                       double power);
}  // namespace internal

}  // namespace gift::linalg

#endif  // GIFT_LINALG_MATRIX_FUNCTION_H_
