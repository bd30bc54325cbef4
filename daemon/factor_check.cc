#include "daemon/factor_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gift::daemon {
namespace {

// Float rounding of values the builder computes in double.
constexpr double kTol = 1e-3;

// The first value of `v` outside [lo, hi] (or not finite), as an error.
absl::Status InRange(const char* what, const std::vector<float>& v, double lo,
                     double hi) {
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    if (!(x >= lo && x <= hi)) {  // also NaN
      return absl::InvalidArgumentError(absl::StrFormat(
          "factor %s[%d] = %g is outside [%g, %g]", what, i, x, lo, hi));
    }
  }
  return absl::OkStatus();
}

absl::Status Scalar(const char* what, double x, double lo, double hi) {
  if (x >= lo && x <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("factor %s = %g is outside [%g, %g]", what, x, lo, hi));
}

absl::Status Positive(const char* what, double x) {
  if (x > 0 && std::isfinite(x)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("factor %s = %g must be finite and > 0", what, x));
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

absl::Status CheckFactor(const shm::FactorData& f,
                         const shm::LayerGeometry& geometry) {
  const double d = static_cast<double>(geometry.d_in);
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (f.window < -1 || f.window > shm::kMaxStep) {
    return absl::InvalidArgumentError(
        absl::StrFormat("factor window %d is outside [-1, 2^62]", f.window));
  }
  RETURN_IF_ERROR(Scalar("beta", f.beta, kMinBeta, kMaxBeta));
  RETURN_IF_ERROR(Positive("sigma2", f.sigma2));
  const double one = 1 + kTol;
  RETURN_IF_ERROR(InRange("U", f.u, -one, one));
  RETURN_IF_ERROR(InRange("omega", f.omega, -one, one));
  RETURN_IF_ERROR(InRange("c", f.c, -one, kTol));
  RETURN_IF_ERROR(
      InRange("c_inv", f.c_inv, -kTol, 2 * std::sqrt(d / f.beta) + kTol));
  // λ unclipped: >= 0 (a rank-deficient A has zero eigenvalues).
  RETURN_IF_ERROR(InRange("lambda", f.lambda, 0, kFloatMax));
  if (f.beta_auto || f.trace_mean != 0) {
    RETURN_IF_ERROR(Positive("trace_mean", f.trace_mean));
  }
  if (f.beta_auto && f.kind != 0) {
    return absl::InvalidArgumentError("beta_auto on a full factor");
  }
  if (f.kind != 1) return absl::OkStatus();
  RETURN_IF_ERROR(InRange("T", f.t, -kFloatMax, kFloatMax));
  RETURN_IF_ERROR(InRange("T_inv", f.t_inv, -kFloatMax, kFloatMax));
  const double spread = MaxAbs(f.t) * MaxAbs(f.t_inv);
  const double bound = 2 * std::sqrt(1 + d / f.beta);
  if (!(spread <= bound)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "factor max|T| * max|T^-1| = %g exceeds 2 sqrt(1 + d/beta) = %g",
        spread, bound));
  }
  return absl::OkStatus();
}

}  // namespace gift::daemon
