// CUDA activation statistics: cuBLAS float32 GEMMs on ctx's stream (the
// row-major ↔ column-major trick of whiten.cu) and one reduction kernel that
// adds Σ‖a_i‖² to the device double and the row count to the device int64.
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "kernels/sketch.h"

namespace gift::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

// Grid-stride sum of squares in double, warp-shuffle then shared-memory
// reduction per block, one atomicAdd per block. Block 0 also adds `rows` to
// the count.
__global__ void TraceCountKernel(const float* __restrict__ a, int64_t n,
                                 int64_t rows, double* trace, int64_t* count) {
  double s = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const double v = a[i];
    s += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_down_sync(0xffffffffu, s, off);
  }
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) {
      s += __shfl_down_sync(0xffffffffu, s, off);
    }
    if (lane == 0) {
      atomicAdd(trace, s);
      if (blockIdx.x == 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(count),
                  static_cast<unsigned long long>(rows));
      }
    }
  }
}

absl::Status CheckFitsInt(int64_t rows, int64_t cols) {
  if (rows > INT_MAX || cols > INT_MAX || rows * cols > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrix ", rows, " x ", cols,
                     " exceeds the 32-bit cuBLAS index range"));
  }
  return absl::OkStatus();
}

absl::Status AddTraceAndCount(gpu::Context& ctx, const float* a, int64_t rows,
                              int64_t d, const SketchAccumulator& acc) {
  const int64_t n = rows * d;
  const int blocks =
      static_cast<int>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
  TraceCountKernel<<<blocks, kThreads, 0,
                     static_cast<cudaStream_t>(ctx.stream())>>>(
      a, n, rows, acc.trace, acc.count);
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status SketchAccumulate(gpu::Context& ctx, const float* a, int64_t rows,
                              int64_t d, const float* omega, int64_t k,
                              const SketchAccumulator& acc, float* workspace) {
  RETURN_IF_ERROR(
      internal::CheckSketchArgs(a, rows, d, omega, k, acc, workspace));
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFitsInt(rows, d));
  RETURN_IF_ERROR(CheckFitsInt(rows, k));
  RETURN_IF_ERROR(CheckFitsInt(d, k));
  const int m = static_cast<int>(rows);
  const int n = static_cast<int>(d);
  const int kk = static_cast<int>(k);
  auto blas = static_cast<cublasHandle_t>(ctx.cublas());
  const float one = 1.0f, zero = 0.0f;
  // W (m × k) = a Ω; column-major Wᵀ = Ωᵀ aᵀ.
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kk, m,
                                          n, &one, omega, kk, a, n, &zero,
                                          workspace, kk));
  // Y (d × k) += aᵀ W; column-major Yᵀ += Wᵀ a.
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, kk, n,
                                          m, &one, workspace, kk, a, n, &one,
                                          acc.y, kk));
  return AddTraceAndCount(ctx, a, rows, d, acc);
}

absl::Status SecondMomentAccumulate(gpu::Context& ctx, const float* a,
                                    int64_t rows, int64_t d,
                                    const SketchAccumulator& acc) {
  RETURN_IF_ERROR(internal::CheckSecondMomentArgs(a, rows, d, acc));
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFitsInt(rows, d));
  RETURN_IF_ERROR(CheckFitsInt(d, d));
  const int m = static_cast<int>(rows);
  const int n = static_cast<int>(d);
  const float one = 1.0f;
  // A (d × d) += aᵀ a is symmetric, so its column-major view is the same
  // product: (aᵀ)(aᵀ)ᵀ with aᵀ the column-major d × m view of a. A full GEMM
  // (not SYRK) keeps both triangles written, as on the CPU.
  GIFT_CUBLAS_RETURN_IF_ERROR(
      cublasSgemm(static_cast<cublasHandle_t>(ctx.cublas()), CUBLAS_OP_N,
                  CUBLAS_OP_T, n, n, m, &one, a, n, a, n, &one, acc.y, n));
  return AddTraceAndCount(ctx, a, rows, d, acc);
}

}  // namespace gift::kernels::cuda
