// Streaming Nyström factor estimation (DESIGN §2).
//
// Every rank sketches Y += aᵀ(aΩ) in the same basis Ω, so sketches sum
// across ranks and nodes; the owner turns Σ Y into top-r eigenpairs with the
// numerically stable reconstruction (Tropp et al. 2017): shift
// ν = √d · eps · ‖Y‖_F, Y_ν = Y + νΩ, B = Ωᵀ Y_ν (symmetrised),
// C = chol(B) (upper), F = Y_ν C⁻¹, thin SVD F = Û Σ Vᵀ, λ = max(Σ² − ν, 0).
//
//   Eigen::MatrixXd omega = MakeTestMatrix(d, r + 16, &prev_u, seed);
//   ... Y = Σ aᵀ(aΩ) / count ...
//   ASSIGN_OR_RETURN(EigenPairs e, NystromEigenpairs(y, omega, r));
//
// Thread safety: pure functions.
#ifndef GIFT_LINALG_NYSTROM_H_
#define GIFT_LINALG_NYSTROM_H_

#include <Eigen/Dense>
#include <cstdint>

#include "absl/status/statusor.h"
#include "linalg/eigen_pairs.h"

namespace gift::linalg {

// Ω = orthonormalised [U_prev | G] (d × k): U_prev (d × r_prev, nullable or
// empty before the first factor; orthonormal) itself, bit for bit, followed
// by an orthonormal basis of the k − r_prev Gaussian columns G from `seed`
// (a portable generator: the same seed gives the same Ω₀ on every machine)
// projected off U_prev: (I − U_prev U_prevᵀ)² G, orthonormalised by
// Householder QR with a non-negative R diagonal. Its span is [U_prev | G]'s,
// and a receiver that holds U_prev needs only the last k − r_prev columns.
// REQUIRES: 1 <= k <= d, r_prev <= k, U_prev d rows; returns an empty matrix
// otherwise (which NystromEigenpairs rejects).
Eigen::MatrixXd MakeTestMatrix(int64_t d, int64_t k,
                               const Eigen::MatrixXd* u_prev, uint64_t seed);

// Top-r eigenpairs of the PSD matrix A from Y = A Ω. REQUIRES: y and omega
// d × k, 1 <= r <= k <= d. INVALID_ARGUMENT on shape errors or non-finite
// input, and when Ωᵀ Y_ν stays indefinite after retrying with shifts up to
// 10⁸ ν (Y is then not the sketch of a PSD matrix). Y = 0 gives λ = 0 and
// the first r columns of Ω.
absl::StatusOr<EigenPairs> NystromEigenpairs(const Eigen::MatrixXd& y,
                                             const Eigen::MatrixXd& omega,
                                             int r);

namespace internal {

// The r leading singular values s (descending) and left singular vectors u
// (d × r, orthonormal) of f (d × k); `gram` says which route computed them:
// the k × k Gram matrix's eigendecomposition (about 5× faster than an SVD at
// k = 48) when σ_r² ≥ 1e-8 σ₁², f's thin SVD otherwise. INTERNAL when the
// SVD does not converge. REQUIRES: 1 <= r <= k <= d.
struct LeftSingularPairs {
  Eigen::MatrixXd u;
  Eigen::VectorXd s;
  bool gram = false;
};
absl::StatusOr<LeftSingularPairs> TopLeftSingularPairs(const Eigen::MatrixXd& f,
                                                       int r);

}  // namespace internal
}  // namespace gift::linalg

#endif  // GIFT_LINALG_NYSTROM_H_
