#include "tools/fidelity/geometry.h"

#include <Eigen/SVD>
#include <utility>

#include "common/status_macros.h"

namespace gift::fidelity {

double PaperDamping(const Eigen::MatrixXd& s) {
  return 1e-3 * s.trace() / static_cast<double>(s.rows());
}

Eigen::MatrixXd MomentFromActivations(const RowMatrixf& x) {
  const Eigen::MatrixXd xd = x.cast<double>();
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(x.cols(), x.cols());
  a.selfadjointView<Eigen::Lower>().rankUpdate(xd.transpose());
  a.triangularView<Eigen::StrictlyUpper>() = a.transpose();
  return a / static_cast<double>(x.rows());
}

Geometry::Geometry(std::optional<Eigen::MatrixXd> a,
                   std::optional<Eigen::MatrixXd> g,
                   std::optional<RowMatrixf> x)
    : a_(std::move(a)),
      a_from_x_(!a_ && x.has_value()),
      g_(std::move(g)),
      x_(std::move(x)) {}

const Eigen::MatrixXd& Geometry::a() {
  if (!a_) a_ = MomentFromActivations(*x_);
  return *a_;
}

absl::StatusOr<const linalg::EigenPairs*> Geometry::AEigen() {
  if (!a_eigen_) {
    ASSIGN_OR_RETURN(linalg::EigenPairs e, linalg::AllEigenpairs(a()));
    a_eigen_ = std::make_unique<linalg::EigenPairs>(std::move(e));
  }
  return a_eigen_.get();
}

absl::StatusOr<const linalg::EigenPairs*> Geometry::ATop(int r) {
  auto it = a_top_.find(r);
  if (it == a_top_.end()) {
    linalg::EigenPairs e;
    if (a_eigen_ && r <= a_eigen_->lambda.size()) {
      e.u = a_eigen_->u.leftCols(r);
      e.lambda = a_eigen_->lambda.head(r);
    } else if (a_from_x_ && r <= x_->rows() && x_->rows() < x_->cols()) {
      // A = XᵀX/rows = V (S²/rows) Vᵀ with X = U S Vᵀ.
      const Eigen::MatrixXd xd = x_->cast<double>();
      Eigen::BDCSVD<Eigen::MatrixXd> svd(xd, Eigen::ComputeThinV);
      if (svd.info() != Eigen::Success) {
        return absl::InternalError("SVD of the activations did not converge");
      }
      e.u = svd.matrixV().leftCols(r);
      e.lambda = svd.singularValues().head(r).array().square() /
                 static_cast<double>(x_->rows());
    } else {
      ASSIGN_OR_RETURN(e, linalg::TopEigenpairs(a(), r));
    }
    it = a_top_.emplace(r, std::move(e)).first;
  }
  return &it->second;
}

absl::StatusOr<const SketchedFactor*> Geometry::ANystrom(int r) {
  auto it = a_nystrom_.find(r);
  if (it == a_nystrom_.end()) {
    ASSIGN_OR_RETURN(SketchedFactor f, SketchEigenpairs(*x_, r));
    it = a_nystrom_.emplace(r, std::move(f)).first;
  }
  return &it->second;
}

}  // namespace gift::fidelity
