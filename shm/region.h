// Shared memory regions between giftd and its local ranks (DESIGN §5), behind
// one interface with two backends:
//  * POSIX shared memory (shm_open + mmap; host memory; created 0600), used
//    for every control block and for the data regions of CPU ranks;
//  * CUDA IPC (cudaMalloc + cudaIpcGetMemHandle, an interprocess event),
//    for the data regions of GPU ranks.
// The daemon creates a region (it owns it: destruction frees the memory and
// unlinks the name); a rank opens it from its RegionDesc (destruction only
// unmaps). The choice of backend is made in CreateRegion / OpenRegion.
//
//   ASSIGN_OR_RETURN(auto owner, CreateRegion(RegionKind::kPosix,
//                                             "/gift-n0-r1-L0", bytes, 0));
//   // ... owner->desc() travels through the control block ...
//   ASSIGN_OR_RETURN(auto view, OpenRegion(owner->desc()));
//   RETURN_IF_ERROR(view->Write(offset, host_data, n));
//
// Thread safety: a Region may be used from several threads once created;
// Write/Read/Zero on disjoint ranges are safe concurrently.
#ifndef GIFT_SHM_REGION_H_
#define GIFT_SHM_REGION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shm/layout.h"

namespace gift::shm {

class Region {
 public:
  virtual ~Region() = default;

  // Host pointer (POSIX) or device pointer (CUDA IPC) of byte 0.
  virtual void* data() const = 0;
  virtual uint64_t bytes() const = 0;
  virtual bool on_device() const = 0;
  // What the other side needs to open this region.
  virtual const RegionDesc& desc() const = 0;

  // Host ↔ region copies (memcpy, or cudaMemcpy and a synchronise), bounds
  // checked: OUT_OF_RANGE past the end.
  virtual absl::Status Write(uint64_t offset, const void* src,
                             uint64_t bytes) = 0;
  virtual absl::Status Read(uint64_t offset, void* dst,
                            uint64_t bytes) const = 0;
  virtual absl::Status Zero(uint64_t offset, uint64_t bytes) = 0;

  // Ordering of device writes across processes (no-ops on POSIX). The
  // writer calls SignalWrites(stream) after queuing its writes on `stream`
  // (a cudaStream_t, nullptr = default stream); the reader calls
  // WaitWrites(stream) before queuing its reads.
  virtual absl::Status SignalWrites(void* stream) = 0;
  virtual absl::Status WaitWrites(void* stream) = 0;
};

// Owner side. name: "/gift-..." (POSIX rules: one leading slash, no other,
// <= kNameBytes − 1 chars); an existing object of the same name is replaced.
// The memory comes zeroed (POSIX: a fresh object sized by ftruncate; CUDA
// IPC: cudaMemset at creation). REQUIRES: bytes > 0.
// kCudaIpc: FAILED_PRECONDITION in a build without CUDA or without a device.
absl::StatusOr<std::unique_ptr<Region>> CreateRegion(RegionKind kind,
                                                     const std::string& name,
                                                     uint64_t bytes,
                                                     int device);

// User side: maps a region another process created. NOT_FOUND when it is
// gone, INVALID_ARGUMENT for a malformed descriptor or a size mismatch.
absl::StatusOr<std::unique_ptr<Region>> OpenRegion(const RegionDesc& desc);

// The PCI bus id of a CUDA device ("0000:3b:00.0") and back. Ranks and the
// daemon may see different device numbers (CUDA_VISIBLE_DEVICES), so a rank
// names its GPU by bus id. FAILED_PRECONDITION in a build without CUDA or
// without the device; NOT_FOUND for a bus id this process cannot see.
absl::StatusOr<std::string> CudaPciBusId(int device);
absl::StatusOr<int> CudaDeviceByPciBusId(const std::string& bus_id);

// POSIX object names under /dev/shm starting with `prefix` (e.g.
// "/gift-node0-"), for cleanup after a crash.
absl::StatusOr<std::vector<std::string>> ListPosixObjects(
    const std::string& prefix);
// shm_unlink; OK when already gone.
absl::Status UnlinkPosix(const std::string& name);

}  // namespace gift::shm

#endif  // GIFT_SHM_REGION_H_
