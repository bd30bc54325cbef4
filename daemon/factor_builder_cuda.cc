// The GPU factor builder (factor_builder.h): the factorisations run with
// cuSOLVER/cuBLAS on the builder's own stream (gpu::Context), so a refresh
// never queues behind the trainer's kernels; validation and the cheap
// host-side finishing are shared with the CPU builder. Compiled only in
// CUDA builds (GIFT_HAVE_CUDA).
#include <Eigen/Dense>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/factor_builder.h"
#include "kernels/gpu.h"
#include "linalg/cuda_linalg.h"
#include "linalg/row_major.h"

namespace gift::daemon {
namespace {

class CudaFactorBuilder : public FactorBuilder {
 public:
  explicit CudaFactorBuilder(std::unique_ptr<gpu::Context> ctx)
      : ctx_(std::move(ctx)) {}

  bool on_device() const override { return true; }

  absl::StatusOr<LowRankFactorData> LowRank(const std::vector<float>& y,
                                            const std::vector<float>& omega,
                                            int64_t d, int64_t k, double trace,
                                            int64_t count, int r, double beta,
                                            int k_next,
                                            uint64_t seed) override {
    RETURN_IF_ERROR(internal::CheckLowRankArgs(y, omega, d, k, trace, count, r,
                                               beta, k_next));
    const Eigen::MatrixXd y_mean = linalg::FromRowMajorFloat(y, d, k) / count;
    ASSIGN_OR_RETURN(
        linalg::EigenPairs e,
        linalg::cuda::NystromEigenpairs(
            *ctx_, y_mean, linalg::FromRowMajorFloat(omega, d, k), r));
    return internal::FinishLowRank(d, r, e.u.data(), e.lambda.data(),
                                   trace / count, beta, k_next, seed);
  }

  // Three factorisations on the device (extreme eigenvalues for the PSD
  // check, then the two powers); each is O(d³) there, which keeps the host
  // free of any d × d × d product.
  absl::StatusOr<FullFactorData> Full(const std::vector<float>& a, int64_t d,
                                      double trace, int64_t count,
                                      double beta) override {
    RETURN_IF_ERROR(internal::CheckFullArgs(a, d, trace, count, beta));
    Eigen::MatrixXd m = linalg::FromRowMajorFloat(a, d, d) / count;
    m = 0.5 * (m + m.transpose());
    ASSIGN_OR_RETURN(linalg::EigenPairs top,
                     linalg::cuda::TopEigenpairs(*ctx_, m, 1));
    ASSIGN_OR_RETURN(linalg::EigenPairs bottom,
                     linalg::cuda::TopEigenpairs(*ctx_, -m, 1));
    RETURN_IF_ERROR(
        internal::CheckFullSpectrum(-bottom.lambda(0), top.lambda(0)));
    FullFactorData out;
    out.d_in = d;
    out.tau = beta * m.trace() / d;
    ASSIGN_OR_RETURN(Eigen::MatrixXd t,
                     linalg::cuda::SymmetricPower(*ctx_, m, out.tau, -0.5));
    ASSIGN_OR_RETURN(Eigen::MatrixXd t_inv,
                     linalg::cuda::SymmetricPower(*ctx_, m, out.tau, 0.5));
    out.t = linalg::ToRowMajorFloat(t);
    out.t_inv = linalg::ToRowMajorFloat(t_inv);
    return out;
  }

 private:
  std::unique_ptr<gpu::Context> ctx_;
};

}  // namespace

namespace internal {

absl::StatusOr<std::unique_ptr<FactorBuilder>> CreateCudaFactorBuilder(
    int device) {
  const int n = gpu::DeviceCount();
  if (device >= n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FactorBuilder: CUDA device ", device, " requested but ", n,
        " usable device(s) are visible (no driver or no GPU?); use device "
        "-1 for the CPU builder"));
  }
  auto ctx = gpu::Context::Create(device);
  if (!ctx.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("FactorBuilder: cannot use CUDA device ", device, ": ",
                     ctx.status().message()));
  }
  return std::make_unique<CudaFactorBuilder>(std::move(ctx).value());
}

}  // namespace internal
}  // namespace gift::daemon
