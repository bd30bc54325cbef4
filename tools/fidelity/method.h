// Names of the gradient transforms gift-fidelity compares, parsed into a
// plain description, and the default method list for the inputs given.
//
// Grammar (see gift-fidelity --help for the definitions):
//   euclid | euclid_block<B> | diagA | fullA_chol | fullA_sym[:<β>] |
//   blockA_<b> | lowrankA_<r>[:<β>] | nystromA_<r>[:<β>] | outG_chol |
//   kfac_chol
// β is a positive decimal (e.g. "1.0", "0.3"); without it the variant uses
// the paper-literal damping γ = 1e-3·tr(S)/dim.
//
//   ASSIGN_OR_RETURN(MethodSpec m, ParseMethod("lowrankA_32:1.0"));
//   // m.kind == MethodKind::kLowRankA, m.rank == 32, m.beta == 1.0
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_FIDELITY_METHOD_H_
#define GIFT_TOOLS_FIDELITY_METHOD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::fidelity {

enum class MethodKind {
  kEuclid,
  kDiagA,
  kFullACholesky,
  kFullASymmetric,
  kBlockA,
  kLowRankA,
  kNystromA,
  kOutGCholesky,
  kKfacCholesky,
};

struct MethodSpec {
  // The name as given (the key in reports).
  std::string name;
  MethodKind kind = MethodKind::kEuclid;
  // Quantization block size; 0 = one scale per tensor (euclid_block<B>).
  int64_t block_size = 0;
  // blockA_<b>: b. lowrankA_<r>, nystromA_<r>: r.
  int64_t rank = 0;
  // Damping strength β when given (":<β>"); paper-literal γ otherwise.
  std::optional<double> beta;

  bool NeedsA() const;  // A, or X to compute it from
  bool NeedsX() const;  // the activations themselves (Nyström)
  bool NeedsG() const;
};

absl::StatusOr<MethodSpec> ParseMethod(absl::string_view name);

// Comma-separated list; rejects empty entries and duplicates.
absl::StatusOr<std::vector<MethodSpec>> ParseMethodList(absl::string_view list);

// The one-step default: euclid, euclid_block512 and every method whose
// inputs are present (has_a: A or X given).
std::vector<std::string> DefaultMethods(bool has_a, bool has_x, bool has_g);

// The worker-mode default: euclid, plus lowrankA_32:1.0 when has_a.
std::vector<std::string> DefaultWorkerMethods(bool has_a);

// OK when every input `m` needs is present; otherwise INVALID_ARGUMENT
// naming the flag that is missing.
absl::Status CheckInputs(const MethodSpec& m, bool has_a, bool has_x,
                         bool has_g);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_METHOD_H_
