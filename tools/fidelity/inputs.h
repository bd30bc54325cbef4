// Loads and validates gift-fidelity's input files: rank and shape of every
// array, shape agreement between them, finite values (the first bad index
// is named), and a symmetric positive semi-definite A and G. Every failure
// is INVALID_ARGUMENT (NOT_FOUND for a missing file) with a one-line
// message naming the file.
//
//   InputPaths p; p.grad = "W.npy"; p.a = "A.npy";
//   ASSIGN_OR_RETURN(Inputs in, LoadInputs(p));
//
// Thread safety: pure function (reads the files named).
#ifndef GIFT_TOOLS_FIDELITY_INPUTS_H_
#define GIFT_TOOLS_FIDELITY_INPUTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/fidelity/matrix.h"
#include "tools/fidelity/workers.h"
#include "tools/npy.h"

namespace gift::fidelity {

// Tolerance of the symmetric-PSD check of A and G: max|S − Sᵀ| <=
// tol·max|S| and smallest eigenvalue >= −tol·tr(S) (float32 moments carry
// rounding of about that order).
inline constexpr double kPsdTolerance = 1e-5;

struct InputPaths {
  std::string grad;          // [d_out, d_in]
  std::string grad_workers;  // [R, d_out, d_in] or [T, R, d_out, d_in]
  std::string a;             // [d_in, d_in]
  std::string g;             // [d_out, d_out]
  std::string acts;          // [rows, d_in]
};

struct Inputs {
  WorkerShape shape;  // steps = workers = 1 for a single gradient
  // The gradient(s) in C order: shape.steps × shape.workers × d_out × d_in.
  std::vector<float> grads;
  std::optional<Eigen::MatrixXd> a;
  std::optional<Eigen::MatrixXd> g;
  std::optional<RowMatrixf> acts;
};

// OK, or INVALID_ARGUMENT naming `name` and the first non-finite index.
absl::Status CheckFinite(const tools::NpyArray& x, const std::string& name);

// OK when `m` is symmetric PSD within kPsdTolerance; INVALID_ARGUMENT
// naming `name` and `what` ("A", "G") otherwise.
absl::Status CheckPsd(const Eigen::MatrixXd& m, const std::string& name,
                      absl::string_view what);

// REQUIRES: exactly one of paths.grad, paths.grad_workers is non-empty.
absl::StatusOr<Inputs> LoadInputs(const InputPaths& paths);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_INPUTS_H_
