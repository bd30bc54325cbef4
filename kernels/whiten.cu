// CUDA whitening transforms: cuBLAS float32 GEMMs on ctx's stream.
//
// Data are row-major; cuBLAS is column-major. A row-major m × n matrix is
// the column-major n × m matrix of its transpose, so C = A·B (row-major) is
// issued as Cᵀ = Bᵀ·Aᵀ with the operands swapped and no transposition.
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "kernels/whiten.h"

namespace gift::kernels::cuda {
namespace {

absl::Status CheckFitsInt(int64_t rows, int64_t d) {
  if (rows > INT_MAX || d > INT_MAX || rows * d > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matrix ", rows, " x ", d, " exceeds the 32-bit cuBLAS index range"));
  }
  return absl::OkStatus();
}

// out = x + add (either may be null); cublasSgeam allows C to alias A or B
// when untransposed with equal leading dimensions.
absl::Status CopyOrAdd(gpu::Context& ctx, const float* x, const float* add,
                       float* out, int rows, int d) {
  auto blas = static_cast<cublasHandle_t>(ctx.cublas());
  if (add != nullptr) {
    const float one = 1.0f;
    GIFT_CUBLAS_RETURN_IF_ERROR(cublasSgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, d,
                                            rows, &one, x, d, &one, add, d, out,
                                            d));
  } else if (out != x) {
    GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        out, x, sizeof(float) * static_cast<size_t>(rows) * d,
        cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyLowRank(gpu::Context& ctx, const float* x, int64_t rows,
                          const LowRankView& f, const float* add, float* out,
                          float* workspace) {
  RETURN_IF_ERROR(internal::CheckLowRankArgs(x, rows, f, out, workspace));
  if (rows == 0 || f.d == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFitsInt(rows, f.d));
  const int m = static_cast<int>(rows);
  const int d = static_cast<int>(f.d);
  const int r = static_cast<int>(f.r);
  auto blas = static_cast<cublasHandle_t>(ctx.cublas());
  const float one = 1.0f, zero = 0.0f;
  if (r > 0) {
    // P (m × r) = X U, then P ← P diag(c): column-major P is r × m, so c
    // scales its rows (dgmm in place is allowed with lda == ldc).
    GIFT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, r,
                                            m, d, &one, f.u, r, x, d, &zero,
                                            workspace, r));
    GIFT_CUBLAS_RETURN_IF_ERROR(cublasSdgmm(
        blas, CUBLAS_SIDE_LEFT, r, m, workspace, r, f.c, 1, workspace, r));
  }
  RETURN_IF_ERROR(CopyOrAdd(ctx, x, add, out, m, d));
  if (r > 0) {
    // out (m × d) += P Uᵀ; column-major: outᵀ += U Pᵀ with U stored as the
    // column-major r × d matrix Uᵀ.
    GIFT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, d,
                                            m, r, &one, f.u, r, workspace, r,
                                            &one, out, d));
  }
  return absl::OkStatus();
}

absl::Status ApplyDense(gpu::Context& ctx, const float* x, int64_t rows,
                        int64_t d, const float* t, const float* add,
                        float* out) {
  RETURN_IF_ERROR(internal::CheckDenseArgs(x, rows, d, t, out));
  if (rows == 0 || d == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFitsInt(rows, d));
  RETURN_IF_ERROR(CheckFitsInt(d, d));
  const int m = static_cast<int>(rows);
  const int n = static_cast<int>(d);
  float beta = 0.0f;
  if (add != nullptr) {
    beta = 1.0f;
    if (add != out) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          out, add, sizeof(float) * static_cast<size_t>(m) * n,
          cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream())));
    }
  }
  const float one = 1.0f;
  GIFT_CUBLAS_RETURN_IF_ERROR(
      cublasSgemm(static_cast<cublasHandle_t>(ctx.cublas()), CUBLAS_OP_N,
                  CUBLAS_OP_N, n, m, n, &one, t, n, x, n, &beta, out, n));
  return absl::OkStatus();
}

absl::Status ReprojectResidual(gpu::Context& ctx, float* residual, int64_t rows,
                               const LowRankView& old_inverse,
                               const LowRankView& new_forward,
                               float* workspace) {
  RETURN_IF_ERROR(internal::CheckReprojectArgs(residual, rows, old_inverse,
                                               new_forward, workspace));
  const int64_t d = old_inverse.d;
  if (rows == 0 || d == 0) return absl::OkStatus();
  float* moved = workspace;
  float* scratch = workspace + rows * d;
  RETURN_IF_ERROR(
      ApplyLowRank(ctx, residual, rows, old_inverse, nullptr, moved, scratch));
  return ApplyLowRank(ctx, moved, rows, new_forward, nullptr, residual,
                      scratch);
}

}  // namespace gift::kernels::cuda
