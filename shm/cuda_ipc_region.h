// Internal: the CUDA IPC backend of shm/region.h, compiled only in CUDA
// builds. Use CreateRegion / OpenRegion instead; these are what they call.
//
// The owner allocates `bytes` of device memory on `device` (cudaMalloc,
// zeroed), exports it with cudaIpcGetMemHandle, and creates an interprocess
// event (cudaEventDisableTiming | cudaEventInterprocess) exported with
// cudaIpcGetEventHandle; both handles go into the RegionDesc. An opener in
// another process maps them with cudaIpcOpenMemHandle /
// cudaIpcOpenEventHandle. Write / Read / Zero run on a private non-blocking
// stream and synchronise it before returning; Read first waits on the
// interprocess event, so it is ordered after the last SignalWrites of either
// side. No CUDA type appears in this header.
//
// Thread safety: as Region.
#ifndef GIFT_SHM_CUDA_IPC_REGION_H_
#define GIFT_SHM_CUDA_IPC_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "shm/region.h"

namespace gift::shm::internal {

// FAILED_PRECONDITION without a usable device `device`.
absl::StatusOr<std::unique_ptr<Region>> CreateCudaIpcRegion(
    const std::string& name, uint64_t bytes, int device);
// FAILED_PRECONDITION without the device; NOT_FOUND when the handle cannot
// be opened (the owner is gone, or the owner is this very process).
absl::StatusOr<std::unique_ptr<Region>> OpenCudaIpcRegion(
    const RegionDesc& desc);

absl::StatusOr<std::string> CudaPciBusId(int device);
absl::StatusOr<int> CudaDeviceByPciBusId(const std::string& bus_id);

}  // namespace gift::shm::internal

#endif  // GIFT_SHM_CUDA_IPC_REGION_H_
