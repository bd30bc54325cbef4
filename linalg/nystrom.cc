// Nyström factor estimation from a streamed sketch Y = A Ω.
//
// The test matrix must be bit-identical on every rank (sketches are summed
// across ranks), so its Gaussian draws and its QR use only portable scalar
// arithmetic: a 64-bit Mersenne Twister (fully specified by the standard),
// our own Box–Muller, and an unblocked Householder QR in plain loops (no
// SIMD-dependent summation order, no FMA contraction in this project).
#include "linalg/nystrom.h"

#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::linalg {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr int kShiftRetries = 4;

// Uniform in (0, 1]: 53 random bits, never 0 so that log() is finite.
double Uniform(std::mt19937_64& gen) {
  return (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53;
}

void FillGaussian(uint64_t seed, Eigen::Ref<Eigen::MatrixXd> g) {
  std::mt19937_64 gen(seed);
  double* p = g.data();
  const Eigen::Index n = g.size();
  for (Eigen::Index i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(Uniform(gen)));
    const double angle = kTwoPi * Uniform(gen);
    p[i] = radius * std::cos(angle);
    if (i + 1 < n) p[i + 1] = radius * std::sin(angle);
  }
}

// Q (d × k) of m = QR with R's diagonal made non-negative (one Q per m,
// whatever the signs of the reflectors).
Eigen::MatrixXd HouseholderQ(Eigen::MatrixXd m) {
  const Eigen::Index d = m.rows(), k = m.cols();
  Eigen::MatrixXd v = Eigen::MatrixXd::Zero(d, k);  // reflectors
  Eigen::VectorXd sign = Eigen::VectorXd::Ones(k);
  for (Eigen::Index j = 0; j < k; ++j) {
    double norm2 = 0;
    for (Eigen::Index i = j; i < d; ++i) norm2 += m(i, j) * m(i, j);
    const double norm = std::sqrt(norm2);
    if (norm == 0) continue;                           // H_j = I
    const double alpha = m(j, j) >= 0 ? -norm : norm;  // R_jj
    sign(j) = alpha < 0 ? -1.0 : 1.0;
    double vnorm2 = 0;
    for (Eigen::Index i = j; i < d; ++i) {
      v(i, j) = m(i, j) - (i == j ? alpha : 0.0);
      vnorm2 += v(i, j) * v(i, j);
    }
    const double inv = 1.0 / std::sqrt(vnorm2);
    for (Eigen::Index i = j; i < d; ++i) v(i, j) *= inv;
    for (Eigen::Index c = j; c < k; ++c) {  // m ← (I − 2vvᵀ) m
      double dot = 0;
      for (Eigen::Index i = j; i < d; ++i) dot += v(i, j) * m(i, c);
      for (Eigen::Index i = j; i < d; ++i) m(i, c) -= 2.0 * dot * v(i, j);
    }
  }
  Eigen::MatrixXd q = Eigen::MatrixXd::Identity(d, k);
  for (Eigen::Index j = k - 1; j >= 0; --j) {  // Q = H_0 ⋯ H_{k−1} I
    for (Eigen::Index c = 0; c < k; ++c) {
      double dot = 0;
      for (Eigen::Index i = j; i < d; ++i) dot += v(i, j) * q(i, c);
      for (Eigen::Index i = j; i < d; ++i) q(i, c) -= 2.0 * dot * v(i, j);
    }
  }
  for (Eigen::Index j = 0; j < k; ++j) q.col(j) *= sign(j);
  return q;
}

absl::Status CheckNystromArgs(const Eigen::MatrixXd& y,
                              const Eigen::MatrixXd& omega, int r) {
  if (y.rows() != omega.rows() || y.cols() != omega.cols() || y.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: y is ", y.rows(), " x ", y.cols(), ", omega is ",
        omega.rows(), " x ", omega.cols(), " (need equal, non-empty)"));
  }
  if (y.cols() > y.rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: k=", y.cols(), " exceeds d=", y.rows()));
  }
  if (r < 1 || r > y.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: r=", r, " not in [1, k=", y.cols(), "]"));
  }
  if (!y.allFinite() || !omega.allFinite()) {
    return absl::InvalidArgumentError("NystromEigenpairs: non-finite input");
  }
  return absl::OkStatus();
}

}  // namespace

Eigen::MatrixXd MakeTestMatrix(int64_t d, int64_t k,
                               const Eigen::MatrixXd* u_prev, uint64_t seed) {
  const int64_t r_prev = u_prev != nullptr ? u_prev->cols() : 0;
  if (d < 1 || k < 1 || k > d || r_prev > k ||
      (r_prev > 0 && u_prev->rows() != d)) {
    return Eigen::MatrixXd();
  }
  Eigen::MatrixXd g(d, k - r_prev);
  FillGaussian(seed, g);
  if (r_prev > 0) {
    // Gram–Schmidt against U_prev, twice (one pass leaves O(eps·‖G‖) of
    // U_prev in G), so that G's orthonormal basis is orthogonal to U_prev.
    for (int pass = 0; pass < 2; ++pass) {
      g.noalias() -= *u_prev * (u_prev->transpose() * g);
    }
  }
  Eigen::MatrixXd m(d, k);
  if (r_prev > 0) m.leftCols(r_prev) = *u_prev;
  if (k > r_prev) m.rightCols(k - r_prev) = HouseholderQ(std::move(g));
  return m;
}

namespace {

// FᵀF = V Σ² Vᵀ (k × k, ascending), so F V Σ⁻¹ = Û: exact in exact
// arithmetic; in double the Gram matrix carries F's condition squared, with
// absolute errors ~ k·eps·σ₁² in Σ² and in Ûᵀ Û. Taken when σ_r² ≥
// kGramFloor · σ₁² (those errors are then ≤ ~1e-6 relative to σ_r², below
// float's rounding of the published factor), with one Cholesky QR pass
// that restores Ûᵀ Û = I to ~eps; nullopt otherwise (the caller takes the
// SVD of F itself).
std::optional<internal::LeftSingularPairs> ViaGram(const Eigen::MatrixXd& f,
                                                   int r) {
  constexpr double kGramFloor = 1e-8;
  Eigen::MatrixXd gram(f.cols(), f.cols());
  gram.noalias() = f.transpose() * f;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram);
  if (eig.info() != Eigen::Success) return std::nullopt;
  // The r largest, descending (the solver's order reversed).
  const Eigen::VectorXd s2 = eig.eigenvalues().tail(r).reverse();
  if (!(s2(r - 1) > 0 && s2(r - 1) >= kGramFloor * s2(0))) return std::nullopt;
  const Eigen::MatrixXd v = eig.eigenvectors().rightCols(r).rowwise().reverse();
  internal::LeftSingularPairs out;
  out.s = s2.cwiseSqrt();
  out.u.noalias() = f * v;
  out.u *= out.s.cwiseInverse().asDiagonal();
  Eigen::LLT<Eigen::MatrixXd> llt(out.u.transpose() * out.u);
  if (llt.info() != Eigen::Success) return std::nullopt;
  llt.matrixU().solveInPlace<Eigen::OnTheRight>(out.u);
  out.gram = true;
  return out;
}

}  // namespace

namespace internal {

absl::StatusOr<LeftSingularPairs> TopLeftSingularPairs(const Eigen::MatrixXd& f,
                                                       int r) {
  if (std::optional<LeftSingularPairs> g = ViaGram(f, r)) return *std::move(g);
  Eigen::BDCSVD<Eigen::MatrixXd> svd(f, Eigen::ComputeThinU);
  if (svd.info() != Eigen::Success) {
    return absl::InternalError("NystromEigenpairs: SVD did not converge");
  }
  LeftSingularPairs out;
  out.u = svd.matrixU().leftCols(r);
  out.s = svd.singularValues().head(r);
  return out;
}

}  // namespace internal

absl::StatusOr<EigenPairs> NystromEigenpairs(const Eigen::MatrixXd& y,
                                             const Eigen::MatrixXd& omega,
                                             int r) {
  if (absl::Status s = CheckNystromArgs(y, omega, r); !s.ok()) return s;
  const double d = static_cast<double>(y.rows());
  const double y_norm = y.norm();
  if (y_norm == 0) {  // A vanishes on span(Ω): nothing is preferred
    return EigenPairs{omega.leftCols(r), Eigen::VectorXd::Zero(r)};
  }
  double nu = std::sqrt(d) * std::numeric_limits<double>::epsilon() * y_norm;
  for (int attempt = 0; attempt <= kShiftRetries; ++attempt) {
    Eigen::MatrixXd y_nu = y + nu * omega;
    Eigen::MatrixXd b = omega.transpose() * y_nu;
    b = 0.5 * (b + b.transpose()).eval();
    Eigen::LLT<Eigen::MatrixXd> llt(b);
    if (llt.info() != Eigen::Success) {
      nu *= 100.0;  // B is numerically indefinite: shift further
      continue;
    }
    // F = Y_ν C⁻¹ with C = Lᵀ upper: solve F C = Y_ν from the right.
    llt.matrixU().solveInPlace<Eigen::OnTheRight>(y_nu);
    ASSIGN_OR_RETURN(internal::LeftSingularPairs f,
                     internal::TopLeftSingularPairs(y_nu, r));
    EigenPairs e;
    e.u = std::move(f.u);
    e.lambda = (f.s.array().square() - nu).max(0.0).matrix();
    return e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "NystromEigenpairs: Ωᵀ(Y + νΩ) is not positive definite even with "
      "shift ν=",
      nu / 100.0, "; Y is not the sketch A Ω of a PSD matrix A"));
}

}  // namespace gift::linalg
