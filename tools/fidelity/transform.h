// The gradient transforms compared by gift-fidelity: W̃ = Forward(W) is the
// matrix that is quantized, Backward(W̃) maps it back (Backward(Forward(W))
// = W up to rounding). All arithmetic is double precision; no transform
// forms a dense d × d matrix beyond what its definition needs (the
// low-rank ones apply W + ((W U) diag(c)) Uᵀ).
//
//   ASSIGN_OR_RETURN(MethodSpec m, ParseMethod("lowrankA_32:1.0"));
//   ASSIGN_OR_RETURN(std::unique_ptr<Transform> t, MakeTransform(m, geo));
//   RowMatrixd w_tilde = t->Forward(w);
//
// Thread safety: a built Transform is immutable and may be shared.
#ifndef GIFT_TOOLS_FIDELITY_TRANSFORM_H_
#define GIFT_TOOLS_FIDELITY_TRANSFORM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "linalg/eigen_pairs.h"
#include "tools/fidelity/geometry.h"
#include "tools/fidelity/matrix.h"
#include "tools/fidelity/method.h"

namespace gift::fidelity {

class Transform {
 public:
  virtual ~Transform() = default;
  // REQUIRES: w is d_out × d_in of the geometry the transform was built on.
  virtual RowMatrixd Forward(const RowMatrixd& w) const = 0;
  virtual RowMatrixd Backward(const RowMatrixd& w_tilde) const = 0;
};

// Builds the transform of `m` (see method.h) from `geo`.
// INVALID_ARGUMENT when an input is missing, a rank or block size does not
// fit d_in, or a factorisation fails (e.g. A + γI not positive definite).
absl::StatusOr<std::unique_ptr<Transform>> MakeTransform(const MethodSpec& m,
                                                         Geometry& geo);

// The low-rank transform W + ((W U) diag(c)) Uᵀ of given eigenpairs (what
// lowrankA_<r> and nystromA_<r> build): MakeLowRankFactor(pairs, trace, d,
// damping). REQUIRES: pairs.u has d rows, trace > 0.
std::unique_ptr<Transform> MakeLowRankTransform(
    const linalg::EigenPairs& pairs, double trace, int64_t d,
    const linalg::FactorDamping& damping);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_TRANSFORM_H_
