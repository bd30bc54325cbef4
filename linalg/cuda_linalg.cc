// cuSOLVER / cuBLAS versions of the factor math. Each call uploads its host
// matrices on ctx's stream, runs there, downloads and synchronises; device
// memory is per call (the refresher runs every few hundred steps, so the
// cudaMalloc cost does not matter next to the factorisations).
#include "linalg/cuda_linalg.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "linalg/matrix_function.h"

namespace gift::linalg::cuda {
namespace {

constexpr int kShiftRetries = 4;

// Owning device array of doubles / ints; freed when it goes out of scope.
template <typename T>
class DevArray {
 public:
  DevArray() = default;
  ~DevArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DevArray(const DevArray&) = delete;
  DevArray& operator=(const DevArray&) = delete;
  absl::Status Allocate(size_t n) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void**>(&p_), sizeof(T) * (n ? n : 1)));
    return absl::OkStatus();
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

cudaStream_t Stream(gpu::Context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}
cusolverDnHandle_t Solver(gpu::Context& ctx) {
  return static_cast<cusolverDnHandle_t>(ctx.cusolver());
}
cublasHandle_t Blas(gpu::Context& ctx) {
  return static_cast<cublasHandle_t>(ctx.cublas());
}

absl::Status Upload(gpu::Context& ctx, double* dst, const double* src,
                    size_t n) {
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      dst, src, sizeof(double) * n, cudaMemcpyHostToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status Download(gpu::Context& ctx, double* dst, const double* src,
                      size_t n) {
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      dst, src, sizeof(double) * n, cudaMemcpyDeviceToHost, Stream(ctx)));
  return absl::OkStatus();
}

// Waits for the stream, then reads devInfo (0 = success).
absl::StatusOr<int> SyncAndReadInfo(gpu::Context& ctx, const int* dev_info) {
  int info = 0;
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      &info, dev_info, sizeof(int), cudaMemcpyDeviceToHost, Stream(ctx)));
  RETURN_IF_ERROR(ctx.Synchronize());
  return info;
}

absl::Status CheckSquareFinite(const Eigen::MatrixXd& a, const char* who) {
  if (a.rows() != a.cols() || a.rows() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": need a non-empty square matrix, got ", a.rows(),
                     " x ", a.cols()));
  }
  if (!a.allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": non-finite entry"));
  }
  return absl::OkStatus();
}

// Eigen-decomposition of the n × n device matrix `a` (overwritten by the
// eigenvectors, ascending) into `w`: all of them (dsyevd), or the top
// `count` via dsyevdx with index range.
absl::Status DeviceEigh(gpu::Context& ctx, double* a, int n, int count,
                        double* w) {
  const bool all = count == n;
  const cusolverEigRange_t range =
      all ? CUSOLVER_EIG_RANGE_ALL : CUSOLVER_EIG_RANGE_I;
  const int il = n - count + 1, iu = n;  // 1-based
  int lwork = 0, found = 0;
  if (all) {
    GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDsyevd_bufferSize(
        Solver(ctx), CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, a, n,
        w, &lwork));
  } else {
    GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDsyevdx_bufferSize(
        Solver(ctx), CUSOLVER_EIG_MODE_VECTOR, range, CUBLAS_FILL_MODE_LOWER, n,
        a, n, 0.0, 0.0, il, iu, &found, w, &lwork));
  }
  DevArray<double> work;
  DevArray<int> info;
  RETURN_IF_ERROR(work.Allocate(lwork));
  RETURN_IF_ERROR(info.Allocate(1));
  if (all) {
    GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDsyevd(
        Solver(ctx), CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, a, n,
        w, work.get(), lwork, info.get()));
  } else {
    GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDsyevdx(
        Solver(ctx), CUSOLVER_EIG_MODE_VECTOR, range, CUBLAS_FILL_MODE_LOWER, n,
        a, n, 0.0, 0.0, il, iu, &found, w, work.get(), lwork, info.get()));
  }
  ASSIGN_OR_RETURN(int dev_info, SyncAndReadInfo(ctx, info.get()));
  if (dev_info != 0 || (!all && found != count)) {
    return absl::InternalError(
        absl::StrCat("cuSOLVER syevd(x) failed: info=", dev_info, ", found ",
                     all ? n : found, " of ", count));
  }
  return absl::OkStatus();
}

// Top-r eigenpairs of the host matrix a (lower triangle), descending.
absl::StatusOr<EigenPairs> TopPairs(gpu::Context& ctx, const Eigen::MatrixXd& a,
                                    int r) {
  const int n = static_cast<int>(a.rows());
  DevArray<double> d_a, d_w;
  RETURN_IF_ERROR(d_a.Allocate(a.size()));
  RETURN_IF_ERROR(d_w.Allocate(n));
  RETURN_IF_ERROR(Upload(ctx, d_a.get(), a.data(), a.size()));
  RETURN_IF_ERROR(DeviceEigh(ctx, d_a.get(), n, r, d_w.get()));
  Eigen::MatrixXd z(n, r);
  Eigen::VectorXd w(r);
  RETURN_IF_ERROR(Download(ctx, z.data(), d_a.get(), z.size()));
  RETURN_IF_ERROR(Download(ctx, w.data(), d_w.get(), r));
  RETURN_IF_ERROR(ctx.Synchronize());
  // All mode leaves the top r in the last columns; range I in the first.
  const bool all = r == n;
  EigenPairs e;
  e.lambda = (all ? w.tail(r) : w.head(r)).reverse();
  e.u = (all ? z.rightCols(r) : z.leftCols(r)).rowwise().reverse();
  return e;
}

absl::Status CheckNystromArgs(const Eigen::MatrixXd& y,
                              const Eigen::MatrixXd& omega, int r) {
  if (y.rows() != omega.rows() || y.cols() != omega.cols() || y.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: y is ", y.rows(), " x ", y.cols(), ", omega is ",
        omega.rows(), " x ", omega.cols(), " (need equal, non-empty)"));
  }
  if (y.cols() > y.rows() || y.size() > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: need k <= d, got k=", y.cols(), " d=", y.rows()));
  }
  if (r < 1 || r > y.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NystromEigenpairs: r=", r, " not in [1, k=", y.cols(), "]"));
  }
  if (!y.allFinite() || !omega.allFinite()) {
    return absl::InvalidArgumentError("NystromEigenpairs: non-finite input");
  }
  return absl::OkStatus();
}

// Device buffers of one Nyström reconstruction (d × k sketch).
struct NystromBuffers {
  DevArray<double> y, omega, y_nu, b, c, s, u, vt, work, rwork;
  DevArray<int> info;
};

// Cholesky (upper) of the k × k device matrix c, in place; returns devInfo
// (> 0: not positive definite).
absl::StatusOr<int> DevicePotrfUpper(gpu::Context& ctx, double* c, int k) {
  int lwork = 0;
  GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDpotrf_bufferSize(
      Solver(ctx), CUBLAS_FILL_MODE_UPPER, k, c, k, &lwork));
  DevArray<double> work;
  DevArray<int> info;
  RETURN_IF_ERROR(work.Allocate(lwork));
  RETURN_IF_ERROR(info.Allocate(1));
  GIFT_CUSOLVER_RETURN_IF_ERROR(
      cusolverDnDpotrf(Solver(ctx), CUBLAS_FILL_MODE_UPPER, k, c, k, work.get(),
                       lwork, info.get()));
  return SyncAndReadInfo(ctx, info.get());
}

// y_nu = Y + νΩ, c = chol_upper(sym(Ωᵀ y_nu)); returns potrf's devInfo.
absl::StatusOr<int> ShiftedCholesky(gpu::Context& ctx, NystromBuffers& b, int d,
                                    int k, double nu) {
  const size_t n = static_cast<size_t>(d) * k;
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(b.y_nu.get(), b.y.get(), sizeof(double) * n,
                      cudaMemcpyDeviceToDevice, Stream(ctx)));
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasDaxpy(Blas(ctx), static_cast<int>(n), &nu,
                                          b.omega.get(), 1, b.y_nu.get(), 1));
  const double one = 1.0, zero = 0.0, half = 0.5;
  GIFT_CUBLAS_RETURN_IF_ERROR(
      cublasDgemm(Blas(ctx), CUBLAS_OP_T, CUBLAS_OP_N, k, k, d, &one,
                  b.omega.get(), d, b.y_nu.get(), d, &zero, b.b.get(), k));
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasDgeam(Blas(ctx), CUBLAS_OP_N, CUBLAS_OP_T,
                                          k, k, &half, b.b.get(), k, &half,
                                          b.b.get(), k, b.c.get(), k));
  return DevicePotrfUpper(ctx, b.c.get(), k);
}

// Thin SVD of F = y_nu C⁻¹ (d × k, destroyed); singular values into b.s,
// left vectors into b.u.
absl::Status SolveAndSvd(gpu::Context& ctx, NystromBuffers& b, int d, int k) {
  const double one = 1.0;
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasDtrsm(
      Blas(ctx), CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
      CUBLAS_DIAG_NON_UNIT, d, k, &one, b.c.get(), k, b.y_nu.get(), d));
  int lwork = 0;
  GIFT_CUSOLVER_RETURN_IF_ERROR(
      cusolverDnDgesvd_bufferSize(Solver(ctx), d, k, &lwork));
  RETURN_IF_ERROR(b.work.Allocate(lwork));
  signed char jobu = 'S', jobvt = 'N';
  GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnDgesvd(
      Solver(ctx), jobu, jobvt, d, k, b.y_nu.get(), d, b.s.get(), b.u.get(), d,
      b.vt.get(), k, b.work.get(), lwork, b.rwork.get(), b.info.get()));
  ASSIGN_OR_RETURN(int info, SyncAndReadInfo(ctx, b.info.get()));
  if (info != 0) {
    return absl::InternalError(
        absl::StrCat("cusolverDnDgesvd failed: info=", info));
  }
  return absl::OkStatus();
}

absl::Status AllocateNystrom(NystromBuffers& b, int d, int k) {
  const size_t n = static_cast<size_t>(d) * k;
  for (DevArray<double>* p : {&b.y, &b.omega, &b.y_nu, &b.u}) {
    RETURN_IF_ERROR(p->Allocate(n));
  }
  for (DevArray<double>* p : {&b.b, &b.c, &b.vt}) {
    RETURN_IF_ERROR(p->Allocate(static_cast<size_t>(k) * k));
  }
  RETURN_IF_ERROR(b.s.Allocate(k));
  RETURN_IF_ERROR(b.rwork.Allocate(k));
  return b.info.Allocate(1);
}

}  // namespace

absl::StatusOr<EigenPairs> TopEigenpairs(gpu::Context& ctx,
                                         const Eigen::MatrixXd& a, int r) {
  const Eigen::Index n = a.rows();
  if (a.cols() != n || n == 0 || n > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopEigenpairs: need a non-empty square matrix, got ",
                     a.rows(), " x ", a.cols()));
  }
  if (r < 1 || r > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopEigenpairs: r=", r, " not in [1, ", n, "]"));
  }
  const Eigen::MatrixXd lower = a.triangularView<Eigen::Lower>();
  if (!lower.allFinite()) {
    return absl::InvalidArgumentError("TopEigenpairs: non-finite entry");
  }
  return TopPairs(ctx, a, r);
}

absl::StatusOr<EigenPairs> NystromEigenpairs(gpu::Context& ctx,
                                             const Eigen::MatrixXd& y,
                                             const Eigen::MatrixXd& omega,
                                             int r) {
  RETURN_IF_ERROR(CheckNystromArgs(y, omega, r));
  const int d = static_cast<int>(y.rows());
  const int k = static_cast<int>(y.cols());
  const double y_norm = y.norm();
  if (y_norm == 0) {  // as on the CPU: A vanishes on span(Ω)
    return EigenPairs{omega.leftCols(r), Eigen::VectorXd::Zero(r)};
  }
  NystromBuffers b;
  RETURN_IF_ERROR(AllocateNystrom(b, d, k));
  RETURN_IF_ERROR(Upload(ctx, b.y.get(), y.data(), y.size()));
  RETURN_IF_ERROR(Upload(ctx, b.omega.get(), omega.data(), omega.size()));
  double nu = std::sqrt(static_cast<double>(d)) *
              std::numeric_limits<double>::epsilon() * y_norm;
  for (int attempt = 0; attempt <= kShiftRetries; ++attempt) {
    ASSIGN_OR_RETURN(int info, ShiftedCholesky(ctx, b, d, k, nu));
    if (info > 0) {
      nu *= 100.0;  // numerically indefinite: shift further, as on the CPU
      continue;
    }
    if (info < 0) {
      return absl::InternalError(
          absl::StrCat("cusolverDnDpotrf: bad argument ", -info));
    }
    RETURN_IF_ERROR(SolveAndSvd(ctx, b, d, k));
    Eigen::MatrixXd u(d, r);
    Eigen::VectorXd s(r);
    RETURN_IF_ERROR(Download(ctx, u.data(), b.u.get(), u.size()));
    RETURN_IF_ERROR(Download(ctx, s.data(), b.s.get(), r));
    RETURN_IF_ERROR(ctx.Synchronize());
    EigenPairs e;
    e.u = std::move(u);
    e.lambda = (s.array().square() - nu).max(0.0).matrix();
    return e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "NystromEigenpairs: Ωᵀ(Y + νΩ) is not positive definite even with "
      "shift ν=",
      nu / 100.0, "; Y is not the sketch A Ω of a PSD matrix A"));
}

absl::StatusOr<Eigen::MatrixXd> SymmetricPower(gpu::Context& ctx,
                                               const Eigen::MatrixXd& a,
                                               double shift, double power) {
  RETURN_IF_ERROR(CheckSquareFinite(a, "SymmetricPower"));
  if (!std::isfinite(shift) || !std::isfinite(power) ||
      a.rows() > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        "SymmetricPower: non-finite shift or power, or matrix too large");
  }
  const int n = static_cast<int>(a.rows());
  DevArray<double> d_a, d_w, d_scaled, d_out;
  RETURN_IF_ERROR(d_a.Allocate(a.size()));
  RETURN_IF_ERROR(d_w.Allocate(n));
  RETURN_IF_ERROR(d_scaled.Allocate(a.size()));
  RETURN_IF_ERROR(d_out.Allocate(a.size()));
  RETURN_IF_ERROR(Upload(ctx, d_a.get(), a.data(), a.size()));
  RETURN_IF_ERROR(DeviceEigh(ctx, d_a.get(), n, n, d_w.get()));
  Eigen::VectorXd mu(n);
  RETURN_IF_ERROR(Download(ctx, mu.data(), d_w.get(), n));
  RETURN_IF_ERROR(ctx.Synchronize());
  // Same zero tolerance and domain rules as the CPU version.
  ASSIGN_OR_RETURN(const Eigen::VectorXd f,
                   internal::ShiftedEigenvaluePower(mu, shift, power));
  RETURN_IF_ERROR(Upload(ctx, d_w.get(), f.data(), n));
  // out = (U diag(f)) Uᵀ.
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasDdgmm(Blas(ctx), CUBLAS_SIDE_RIGHT, n, n,
                                          d_a.get(), n, d_w.get(), 1,
                                          d_scaled.get(), n));
  const double one = 1.0, zero = 0.0;
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasDgemm(Blas(ctx), CUBLAS_OP_N, CUBLAS_OP_T,
                                          n, n, n, &one, d_scaled.get(), n,
                                          d_a.get(), n, &zero, d_out.get(), n));
  Eigen::MatrixXd out(n, n);
  RETURN_IF_ERROR(Download(ctx, out.data(), d_out.get(), out.size()));
  RETURN_IF_ERROR(ctx.Synchronize());
  return (0.5 * (out + out.transpose())).eval();
}

}  // namespace gift::linalg::cuda
