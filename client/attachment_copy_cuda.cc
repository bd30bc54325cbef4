// CopyRowsToHost with CUDA: host rows by memcpy, device rows by one strided
// cudaMemcpy2D.
#include <cuda_runtime.h>

#include <cstring>

#include "client/attachment_impl.h"
#include "common/cuda_check.h"

namespace gift::client {

absl::Status CopyRowsToHost(const float* src, int64_t d, int64_t stride,
                            int64_t n, bool device, float* dst) {
  if (!device) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * d, src + i * stride * d, d * sizeof(float));
    }
    return absl::OkStatus();
  }
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy2D(dst, d * sizeof(float), src, stride * d * sizeof(float),
                   d * sizeof(float), n, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace gift::client
