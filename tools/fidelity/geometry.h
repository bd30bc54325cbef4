// The second-moment inputs of one layer (A = E[a aᵀ], G = E[δ δᵀ], the
// activations X) and the factors the transforms derive from them, computed
// once on first use and shared by every method of a run (the full
// eigen-decomposition of A serves all fullA_sym variants, the top-r pairs
// all lowrankA_<r> variants).
//
//   Geometry geo(a, std::nullopt, x);
//   ASSIGN_OR_RETURN(const linalg::EigenPairs* all, geo.AEigen());
//
// Thread safety: not thread-safe (the caches are filled lazily).
#ifndef GIFT_TOOLS_FIDELITY_GEOMETRY_H_
#define GIFT_TOOLS_FIDELITY_GEOMETRY_H_

#include <map>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "linalg/eigen_pairs.h"
#include "tools/fidelity/matrix.h"
#include "tools/fidelity/nystrom_sketch.h"

namespace gift::fidelity {

// γ(S) = 1e-3 · tr(S) / dim: the paper-literal damping.
double PaperDamping(const Eigen::MatrixXd& s);

// A = XᵀX / rows in double precision.
Eigen::MatrixXd MomentFromActivations(const RowMatrixf& x);

class Geometry {
 public:
  // a: d_in × d_in; g: d_out × d_out; x: rows × d_in. When a is absent and
  // x is present, A is computed from x (MomentFromActivations) on first use.
  // REQUIRES: the shapes agree (checked by the caller).
  Geometry(std::optional<Eigen::MatrixXd> a, std::optional<Eigen::MatrixXd> g,
           std::optional<RowMatrixf> x);

  bool has_a() const { return a_.has_value() || x_.has_value(); }
  bool has_g() const { return g_.has_value(); }
  bool has_x() const { return x_.has_value(); }
  // REQUIRES: has_a() / has_g() / has_x().
  const Eigen::MatrixXd& a();
  const Eigen::MatrixXd& g() const { return *g_; }
  const RowMatrixf& x() const { return *x_; }

  // All eigenpairs of A, descending.
  absl::StatusOr<const linalg::EigenPairs*> AEigen();
  // Top-r eigenpairs of A: from AEigen() when already computed; from the
  // thin SVD of X / √rows (O(rows²·d)) when A is X's moment and r <= rows <
  // d; else LAPACK on A (O(d³)).
  absl::StatusOr<const linalg::EigenPairs*> ATop(int r);
  // Nyström estimate of A's top-r eigenpairs from X (single pass, seed
  // kNystromSeed).
  absl::StatusOr<const SketchedFactor*> ANystrom(int r);

 private:
  std::optional<Eigen::MatrixXd> a_;
  bool a_from_x_ = false;
  std::optional<Eigen::MatrixXd> g_;
  std::optional<RowMatrixf> x_;
  std::unique_ptr<linalg::EigenPairs> a_eigen_;
  std::map<int, linalg::EigenPairs> a_top_;
  std::map<int, SketchedFactor> a_nystrom_;
};

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_GEOMETRY_H_
