#include "daemon/core/factor_store.h"

#include <algorithm>
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
  newest_ = std::move(f);
  return true;
}

const std::vector<float>* FactorStore::OmegaOf(int64_t version) const {
  auto it = omega_by_version_.find(version);
  return it == omega_by_version_.end() ? nullptr : &it->second;
}

}  // namespace gift::daemon
