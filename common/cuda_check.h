// One check macro per foreign error type of the CUDA stack. Each maps a failed
// call to an absl::Status that names the call, the error and file:line, and
// returns it from the enclosing function.
//
//   absl::Status Upload(float* d, const float* h, size_t n, cudaStream_t s) {
//     GIFT_CUDA_RETURN_IF_ERROR(
//         cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, s));
//     return absl::OkStatus();
//   }
//
// Include only from .cu files and GPU backend sources (never from public
// headers).
#ifndef GIFT_COMMON_CUDA_CHECK_H_
#define GIFT_COMMON_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::internal {

inline absl::Status CudaError(cudaError_t e, const char* call, const char* file,
                              int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call,
                                          " failed: ", cudaGetErrorName(e),
                                          " (", cudaGetErrorString(e), ")"));
}
inline absl::Status CublasError(cublasStatus_t e, const char* call,
                                const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call,
                                          " failed: cuBLAS status ",
                                          static_cast<int>(e)));
}
inline absl::Status CusolverError(cusolverStatus_t e, const char* call,
                                  const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call,
                                          " failed: cuSOLVER status ",
                                          static_cast<int>(e)));
}

}  // namespace gift::internal

#define GIFT_CUDA_RETURN_IF_ERROR(call)                                    \
  do {                                                                     \
    cudaError_t gift_cuda_err_ = (call);                                   \
    if (gift_cuda_err_ != cudaSuccess)                                     \
      return ::gift::internal::CudaError(gift_cuda_err_, #call, __FILE__,  \
                                         __LINE__);                        \
  } while (0)

#define GIFT_CUBLAS_RETURN_IF_ERROR(call)                                   \
  do {                                                                      \
    cublasStatus_t gift_cublas_err_ = (call);                               \
    if (gift_cublas_err_ != CUBLAS_STATUS_SUCCESS)                          \
      return ::gift::internal::CublasError(gift_cublas_err_, #call,         \
                                           __FILE__, __LINE__);             \
  } while (0)

#define GIFT_CUSOLVER_RETURN_IF_ERROR(call)                                  \
  do {                                                                       \
    cusolverStatus_t gift_cusolver_err_ = (call);                            \
    if (gift_cusolver_err_ != CUSOLVER_STATUS_SUCCESS)                       \
      return ::gift::internal::CusolverError(gift_cusolver_err_, #call,      \
                                             __FILE__, __LINE__);            \
  } while (0)

#endif  // GIFT_COMMON_CUDA_CHECK_H_
