// One layer's factor versions (DESIGN §4): the version the layer's next
// refresh gets, the newest installed factor (for late joiners and the
// plan's status) and the basis Ω of recent versions (to read the windows
// sketched in them). Every member of a job installs the same versions the
// same way, the owner its own refresh and the others what it broadcast: a
// version not above the newest is ignored, a factor outside
// factor_check.h's bounds is refused, so every rank's slot holds the same
// bytes on every node. Publishing into the ranks' slots is the caller's
// (SessionTable::PublishFactor), once Install says the factor is new.
//
//   FactorStore f({d_in, r_cap, k_cap});
//   job.version = f.TakeVersion();
//   ASSIGN_OR_RETURN(bool installed, f.Install(std::move(factor), seconds));
//   if (installed) sessions.PublishFactor(layer, *f.newest(), name);
//
// Thread safety: not thread-safe; the daemon holds its mutex around every
// use.
#ifndef GIFT_DAEMON_CORE_FACTOR_STORE_H_
#define GIFT_DAEMON_CORE_FACTOR_STORE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "shm/protocol.h"

namespace gift::daemon {

// Σᵢ λᵢ ‖U_oldᵀ uᵢ‖² / Σᵢ λᵢ over the new low-rank factor's eigenpairs
// (uᵢ, λᵢ): the share of its energy inside the old factor's basis, in
// [0, 1]. NaN when the two are not comparable (a full factor, other d_in,
// no eigenvalues).
double SubspaceKept(const shm::FactorData& old_factor,
                    const shm::FactorData& new_factor);

// Ω of this many recent versions is kept (a window is sketched in the basis
// of the factor its rank held when it began).
inline constexpr size_t kOmegaVersionsKept = 4;

class FactorStore {
 public:
  FactorStore() = default;
  // `geometry`: the layer's sizes, which factors are checked against.
  explicit FactorStore(shm::LayerGeometry geometry) : geometry_(geometry) {}

  // The version for a refresh of this layer (on its owner).
  int64_t TakeVersion() { return next_version_++; }
  // Someone (a re-attaching rank, a joining follower) holds `version`:
  // later versions go above it.
  void ContinueAbove(int64_t version);
  int64_t next_version() const { return next_version_; }

  // Checks and keeps `f`: false (nothing changes) unless its version is
  // above the newest; INVALID_ARGUMENT (nothing changes) for a factor
  // outside CheckFactor's bounds. `seconds`: how long its refresh took.
  absl::StatusOr<bool> Install(std::unique_ptr<shm::FactorData> f,
                               double seconds);

  // The newest installed factor; null before the first.
  const shm::FactorData* newest() const { return newest_.get(); }
  // Its version; -1 before the first.
  int64_t newest_version() const { return newest_ ? newest_->version : -1; }
  // Ω of an installed version among the last kOmegaVersionsKept; null
  // otherwise (a basis of an earlier giftd).
  const std::vector<float>* OmegaOf(int64_t version) const;
  // The end step of the newest factor's window; -1 before the first.
  int64_t factor_step() const { return factor_step_; }
  double last_refresh_seconds() const { return last_refresh_seconds_; }
  // Factors installed.
  int64_t refreshes() const { return refreshes_; }
  // SubspaceKept of the newest factor against the one it replaced; NaN
  // before the second or when they are not comparable.
  double subspace_kept() const { return subspace_kept_; }

 private:
  shm::LayerGeometry geometry_;
  int64_t next_version_ = 1;
  std::unique_ptr<shm::FactorData> newest_;
  std::map<int64_t, std::vector<float>> omega_by_version_;
  int64_t factor_step_ = -1;
  double last_refresh_seconds_ = 0;
  int64_t refreshes_ = 0;
  double subspace_kept_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_FACTOR_STORE_H_
