// Symmetric eigen-decomposition and the GIFT low-rank factor built from it
// (DESIGN §2). Double precision throughout; CPU via LAPACK (dsyevr), GPU
// via cuSOLVER (linalg/cuda_linalg.h).
//
//   ASSIGN_OR_RETURN(EigenPairs e, TopEigenpairs(a, 32));
//   LowRankFactor f = MakeLowRankFactor(e, a.trace(), a.rows(),
//                                       FactorDamping::Clipped(1.0));
//   // f.c whitens (X T), f.c_inv maps back (X T⁻¹).
//
// Thread safety: pure functions.
#ifndef GIFT_LINALG_EIGEN_PAIRS_H_
#define GIFT_LINALG_EIGEN_PAIRS_H_

#include <Eigen/Dense>

#include "absl/status/statusor.h"

namespace gift::linalg {

// Eigenpairs in descending order of eigenvalue; u is d × r with orthonormal
// columns.
struct EigenPairs {
  Eigen::MatrixXd u;
  Eigen::VectorXd lambda;
};

// Top-r eigenpairs of the symmetric matrix a (only the lower triangle is
// read). REQUIRES: a square, 1 <= r <= a.rows(). INVALID_ARGUMENT otherwise;
// INTERNAL if LAPACK fails.
absl::StatusOr<EigenPairs> TopEigenpairs(const Eigen::MatrixXd& a, int r);

// All eigenpairs, descending.
absl::StatusOr<EigenPairs> AllEigenpairs(const Eigen::MatrixXd& a);

// How the floor σ² and the coefficients are formed.
struct FactorDamping {
  // σ² = max((tr A − Σλ)/(d − r), floor_coef · tr A / d).
  double floor_coef = 1.0;
  // λ' = max(λ, σ²) when true (the run-time default); λ used as is when
  // false (the paper-literal variant).
  bool clip = true;

  // The run-time default: floor β·tr A/d, clipped. Default β = 1.
  static FactorDamping Clipped(double beta) { return {beta, true}; }
  // The paper's form: γ = 1e-3·tr A/d floor, unclipped.
  static FactorDamping PaperLiteral() { return {1e-3, false}; }
};

// U, the eigenvalues used (λ' when clipped), σ² and the coefficient
// vectors: c = √(σ²/λ') − 1 (forward, X T), c_inv = √(λ'/σ²) − 1 (X T⁻¹).
struct LowRankFactor {
  Eigen::MatrixXd u;
  Eigen::VectorXd lambda;
  double sigma2 = 0;
  Eigen::VectorXd c;
  Eigen::VectorXd c_inv;
};

// REQUIRES: e.u.rows() == d, trace > 0. When d == r the tail term is taken
// as 0. Eigenvalues <= 0 (rank-deficient A, unclipped form) are raised to
// the floor so that no coefficient is infinite.
LowRankFactor MakeLowRankFactor(const EigenPairs& e, double trace, int64_t d,
                                const FactorDamping& damping);

}  // namespace gift::linalg

#endif  // GIFT_LINALG_EIGEN_PAIRS_H_
