// Helpers shared by the two halves of shm/protocol.h's implementation
// (protocol.cc: control block, plan, factor slots; protocol_windows.cc:
// sketch windows, telemetry). Internal to gift_shm.
//
// Thread safety: pure functions.
#ifndef GIFT_SHM_PROTOCOL_INTERNAL_H_
#define GIFT_SHM_PROTOCOL_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "shm/layout.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::shm::internal {

inline LayerRegionLayout LayoutOf(const LayerGeometry& g) {
  return LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap);
}

// INVALID_ARGUMENT "<what> region has N bytes, the layout needs M".
absl::Status CheckSize(const Region& region, uint64_t need, const char* what);
// INVALID_ARGUMENT "<what> has N elements, expected M".
absl::Status CheckLen(size_t got, int64_t want, const char* what);

template <typename T>
absl::Status WriteVec(Region* region, uint64_t offset,
                      const std::vector<T>& v) {
  return region->Write(offset, v.data(), v.size() * sizeof(T));
}
template <typename T>
absl::Status ReadVec(const Region& region, uint64_t offset, size_t n,
                     std::vector<T>* v) {
  v->resize(n);
  return region.Read(offset, v->data(), n * sizeof(T));
}

}  // namespace gift::shm::internal

#endif  // GIFT_SHM_PROTOCOL_INTERNAL_H_
