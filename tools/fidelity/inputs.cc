#include "tools/fidelity/inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace gift::fidelity {
namespace {

std::string Shape(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::Status Bad(const std::string& name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// Reads `path`, checks rank and values.
// `layout` names the expected shapes; ranks outside [min_rank, max_rank]
// are rejected.
absl::StatusOr<tools::NpyArray> Load(const std::string& path,
                                     absl::string_view layout, size_t min_rank,
                                     size_t max_rank) {
  ASSIGN_OR_RETURN(tools::NpyArray x, tools::ReadNpy(path));
  if (x.shape.size() < min_rank || x.shape.size() > max_rank) {
    return Bad(path, absl::StrCat("expected ", layout, ", got shape ",
                                  Shape(x.shape)));
  }
  for (int64_t d : x.shape) {
    if (d == 0) return Bad(path, absl::StrCat("empty array ", Shape(x.shape)));
  }
  RETURN_IF_ERROR(CheckFinite(x, path));
  return x;
}

absl::StatusOr<Eigen::MatrixXd> LoadMoment(const std::string& path, int64_t dim,
                                           absl::string_view what,
                                           absl::string_view dim_name) {
  ASSIGN_OR_RETURN(
      tools::NpyArray x,
      Load(path, absl::StrCat("[", dim_name, ", ", dim_name, "]"), 2, 2));
  if (x.shape[0] != dim || x.shape[1] != dim) {
    return Bad(path, absl::StrCat("shape ", Shape(x.shape), " does not match ",
                                  dim_name, " = ", dim, " of the gradient"));
  }
  Eigen::MatrixXd m =
      Eigen::Map<const RowMatrixf>(x.data.data(), dim, dim).cast<double>();
  RETURN_IF_ERROR(CheckPsd(m, path, what));
  return m;
}

}  // namespace

absl::Status CheckPsd(const Eigen::MatrixXd& m, const std::string& name,
                      absl::string_view what) {
  const double scale = m.cwiseAbs().maxCoeff();
  const double asym = (m - m.transpose()).cwiseAbs().maxCoeff();
  if (asym > kPsdTolerance * scale) {
    return Bad(name, absl::StrCat(what,
                                  " is not symmetric positive semi-definite: "
                                  "max |S - S^T| = ",
                                  asym, " (max |S| = ", scale, ")"));
  }
  // λ_min >= -tol·tr(S) ⇔ S + tol·tr(S)·I is positive definite: one blocked
  // Cholesky (d³/3 flops) instead of an eigen-decomposition.
  const double shift = kPsdTolerance * std::max(m.trace(), 0.0) +
                       std::numeric_limits<double>::min();
  Eigen::MatrixXd shifted = m;
  shifted.diagonal().array() += shift;
  Eigen::LLT<Eigen::MatrixXd> llt(shifted);
  if (m.trace() < 0 || llt.info() != Eigen::Success) {
    return Bad(name, absl::StrCat(what,
                                  " is not symmetric positive semi-definite "
                                  "(an eigenvalue is below -",
                                  kPsdTolerance, " * trace)"));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(const tools::NpyArray& x, const std::string& name) {
  for (size_t i = 0; i < x.data.size(); ++i) {
    if (std::isfinite(x.data[i])) continue;
    std::vector<int64_t> index(x.shape.size());
    size_t rest = i;
    for (size_t k = x.shape.size(); k-- > 0;) {
      index[k] = static_cast<int64_t>(rest % x.shape[k]);
      rest /= x.shape[k];
    }
    return Bad(name, absl::StrCat("non-finite value ", x.data[i], " at index ",
                                  Shape(index)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Inputs> LoadInputs(const InputPaths& paths) {
  Inputs in;
  if (!paths.grad.empty()) {
    ASSIGN_OR_RETURN(tools::NpyArray w,
                     Load(paths.grad, "[d_out, d_in]", 2, 2));
    in.shape = {1, 1, w.shape[0], w.shape[1]};
    in.grads = std::move(w.data);
  } else {
    ASSIGN_OR_RETURN(tools::NpyArray w,
                     Load(paths.grad_workers,
                          "[R, d_out, d_in] or [T, R, d_out, d_in]", 3, 4));
    const size_t o = w.shape.size() - 3;
    in.shape = {o == 1 ? w.shape[0] : 1, w.shape[o], w.shape[o + 1],
                w.shape[o + 2]};
    in.grads = std::move(w.data);
  }
  const int64_t d_out = in.shape.d_out, d_in = in.shape.d_in;
  if (!paths.a.empty()) {
    ASSIGN_OR_RETURN(in.a, LoadMoment(paths.a, d_in, "A", "d_in"));
  }
  if (!paths.g.empty()) {
    ASSIGN_OR_RETURN(in.g, LoadMoment(paths.g, d_out, "G", "d_out"));
  }
  if (!paths.acts.empty()) {
    ASSIGN_OR_RETURN(tools::NpyArray x, Load(paths.acts, "[rows, d_in]", 2, 2));
    if (x.shape[1] != d_in) {
      return Bad(paths.acts, absl::StrCat("shape ", Shape(x.shape),
                                          " does not match d_in = ", d_in,
                                          " of the gradient"));
    }
    in.acts = Eigen::Map<const RowMatrixf>(x.data.data(), x.shape[0], d_in);
  }
  return in;
}

}  // namespace gift::fidelity
