// GPU (cuSOLVER / cuBLAS) versions of the factor math, for the daemon's
// refresher on its own stream. Same semantics as eigen_pairs.h, nystrom.h and
// matrix_function.h; host matrices in and out, the work on ctx's stream
// (synchronised before returning). Available only in CUDA builds; without a
// device, every call returns UNAVAILABLE.
//
// Thread safety: one call at a time per Context.
#ifndef GIFT_LINALG_CUDA_LINALG_H_
#define GIFT_LINALG_CUDA_LINALG_H_

#include <Eigen/Dense>

#include "absl/status/statusor.h"
#include "kernels/gpu.h"
#include "linalg/eigen_pairs.h"

namespace gift::linalg::cuda {

absl::StatusOr<EigenPairs> TopEigenpairs(gpu::Context& ctx,
                                         const Eigen::MatrixXd& a, int r);
absl::StatusOr<EigenPairs> NystromEigenpairs(gpu::Context& ctx,
                                             const Eigen::MatrixXd& y,
                                             const Eigen::MatrixXd& omega,
                                             int r);
absl::StatusOr<Eigen::MatrixXd> SymmetricPower(gpu::Context& ctx,
                                               const Eigen::MatrixXd& a,
                                               double shift, double power);

}  // namespace gift::linalg::cuda

#endif  // GIFT_LINALG_CUDA_LINALG_H_
