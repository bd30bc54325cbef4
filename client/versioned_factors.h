// The whitening factors a client holds for its GIFT layers, by version.
//
// DESIGN §4: factors are refreshed by the daemon and switched on every rank
// in the same step, chosen by the per-step agreement (agreement.h). Ranks
// see a new version at slightly different times, so each keeps the last two
// versions of every layer: whatever minimum the job agrees on is then held
// locally unless a rank is more than one version ahead of the slowest one
// (the agreement then sends the layer down the Euclidean path on every rank
// for that step).
//
// Probation (DESIGN §2): with a daemon, a layer's newest factor is for
// probes until the daemon accepts it. SetAccepted records the versions the
// daemon accepted; Usable (what the per-step agreement offers for the GIFT
// path) is then the held versions among them. A layer never given one has
// no such gate (a rank without a daemon). Put never evicts the newest
// usable version, so a rank holds it while newer ones are on probation.
//
//   VersionedFactors factors;
//   LayerFactor f = LayerFactor::LowRank(/*version=*/3, d_in, r, u, c, c_inv);
//   RETURN_IF_ERROR(factors.Put("blocks.0.mlp.fc2", std::move(f)));
//   const LayerFactor* v3 = factors.Find("blocks.0.mlp.fc2", 3);
//
// Thread safety: not thread-safe; the owner serialises Put with readers
// (the allreduce reads it only inside Run).
#ifndef GIFT_CLIENT_VERSIONED_FACTORS_H_
#define GIFT_CLIENT_VERSIONED_FACTORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/epoch_plan.h"

namespace gift::client {

// One version of the transform of one layer (DESIGN §2), in float32 as the
// hot path uses it. Low-rank: T = I + U diag(c) Uᵀ, T⁻¹ = I + U diag(c_inv)
// Uᵀ. Full: dense T and T⁻¹, d_in × d_in row-major.
struct LayerFactor {
  // REQUIRES: >= 0; versions of a layer increase with time.
  int64_t version = 0;
  GiftTransform kind = GiftTransform::kLowRank;
  int64_t d_in = 0;
  int64_t r = 0;
  std::vector<float> u;  // d_in × r, row-major (low-rank)
  std::vector<float> c;
  std::vector<float> c_inv;
  std::vector<float> t;  // d_in × d_in (full)
  std::vector<float> t_inv;
  // β auto (low-rank, optional): the unclipped top-r eigenvalues λ of A and
  // tr A the coefficients came from, so that WithBeta can rebuild them for
  // another damping; `beta_auto` asks the probe to try kBetaGridValues.
  std::vector<float> lambda;
  double trace_mean = 0;
  bool beta_auto = false;

  // INVALID_ARGUMENT unless the sizes are consistent and d_in matches.
  absl::Status Validate(int64_t layer_d_in) const;
  // A copy with c, c_inv rebuilt for damping β (DESIGN §2): σ² =
  // max((tr − Σλ)/(d − r), β·tr/d), λ' = max(λ, σ²), c = √(σ²/λ') − 1,
  // c_inv = √(λ'/σ²) − 1 (the daemon's linalg::MakeLowRankFactor, clipped).
  // Its version is the same: it is for probes, never for Put. FAILED_
  // PRECONDITION without λ and tr A; INVALID_ARGUMENT for β not > 0.
  absl::StatusOr<LayerFactor> WithBeta(double beta) const;
};

class VersionedFactors {
 public:
  // Slots kept per layer.
  static constexpr int kKeep = 2;

  // Adds a version (replacing one with the same number); keeps the kKeep
  // highest versions. INVALID_ARGUMENT for a negative version or an
  // inconsistent factor.
  absl::Status Put(const std::string& layer, LayerFactor factor);
  // The factor of that version, or nullptr when not held. The pointer is
  // valid until the next Put or Drop of the layer (either may free it).
  const LayerFactor* Find(const std::string& layer, int64_t version) const;
  // Held versions, ascending (empty when none).
  std::vector<int64_t> Held(const std::string& layer) const;
  // The highest held version, or nullptr; valid as long as Find's.
  const LayerFactor* Newest(const std::string& layer) const;
  // The daemon accepts `version` for the layer's GIFT path (kNoVersion:
  // none; it also forgets the earlier acceptances, so the layer comes back
  // only on a version accepted anew). Versions no longer held are
  // forgotten.
  void SetAccepted(const std::string& layer, int64_t version);
  // The held versions the GIFT path may use, ascending: all held ones
  // while the layer has no gate, else the held accepted ones.
  std::vector<int64_t> Usable(const std::string& layer) const;
  // Forgets every version of the layer (a stale factor: the layer then goes
  // Euclidean until a new one arrives). Frees the factors: read what is
  // needed of them (the version) first.
  void Drop(const std::string& layer);

 private:
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<LayerFactor>>>
      by_layer_;
  // The gated layers' accepted versions, ascending (at most kKeep + 1).
  absl::flat_hash_map<std::string, std::vector<int64_t>> accepted_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_VERSIONED_FACTORS_H_
