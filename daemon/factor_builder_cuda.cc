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
#include "daemon/factor_builder_host.h"
#include "kernels/gpu.h"
#include "linalg/cuda_linalg.h"

namespace gift::daemon {
namespace {

class CudaFactorBuilder : public internal::HostFactorBuilder {
 public:
  explicit CudaFactorBuilder(std::unique_ptr<gpu::Context> ctx)
      : ctx_(std::move(ctx)) {}

  bool on_device() const override { return true; }

 protected:
  absl::StatusOr<linalg::EigenPairs> NystromEigenpairs(
      const Eigen::MatrixXd& y_mean, const Eigen::MatrixXd& omega,
      int r) override {
    return linalg::cuda::NystromEigenpairs(*ctx_, y_mean, omega, r);
  }

  // Three factorisations on the device (extreme eigenvalues for the PSD
  // check, then the two powers); each is O(d³) there, which keeps the host
  // free of any d × d × d product.
  absl::StatusOr<WhiteningPair> Whitening(const Eigen::MatrixXd& m,
                                          double tau) override {
    ASSIGN_OR_RETURN(linalg::EigenPairs top,
                     linalg::cuda::TopEigenpairs(*ctx_, m, 1));
    ASSIGN_OR_RETURN(linalg::EigenPairs bottom,
                     linalg::cuda::TopEigenpairs(*ctx_, -m, 1));
    RETURN_IF_ERROR(
        internal::CheckFullSpectrum(-bottom.lambda(0), top.lambda(0)));
    WhiteningPair p;
    ASSIGN_OR_RETURN(p.t, linalg::cuda::SymmetricPower(*ctx_, m, tau, -0.5));
    ASSIGN_OR_RETURN(p.t_inv, linalg::cuda::SymmetricPower(*ctx_, m, tau, 0.5));
    return p;
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
