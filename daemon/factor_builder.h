// The numerical step of the factor refresher (DESIGN §2): turns the summed
// activation statistics of a layer's sketch window into a new whitening
// factor, on the CPU (LAPACK via linalg/) or on the daemon's own CUDA
// stream with its cuSOLVER/cuBLAS handles (linalg/cuda_linalg.h).
//
// Low-rank: E[aaᵀ] ≈ Y / count from the Nyström sketch Y = Σ aᵀ(aΩ);
// top-r eigenpairs (U, λ) by the stable Nyström reconstruction; floor
// σ² = max((tr − Σλ)/(d − r), β·tr/d) with tr = trace/count; λ' = max(λ, σ²);
// c = √(σ²/λ') − 1, c_inv = √(λ'/σ²) − 1; and the next test matrix
// Ω' = orth[U | G] (G Gaussian from `seed`), d × k.
// Full: A = Σaᵀa / count, τ = β·tr A/d, T = (A + τI)^(-1/2),
// T⁻¹ = (A + τI)^(1/2).
//
//   ASSIGN_OR_RETURN(auto builder, FactorBuilder::Create(/*device=*/-1));
//   ASSIGN_OR_RETURN(LowRankFactorData f,
//                    builder->LowRank(y, omega, trace, count, 32, 1.0, 48,
//                                     seed));
//
// Thread safety: not thread-safe (one CUDA context / scratch); the daemon
// gives each refresher thread its own builder.
#ifndef GIFT_DAEMON_FACTOR_BUILDER_H_
#define GIFT_DAEMON_FACTOR_BUILDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::daemon {

struct LowRankFactorData {
  int r = 0;
  int64_t d_in = 0;
  std::vector<float> u;       // d_in × r, row-major
  std::vector<float> lambda;  // r: λ, unclipped (raised to >= 0)
  std::vector<float> c;       // r
  std::vector<float> c_inv;   // r
  double sigma2 = 0;
  double trace_mean = 0;          // tr A the floor was formed from
  std::vector<float> omega_next;  // d_in × k, row-major
};

struct FullFactorData {
  int64_t d_in = 0;
  std::vector<float> t;      // d_in × d_in
  std::vector<float> t_inv;  // d_in × d_in
  double tau = 0;
};

class FactorBuilder {
 public:
  // device < 0: CPU. Otherwise the CUDA device; FAILED_PRECONDITION when
  // the build has no CUDA or the device cannot be used.
  static absl::StatusOr<std::unique_ptr<FactorBuilder>> Create(int device);
  virtual ~FactorBuilder() = default;

  virtual bool on_device() const = 0;

  // y, omega: d × k row-major (y summed over ranks). INVALID_ARGUMENT for
  // count <= 0, trace <= 0 or non-finite, 1 <= r <= k <= d violated,
  // k_next outside [r, d], non-finite y, or beta <= 0.
  virtual absl::StatusOr<LowRankFactorData> LowRank(
      const std::vector<float>& y, const std::vector<float>& omega, int64_t d,
      int64_t k, double trace, int64_t count, int r, double beta, int k_next,
      uint64_t seed) = 0;

  // a: d × d row-major Σaᵀa. INVALID_ARGUMENT for count <= 0, a non-finite
  // or not symmetric PSD within rounding, beta <= 0.
  virtual absl::StatusOr<FullFactorData> Full(const std::vector<float>& a,
                                              int64_t d, double trace,
                                              int64_t count, double beta) = 0;
};

// The initial test matrix Ω₀ (orthonormalised Gaussian from the job seed),
// d × k row-major: identical on every node for the same seed.
std::vector<float> InitialOmega(int64_t d, int64_t k, uint64_t seed);

// Shared by the CPU builder (factor_builder.cc) and the GPU builder
// (factor_builder_cuda.cc) through their common base HostFactorBuilder
// (factor_builder_host.h), so both validate and finish identically. Kept
// free of Eigen and CUDA types: this header is included by daemon code that
// sees neither.
namespace internal {

// The INVALID_ARGUMENT checks listed at FactorBuilder::LowRank.
absl::Status CheckLowRankArgs(const std::vector<float>& y,
                              const std::vector<float>& omega, int64_t d,
                              int64_t k, double trace, int64_t count, int r,
                              double beta, int k_next);

// Shape, count, beta, finiteness and symmetry of Full's input (PSD is
// checked on the spectrum: CheckFullSpectrum).
absl::Status CheckFullArgs(const std::vector<float>& a, int64_t d, double trace,
                           int64_t count, double beta);
absl::Status CheckFullSpectrum(double lambda_min, double lambda_max);

// The host-side end of LowRank from the top-r eigenpairs of E[aaᵀ]
// (u: d × r column-major, lambda: r descending): floor, clipping,
// coefficients and the next test matrix.
LowRankFactorData FinishLowRank(int64_t d, int r, const double* u,
                                const double* lambda, double trace_mean,
                                double beta, int k_next, uint64_t seed);

// Defined in factor_builder_cuda.cc (CUDA builds only).
absl::StatusOr<std::unique_ptr<FactorBuilder>> CreateCudaFactorBuilder(
    int device);

}  // namespace internal

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_FACTOR_BUILDER_H_
