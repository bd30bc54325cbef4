// CopyRowsToHost: the row sample of the host sketch path (device rows are
// sketched where they are, device_sketch.h).
#include <cstring>

#include "client/giftd_connection_impl.h"

namespace gift::client {

void CopyRowsToHost(const float* src, int64_t d, int64_t stride, int64_t n,
                    float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * d, src + i * stride * d, d * sizeof(float));
  }
}

}  // namespace gift::client
