// The one place that picks a shared-memory backend (and the only #if on CUDA
// in shm/ outside the CUDA backend itself).
#include <dirent.h>
#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shm/posix_region.h"
#include "shm/region.h"
#if GIFT_HAVE_CUDA
#include "shm/cuda_ipc_region.h"
#endif

namespace gift::shm {
namespace {

// Where Linux (glibc) keeps POSIX shared memory objects.
constexpr char kShmDir[] = "/dev/shm";

#if !GIFT_HAVE_CUDA
absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "CUDA IPC shared memory needs a build with CUDA (GIFT_CUDA=ON)");
}
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> CreateRegion(RegionKind kind,
                                                     const std::string& name,
                                                     uint64_t bytes,
                                                     int device) {
  switch (kind) {
    case RegionKind::kPosix:
      return internal::CreatePosixRegion(name, bytes);
    case RegionKind::kCudaIpc:
#if GIFT_HAVE_CUDA
      return internal::CreateCudaIpcRegion(name, bytes, device);
#else
      (void)device;
      return NoCuda();
#endif
    case RegionKind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot create a region of kind ", static_cast<int>(kind)));
}

absl::StatusOr<std::unique_ptr<Region>> OpenRegion(const RegionDesc& desc) {
  switch (static_cast<RegionKind>(desc.kind)) {
    case RegionKind::kPosix:
      return internal::OpenPosixRegion(desc);
    case RegionKind::kCudaIpc:
#if GIFT_HAVE_CUDA
      return internal::OpenCudaIpcRegion(desc);
#else
      return NoCuda();
#endif
    case RegionKind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot open a region of kind ", desc.kind));
}

absl::StatusOr<std::string> CudaPciBusId(int device) {
#if GIFT_HAVE_CUDA
  return internal::CudaPciBusId(device);
#else
  (void)device;
  return NoCuda();
#endif
}

absl::StatusOr<int> CudaDeviceByPciBusId(const std::string& bus_id) {
#if GIFT_HAVE_CUDA
  return internal::CudaDeviceByPciBusId(bus_id);
#else
  (void)bus_id;
  return NoCuda();
#endif
}

absl::StatusOr<std::vector<std::string>> ListPosixObjects(
    const std::string& prefix) {
  if (prefix.empty() || prefix[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix \"", prefix, "\" must start with '/'"));
  }
  std::vector<std::string> names;
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) {
    if (errno == ENOENT) return names;  // no object was ever created
    return absl::InternalError(
        absl::StrCat("opendir ", kShmDir, ": ", std::strerror(errno)));
  }
  while (const dirent* e = readdir(dir)) {
    std::string name = absl::StrCat("/", e->d_name);
    if (e->d_name[0] != '.' && absl::StartsWith(name, prefix)) {
      names.push_back(std::move(name));
    }
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status UnlinkPosix(const std::string& name) {
  if (absl::Status s = internal::ValidatePosixName(name); !s.ok()) return s;
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(
        absl::StrCat("shm_unlink ", name, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gift::shm
