// Top-r eigenpairs of A = XᵀX/rows estimated the way the run-time system
// does it (DESIGN §2): a Nyström sketch Y = Σ aᵀ(aΩ) accumulated in float32
// by kernels::SketchAccumulate over the rows of X in batches of 512, then
// the stable reconstruction of linalg::NystromEigenpairs on Y / rows.
//
// The test matrix is Ω = MakeTestMatrix(d, r + oversample, u_prev, seed):
// with u_prev null this is the single-pass sketch of a job's first factor;
// with u_prev the previous factor's U it is the daemon's warm start.
//
//   ASSIGN_OR_RETURN(SketchedFactor f, SketchEigenpairs(x, 32));
//   LowRankFactor lr = MakeLowRankFactor(f.pairs, f.trace, x.cols(), ...);
//
// Thread safety: pure function.
#ifndef GIFT_TOOLS_FIDELITY_NYSTROM_SKETCH_H_
#define GIFT_TOOLS_FIDELITY_NYSTROM_SKETCH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "linalg/eigen_pairs.h"
#include "tools/fidelity/matrix.h"

namespace gift::fidelity {

// The documented seed of gift-fidelity's Nyström test matrix.
inline constexpr uint64_t kNystromSeed = 20260101;
// Oversampling p: k = r + p sketch columns (DESIGN §2).
inline constexpr int kNystromOversample = 16;
// Rows per SketchAccumulate call, as one client step would add.
inline constexpr int64_t kSketchBatchRows = 512;

struct SketchedFactor {
  linalg::EigenPairs pairs;
  // tr A = Σ‖a‖² / rows, from the sketch accumulator.
  double trace = 0;
};

// REQUIRES: x has >= 1 row; r >= 1; r + oversample <= x.cols(); u_prev
// (nullable) has x.cols() rows and at most r + oversample columns.
absl::StatusOr<SketchedFactor> SketchEigenpairs(
    const RowMatrixf& x, int r, const Eigen::MatrixXd* u_prev = nullptr,
    uint64_t seed = kNystromSeed, int oversample = kNystromOversample);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_NYSTROM_SKETCH_H_
