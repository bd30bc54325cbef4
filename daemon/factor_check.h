// The last check a factor passes before giftd publishes it to any rank
// (its own refresher's result or a peer's): a factor that would turn a
// rank's gradients into NaN or Inf — or amplify them past what its damping
// allows — is dropped there, and the layer keeps its previous factor.
//
// The bounds follow from how FactorBuilder makes factors (DESIGN §2), with
// room for float rounding:
//  * every value finite; σ² (the floor, or τ for a full factor) > 0;
//    β in [kMinBeta, kMaxBeta] (limits.h);
//  * U and Ω have orthonormal columns: |entries| <= 1;
//  * c = √(σ²/λ') − 1 with λ' >= σ²: c in [−1, 0]; λ' > 0;
//  * c_inv = √(λ'/σ²) − 1 with λ' <= tr and σ² >= β·tr/d: c_inv in
//    [0, 2·√(d/β)];
//  * T = (A + τI)^(-1/2), T⁻¹ = (A + τI)^(1/2), τ = β·tr A/d:
//    max|T|·max|T⁻¹| <= √κ(A + τI) <= √(1 + d/β), allowed twice that.
//
//   RETURN_IF_ERROR(CheckFactor(*factor, geometry));  // else keep the old
//
// Thread safety: pure functions.
#ifndef GIFT_DAEMON_FACTOR_CHECK_H_
#define GIFT_DAEMON_FACTOR_CHECK_H_

#include "absl/status/status.h"
#include "daemon/limits.h"
#include "shm/protocol.h"

namespace gift::daemon {

// INVALID_ARGUMENT naming the first value outside the bounds above. Sizes
// are PublishFactor's to check.
absl::Status CheckFactor(const shm::FactorData& f,
                         const shm::LayerGeometry& geometry);

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_FACTOR_CHECK_H_
