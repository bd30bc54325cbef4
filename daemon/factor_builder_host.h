// Private to the factor builders (factor_builder.cc, factor_builder_cuda.cc):
// the host side of LowRank and Full that both builders share (validation,
// the means of the summed statistics, the shift τ and the finishing of the
// factor data), around the factorisations that each runs where it runs them
// (LAPACK on the CPU, cuSOLVER on the builder's stream). Kept out of
// factor_builder.h, which daemon code without Eigen includes.
//
//   class MyBuilder : public internal::HostFactorBuilder {
//     absl::StatusOr<linalg::EigenPairs> NystromEigenpairs(...) override;
//     absl::StatusOr<WhiteningPair> Whitening(...) override;
//   };
//
// Thread safety: as FactorBuilder (one thread at a time).
#ifndef GIFT_DAEMON_FACTOR_BUILDER_HOST_H_
#define GIFT_DAEMON_FACTOR_BUILDER_HOST_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/factor_builder.h"
#include "linalg/eigen_pairs.h"

namespace gift::daemon::internal {

class HostFactorBuilder : public FactorBuilder {
 public:
  absl::StatusOr<LowRankFactorData> LowRank(const std::vector<float>& y,
                                            const std::vector<float>& omega,
                                            int64_t d, int64_t k, double trace,
                                            int64_t count, int r, double beta,
                                            int k_next, uint64_t seed) final;
  absl::StatusOr<FullFactorData> Full(const std::vector<float>& a, int64_t d,
                                      double trace, int64_t count,
                                      double beta) final;

 protected:
  struct WhiteningPair {
    Eigen::MatrixXd t;      // (M + τI)^(-1/2)
    Eigen::MatrixXd t_inv;  // (M + τI)^(1/2)
  };

  // The top-r eigenpairs of E[aaᵀ] by the Nyström reconstruction from the
  // mean sketch y_mean = Y / count and its test matrix omega (both d × k).
  virtual absl::StatusOr<linalg::EigenPairs> NystromEigenpairs(
      const Eigen::MatrixXd& y_mean, const Eigen::MatrixXd& omega, int r) = 0;

  // For the symmetric mean m (d × d): INVALID_ARGUMENT unless its spectrum
  // passes CheckFullSpectrum, else the whitening pair at shift `tau`.
  virtual absl::StatusOr<WhiteningPair> Whitening(const Eigen::MatrixXd& m,
                                                  double tau) = 0;
};

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_FACTOR_BUILDER_HOST_H_
