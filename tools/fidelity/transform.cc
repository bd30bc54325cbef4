#include "tools/fidelity/transform.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "linalg/eigen_pairs.h"
#include "linalg/matrix_function.h"

namespace gift::fidelity {
namespace {

class Identity final : public Transform {
 public:
  RowMatrixd Forward(const RowMatrixd& w) const override { return w; }
  RowMatrixd Backward(const RowMatrixd& w) const override { return w; }
};

// W̃ = L_G⁻¹ W L⁻ᵀ with L block-diagonal (blocks of A + γI), either side
// optional: fullA_chol (one block), blockA_<b>, diagA (1 × 1 blocks),
// outG_chol (left only), kfac_chol (both).
class Cholesky final : public Transform {
 public:
  struct Block {
    int64_t offset;
    Eigen::MatrixXd l;  // lower triangular
  };
  Cholesky(std::optional<Eigen::MatrixXd> left, std::vector<Block> right)
      : left_(std::move(left)), right_(std::move(right)) {}

  RowMatrixd Forward(const RowMatrixd& w) const override {
    RowMatrixd out = w;
    if (left_) left_->triangularView<Eigen::Lower>().solveInPlace(out);
    for (const Block& b : right_) {
      auto cols = out.middleCols(b.offset, b.l.rows());
      // X Lᵀ = W  ⇔  X = W L⁻ᵀ.
      b.l.transpose()
          .triangularView<Eigen::Upper>()
          .solveInPlace<Eigen::OnTheRight>(cols);
    }
    return out;
  }
  RowMatrixd Backward(const RowMatrixd& w) const override {
    RowMatrixd out = w;
    for (const Block& b : right_) {
      auto cols = out.middleCols(b.offset, b.l.rows());
      RowMatrixd prod = cols * b.l.transpose().triangularView<Eigen::Upper>();
      cols = prod;
    }
    if (left_) {
      RowMatrixd prod = left_->triangularView<Eigen::Lower>() * out;
      out = std::move(prod);
    }
    return out;
  }

 private:
  std::optional<Eigen::MatrixXd> left_;
  std::vector<Block> right_;
};

// W̃ = ((W V) diag(fwd)) Vᵀ, back ((W̃ V) diag(bwd)) Vᵀ: the symmetric
// powers (A + τI)^(∓1/2) applied through A's eigen-decomposition.
class SymmetricPower final : public Transform {
 public:
  SymmetricPower(Eigen::MatrixXd v, Eigen::VectorXd fwd, Eigen::VectorXd bwd)
      : v_(std::move(v)), fwd_(std::move(fwd)), bwd_(std::move(bwd)) {}
  RowMatrixd Forward(const RowMatrixd& w) const override {
    return Apply(w, fwd_);
  }
  RowMatrixd Backward(const RowMatrixd& w) const override {
    return Apply(w, bwd_);
  }

 private:
  RowMatrixd Apply(const RowMatrixd& w, const Eigen::VectorXd& d) const {
    RowMatrixd wv = w * v_;
    wv = wv * d.asDiagonal();
    return wv * v_.transpose();
  }
  Eigen::MatrixXd v_;
  Eigen::VectorXd fwd_, bwd_;
};

// W̃ = W + ((W U) diag(c)) Uᵀ, back W̃ + ((W̃ U) diag(c⁻)) Uᵀ.
class LowRank final : public Transform {
 public:
  explicit LowRank(linalg::LowRankFactor f) : f_(std::move(f)) {}
  RowMatrixd Forward(const RowMatrixd& w) const override {
    return Apply(w, f_.c);
  }
  RowMatrixd Backward(const RowMatrixd& w) const override {
    return Apply(w, f_.c_inv);
  }

 private:
  RowMatrixd Apply(const RowMatrixd& w, const Eigen::VectorXd& c) const {
    RowMatrixd wu = w * f_.u;
    wu = wu * c.asDiagonal();
    RowMatrixd out = w;
    out.noalias() += wu * f_.u.transpose();
    return out;
  }
  linalg::LowRankFactor f_;
};

absl::StatusOr<std::vector<Cholesky::Block>> BlockCholesky(
    const Eigen::MatrixXd& a, int64_t block) {
  const double gamma = PaperDamping(a);
  std::vector<Cholesky::Block> blocks;
  for (int64_t off = 0; off < a.rows(); off += block) {
    const int64_t b = std::min<int64_t>(block, a.rows() - off);
    if (b == 1) {  // diagA: skip LAPACK for the 1 × 1 case
      const double v = a(off, off) + gamma;
      if (!(v > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("A + gamma*I has a non-positive diagonal at ", off));
      }
      blocks.push_back({off, Eigen::MatrixXd::Constant(1, 1, std::sqrt(v))});
      continue;
    }
    ASSIGN_OR_RETURN(Eigen::MatrixXd l,
                     linalg::CholeskyLower(a.block(off, off, b, b), gamma));
    blocks.push_back({off, std::move(l)});
  }
  return blocks;
}

absl::StatusOr<std::unique_ptr<Transform>> MakeSymmetric(const MethodSpec& m,
                                                         Geometry& geo) {
  const Eigen::MatrixXd& a = geo.a();
  const double shift =
      m.beta ? *m.beta * a.trace() / a.rows() : PaperDamping(a);
  ASSIGN_OR_RETURN(const linalg::EigenPairs* e, geo.AEigen());
  const Eigen::ArrayXd shifted = e->lambda.array() + shift;
  if (!(shifted.minCoeff() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": A + ", shift, "*I is not positive definite"));
  }
  return std::make_unique<SymmetricPower>(e->u, shifted.rsqrt().matrix(),
                                          shifted.sqrt().matrix());
}

linalg::FactorDamping Damping(const MethodSpec& m) {
  return m.beta ? linalg::FactorDamping::Clipped(*m.beta)
                : linalg::FactorDamping::PaperLiteral();
}

absl::StatusOr<std::unique_ptr<Transform>> MakeLowRank(const MethodSpec& m,
                                                       Geometry& geo) {
  const int64_t d = geo.a().rows();
  if (m.rank > d) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": rank ", m.rank, " exceeds d_in = ", d));
  }
  const int r = static_cast<int>(m.rank);
  if (m.kind == MethodKind::kNystromA) {
    if (m.rank + kNystromOversample > geo.x().cols()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.name, ": rank + ", kNystromOversample, " exceeds d_in = ", d));
    }
    ASSIGN_OR_RETURN(const SketchedFactor* f, geo.ANystrom(r));
    return MakeLowRankTransform(f->pairs, f->trace, d, Damping(m));
  }
  ASSIGN_OR_RETURN(const linalg::EigenPairs* e, geo.ATop(r));
  return MakeLowRankTransform(*e, geo.a().trace(), d, Damping(m));
}

absl::StatusOr<std::unique_ptr<Transform>> MakeCholesky(const MethodSpec& m,
                                                        Geometry& geo) {
  std::optional<Eigen::MatrixXd> left;
  std::vector<Cholesky::Block> right;
  if (m.NeedsG()) {
    ASSIGN_OR_RETURN(left,
                     linalg::CholeskyLower(geo.g(), PaperDamping(geo.g())));
  }
  if (m.NeedsA()) {
    const int64_t d = geo.a().rows();
    int64_t block = d;
    if (m.kind == MethodKind::kDiagA) block = 1;
    // A block size past d_in is one block: fullA_chol.
    if (m.kind == MethodKind::kBlockA) block = std::min(m.rank, d);
    ASSIGN_OR_RETURN(right, BlockCholesky(geo.a(), block));
  }
  return std::make_unique<Cholesky>(std::move(left), std::move(right));
}

}  // namespace

std::unique_ptr<Transform> MakeLowRankTransform(
    const linalg::EigenPairs& pairs, double trace, int64_t d,
    const linalg::FactorDamping& damping) {
  return std::make_unique<LowRank>(
      linalg::MakeLowRankFactor(pairs, trace, d, damping));
}

absl::StatusOr<std::unique_ptr<Transform>> MakeTransform(const MethodSpec& m,
                                                         Geometry& geo) {
  RETURN_IF_ERROR(CheckInputs(m, geo.has_a(), geo.has_x(), geo.has_g()));
  switch (m.kind) {
    case MethodKind::kEuclid:
      return std::make_unique<Identity>();
    case MethodKind::kFullASymmetric:
      return MakeSymmetric(m, geo);
    case MethodKind::kLowRankA:
    case MethodKind::kNystromA:
      return MakeLowRank(m, geo);
    case MethodKind::kDiagA:
    case MethodKind::kFullACholesky:
    case MethodKind::kBlockA:
    case MethodKind::kOutGCholesky:
    case MethodKind::kKfacCholesky:
      return MakeCholesky(m, geo);
  }
  return absl::InternalError("unhandled method kind");
}

}  // namespace gift::fidelity
