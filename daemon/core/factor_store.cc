#include "daemon/core/factor_store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "daemon/factor_check.h"

namespace gift::daemon {

void FactorStore::ContinueAbove(int64_t version) {
  next_version_ = std::max(next_version_, version + 1);
}

absl::StatusOr<bool> FactorStore::Install(std::unique_ptr<shm::FactorData> f,
                                          double seconds) {
  if (newest_ != nullptr && f->version <= newest_->version) return false;
  if (absl::Status st = CheckFactor(*f, geometry_); !st.ok()) return st;
  omega_by_version_[f->version] = f->omega;
  while (omega_by_version_.size() > kOmegaVersionsKept) {
    omega_by_version_.erase(omega_by_version_.begin());
  }
  // Whoever owns the layer later continues above every installed version.
  ContinueAbove(f->version);
  factor_step_ = f->window;
  last_refresh_seconds_ = seconds;
  ++refreshes_;
  subspace_kept_ = newest_ != nullptr
                       ? SubspaceKept(*newest_, *f)
                       : std::numeric_limits<double>::quiet_NaN();
  newest_ = std::move(f);
  return true;
}

double SubspaceKept(const shm::FactorData& old_factor,
                    const shm::FactorData& new_factor) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const int64_t ro = old_factor.r, rn = new_factor.r;
  if (old_factor.kind != 0 || new_factor.kind != 0 || ro < 1 || rn < 1 ||
      new_factor.lambda.size() < static_cast<size_t>(rn)) {
    return kNaN;
  }
  const int64_t d = static_cast<int64_t>(new_factor.u.size()) / rn;
  if (d < 1 || new_factor.u.size() != static_cast<size_t>(d * rn) ||
      old_factor.u.size() != static_cast<size_t>(d * ro)) {
    return kNaN;
  }
  // M = U_oldᵀ U_new (ro × rn), accumulated row by row of the d_in rows.
  std::vector<double> m(static_cast<size_t>(ro * rn), 0.0);
  for (int64_t x = 0; x < d; ++x) {
    const float* uo = old_factor.u.data() + x * ro;
    const float* un = new_factor.u.data() + x * rn;
    for (int64_t j = 0; j < ro; ++j) {
      const double a = uo[j];
      double* row = m.data() + j * rn;
      for (int64_t i = 0; i < rn; ++i) row[i] += a * un[i];
    }
  }
  double kept = 0, total = 0;
  for (int64_t i = 0; i < rn; ++i) {
    const double lambda = std::max(0.0, double{new_factor.lambda[i]});
    double norm2 = 0;
    for (int64_t j = 0; j < ro; ++j) norm2 += m[j * rn + i] * m[j * rn + i];
    kept += lambda * std::min(1.0, norm2);
    total += lambda;
  }
  return total > 0 && std::isfinite(kept) ? kept / total : kNaN;
}

const std::vector<float>* FactorStore::OmegaOf(int64_t version) const {
  auto it = omega_by_version_.find(version);
  return it == omega_by_version_.end() ? nullptr : &it->second;
}

}  // namespace gift::daemon
