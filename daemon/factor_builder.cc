// The CPU factor builder and the pieces shared with the GPU one
// (factor_builder.h). All arithmetic in double; inputs and outputs are the
// FP32 row-major buffers the shared-memory slots hold.
#include "daemon/factor_builder.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/factor_builder_host.h"
#include "linalg/eigen_pairs.h"
#include "linalg/matrix_function.h"
#include "linalg/nystrom.h"
#include "linalg/row_major.h"

namespace gift::daemon {
namespace {

// Σaᵀa is summed in FP32 by the clients: symmetry and the sign of the
// smallest eigenvalue hold only to float rounding, relative to the scale.
constexpr double kSymmetryTol = 1e-5;
constexpr double kPsdTol = 1e-4;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("FactorBuilder: ", what));
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x); });
}

absl::Status CheckCommon(double trace, int64_t count, double beta) {
  if (count <= 0)
    return Invalid(absl::StrCat("count must be > 0 (got ", count, ")"));
  if (!(trace > 0) || !std::isfinite(trace)) {
    return Invalid(
        absl::StrCat("trace must be finite and > 0 (got ", trace, ")"));
  }
  if (!(beta > 0) || !std::isfinite(beta)) {
    return Invalid(
        absl::StrCat("beta must be finite and > 0 (got ", beta, ")"));
  }
  return absl::OkStatus();
}

std::vector<float> ToFloat(const Eigen::VectorXd& v) {
  std::vector<float> out(v.size());
  Eigen::Map<Eigen::VectorXf>(out.data(), v.size()) = v.cast<float>();
  return out;
}

// f(A + τI) = U diag(f(λ + τ)) Uᵀ from A's eigendecomposition.
absl::StatusOr<Eigen::MatrixXd> Compose(const linalg::EigenPairs& e, double tau,
                                        double power) {
  ASSIGN_OR_RETURN(Eigen::VectorXd f, linalg::internal::ShiftedEigenvaluePower(
                                          e.lambda, tau, power));
  return e.u * f.asDiagonal() * e.u.transpose();
}

class CpuFactorBuilder : public internal::HostFactorBuilder {
 public:
  bool on_device() const override { return false; }

 protected:
  absl::StatusOr<linalg::EigenPairs> NystromEigenpairs(
      const Eigen::MatrixXd& y_mean, const Eigen::MatrixXd& omega,
      int r) override {
    return linalg::NystromEigenpairs(y_mean, omega, r);
  }

  absl::StatusOr<WhiteningPair> Whitening(const Eigen::MatrixXd& m,
                                          double tau) override {
    ASSIGN_OR_RETURN(linalg::EigenPairs e, linalg::AllEigenpairs(m));
    RETURN_IF_ERROR(
        internal::CheckFullSpectrum(e.lambda.minCoeff(), e.lambda.maxCoeff()));
    WhiteningPair p;
    ASSIGN_OR_RETURN(p.t, Compose(e, tau, -0.5));
    ASSIGN_OR_RETURN(p.t_inv, Compose(e, tau, 0.5));
    return p;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<FactorBuilder>> FactorBuilder::Create(
    int device) {
  if (device < 0) return std::make_unique<CpuFactorBuilder>();
#if GIFT_HAVE_CUDA
  return internal::CreateCudaFactorBuilder(device);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "FactorBuilder: CUDA device ", device,
      " requested but this giftd was built without CUDA (GIFT_CUDA=OFF); "
      "use device -1 for the CPU builder"));
#endif
}

std::vector<float> InitialOmega(int64_t d, int64_t k, uint64_t seed) {
  return linalg::ToRowMajorFloat(linalg::MakeTestMatrix(d, k, nullptr, seed));
}

namespace internal {

absl::StatusOr<LowRankFactorData> HostFactorBuilder::LowRank(
    const std::vector<float>& y, const std::vector<float>& omega, int64_t d,
    int64_t k, double trace, int64_t count, int r, double beta, int k_next,
    uint64_t seed) {
  RETURN_IF_ERROR(
      CheckLowRankArgs(y, omega, d, k, trace, count, r, beta, k_next));
  const Eigen::MatrixXd y_mean = linalg::FromRowMajorFloat(y, d, k) / count;
  ASSIGN_OR_RETURN(
      linalg::EigenPairs e,
      NystromEigenpairs(y_mean, linalg::FromRowMajorFloat(omega, d, k), r));
  return FinishLowRank(d, r, e.u.data(), e.lambda.data(), trace / count, beta,
                       k_next, seed);
}

absl::StatusOr<FullFactorData> HostFactorBuilder::Full(
    const std::vector<float>& a, int64_t d, double trace, int64_t count,
    double beta) {
  RETURN_IF_ERROR(CheckFullArgs(a, d, trace, count, beta));
  Eigen::MatrixXd m = linalg::FromRowMajorFloat(a, d, d) / count;
  m = 0.5 * (m + m.transpose());
  FullFactorData out;
  out.d_in = d;
  out.tau = beta * m.trace() / d;
  ASSIGN_OR_RETURN(WhiteningPair p, Whitening(m, out.tau));
  out.t = linalg::ToRowMajorFloat(p.t);
  out.t_inv = linalg::ToRowMajorFloat(p.t_inv);
  return out;
}

absl::Status CheckLowRankArgs(const std::vector<float>& y,
                              const std::vector<float>& omega, int64_t d,
                              int64_t k, double trace, int64_t count, int r,
                              double beta, int k_next) {
  RETURN_IF_ERROR(CheckCommon(trace, count, beta));
  if (!(1 <= r && r <= k && k <= d)) {
    return Invalid(absl::StrCat("need 1 <= r <= k <= d (got r=", r, ", k=", k,
                                ", d=", d, ")"));
  }
  if (k_next < r || k_next > d) {
    return Invalid(absl::StrCat("k_next must be in [r=", r, ", d=", d,
                                "] (got ", k_next, ")"));
  }
  const size_t n = static_cast<size_t>(d * k);
  if (y.size() != n || omega.size() != n) {
    return Invalid(absl::StrCat("y has ", y.size(), " and omega ", omega.size(),
                                " elements; d x k = ", n));
  }
  if (!AllFinite(y)) return Invalid("sketch y has non-finite elements");
  if (!AllFinite(omega)) return Invalid("omega has non-finite elements");
  return absl::OkStatus();
}

absl::Status CheckFullArgs(const std::vector<float>& a, int64_t d, double trace,
                           int64_t count, double beta) {
  RETURN_IF_ERROR(CheckCommon(trace, count, beta));
  if (d < 1 || a.size() != static_cast<size_t>(d * d)) {
    return Invalid(absl::StrCat("a has ", a.size(),
                                " elements; d x d with d=", d, " expected"));
  }
  if (!AllFinite(a)) return Invalid("a has non-finite elements");
  const Eigen::Map<const linalg::RowMatrixf> m(a.data(), d, d);
  const double scale = m.cwiseAbs().maxCoeff();
  const double asym = (m - m.transpose()).cwiseAbs().maxCoeff();
  if (asym > kSymmetryTol * scale) {
    return Invalid(absl::StrCat("a is not symmetric: max|A - At| = ", asym,
                                " > ", kSymmetryTol, " * max|A| = ", scale));
  }
  if (!(scale > 0)) return Invalid("a is zero");
  return absl::OkStatus();
}

absl::Status CheckFullSpectrum(double lambda_min, double lambda_max) {
  if (lambda_min < -kPsdTol * std::max(lambda_max, 0.0)) {
    return Invalid(
        absl::StrCat("a is not positive semi-definite: smallest "
                     "eigenvalue ",
                     lambda_min, ", largest ", lambda_max));
  }
  return absl::OkStatus();
}

LowRankFactorData FinishLowRank(int64_t d, int r, const double* u,
                                const double* lambda, double trace_mean,
                                double beta, int k_next, uint64_t seed) {
  linalg::EigenPairs e;
  e.u = Eigen::Map<const Eigen::MatrixXd>(u, d, r);
  e.lambda = Eigen::Map<const Eigen::VectorXd>(lambda, r);
  const linalg::LowRankFactor f = linalg::MakeLowRankFactor(
      e, trace_mean, d, linalg::FactorDamping::Clipped(beta));
  LowRankFactorData out;
  out.r = r;
  out.d_in = d;
  // U as sent (float): the next basis starts with these very values, bit
  // for bit, so that a peer receiving the factor rebuilds those columns of
  // Ω from U (PeerFactor.omega_u_cols) and only the p new ones travel.
  const Eigen::MatrixXd u_sent = f.u.cast<float>().cast<double>();
  out.u = linalg::ToRowMajorFloat(u_sent);
  // λ as estimated, not λ' (the clipped copy is max(λ, σ²)): a client
  // rebuilding the coefficients for another β needs the eigenvalues the
  // floor clipped (client::LayerFactor::WithBeta).
  out.lambda = ToFloat(e.lambda.cwiseMax(0.0));
  out.trace_mean = trace_mean;
  out.c = ToFloat(f.c);
  out.c_inv = ToFloat(f.c_inv);
  out.sigma2 = f.sigma2;
  out.omega_next =
      linalg::ToRowMajorFloat(linalg::MakeTestMatrix(d, k_next, &u_sent, seed));
  return out;
}

}  // namespace internal
}  // namespace gift::daemon
