// Internal: the POSIX shared-memory backend of shm/region.h (shm_open +
// mmap). Use CreateRegion / OpenRegion instead; these are what they call.
//
// The owner replaces any object of the same name, creates it 0600
// (regardless of the umask), sizes it with ftruncate — so the memory comes
// zeroed — and maps it MAP_SHARED; its destructor unmaps and unlinks. An
// opener checks the object's size against the descriptor; its destructor
// only unmaps.
//
// Thread safety: as Region.
#ifndef GIFT_SHM_POSIX_REGION_H_
#define GIFT_SHM_POSIX_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shm/region.h"

namespace gift::shm::internal {

// OK for "/name" with no other '/', shorter than kNameBytes; else
// INVALID_ARGUMENT.
absl::Status ValidatePosixName(const std::string& name);

absl::StatusOr<std::unique_ptr<Region>> CreatePosixRegion(
    const std::string& name, uint64_t bytes);
absl::StatusOr<std::unique_ptr<Region>> OpenPosixRegion(const RegionDesc& desc);

// The NUL-terminated name of a descriptor, or INVALID_ARGUMENT when it has no
// terminator within kNameBytes.
absl::StatusOr<std::string> DescName(const RegionDesc& desc);

// OUT_OF_RANGE when [offset, offset + bytes) is not inside [0, size).
absl::Status CheckRange(uint64_t offset, uint64_t bytes, uint64_t size);

}  // namespace gift::shm::internal

#endif  // GIFT_SHM_POSIX_REGION_H_
