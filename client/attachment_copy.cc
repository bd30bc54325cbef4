// CopyRowsToHost for builds without CUDA (attachment_copy_cuda.cc has the
// device copy).
#include <cstring>

#include "client/attachment_impl.h"

namespace gift::client {

#if !GIFT_HAVE_CUDA
absl::Status CopyRowsToHost(const float* src, int64_t d, int64_t stride,
                            int64_t n, bool device, float* dst) {
  if (device) {
    return absl::FailedPreconditionError(
        "device activations in a build without CUDA");
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * d, src + i * stride * d, d * sizeof(float));
  }
  return absl::OkStatus();
}
#endif

}  // namespace gift::client
