#include "shm/cuda_ipc_region.h"

#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "shm/posix_region.h"

namespace gift::shm::internal {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes);

// FAILED_PRECONDITION unless `device` exists (no driver, no device, or an
// index past the last one).
absl::Status CheckDevice(int device) {
  int count = 0;  // left untouched when there is no driver
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error for later calls
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA IPC shared memory needs a GPU: ", cudaGetErrorName(e), " (",
        cudaGetErrorString(e), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " requested, ", count, " available"));
  }
  return absl::OkStatus();
}

// Makes `device` current for one call and restores the caller's device, so a
// Region can be used from any thread without changing its CUDA state.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) status_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  cudaError_t status() const { return status_; }

 private:
  int prev_ = -1;
  cudaError_t status_ = cudaSuccess;
};

class CudaIpcRegion : public Region {
 public:
  CudaIpcRegion(RegionDesc desc, bool owner) : desc_(desc), owner_(owner) {}
  ~CudaIpcRegion() override;
  CudaIpcRegion(const CudaIpcRegion&) = delete;
  CudaIpcRegion& operator=(const CudaIpcRegion&) = delete;

  absl::Status InitOwner();
  absl::Status InitOpener();

  void* data() const override { return data_; }
  uint64_t bytes() const override { return desc_.bytes; }
  bool on_device() const override { return true; }
  const RegionDesc& desc() const override { return desc_; }

  absl::Status Write(uint64_t offset, const void* src, uint64_t bytes) override;
  absl::Status Read(uint64_t offset, void* dst, uint64_t bytes) const override;
  absl::Status Zero(uint64_t offset, uint64_t bytes) override;
  absl::Status SignalWrites(void* stream) override;
  absl::Status WaitWrites(void* stream) override;

 private:
  char* at(uint64_t offset) const { return static_cast<char*>(data_) + offset; }

  RegionDesc desc_;
  const bool owner_;
  void* data_ = nullptr;
  cudaEvent_t event_ = nullptr;
  // Private, so that region copies neither wait for nor delay the caller's
  // work on its own streams.
  cudaStream_t stream_ = nullptr;
};

CudaIpcRegion::~CudaIpcRegion() {
  DeviceScope scope(desc_.device);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (event_ != nullptr) cudaEventDestroy(event_);
  if (data_ != nullptr) {
    if (owner_) {
      cudaFree(data_);
    } else {
      cudaIpcCloseMemHandle(data_);
    }
  }
}

absl::Status CudaIpcRegion::InitOwner() {
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, desc_.bytes));
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data_, 0, desc_.bytes, stream_));
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  cudaIpcMemHandle_t mem;
  GIFT_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mem, data_));
  std::memcpy(desc_.ipc_mem, &mem, sizeof(mem));
  GIFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(
      &event_, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t ev;
  GIFT_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&ev, event_));
  std::memcpy(desc_.ipc_event, &ev, sizeof(ev));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::InitOpener() {
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  cudaIpcMemHandle_t mem;
  std::memcpy(&mem, desc_.ipc_mem, sizeof(mem));
  cudaError_t e =
      cudaIpcOpenMemHandle(&data_, mem, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat(
        "cudaIpcOpenMemHandle of region ", desc_.name, ": ",
        cudaGetErrorName(e), " (", cudaGetErrorString(e),
        "); is its owner gone, or is this the owner's own process?"));
  }
  cudaIpcEventHandle_t ev;
  std::memcpy(&ev, desc_.ipc_event, sizeof(ev));
  GIFT_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&event_, ev));
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::Write(uint64_t offset, const void* src,
                                  uint64_t bytes) {
  if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(at(offset), src, bytes, cudaMemcpyHostToDevice, stream_));
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::Read(uint64_t offset, void* dst,
                                 uint64_t bytes) const {
  if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  // A no-op until someone records the event; afterwards the copy follows the
  // device writes the other side signalled.
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, event_, 0));
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, at(offset), bytes, cudaMemcpyDeviceToHost, stream_));
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::Zero(uint64_t offset, uint64_t bytes) {
  if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(at(offset), 0, bytes, stream_));
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::SignalWrites(void* stream) {
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(event_, static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::Status CudaIpcRegion::WaitWrites(void* stream) {
  DeviceScope scope(desc_.device);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), event_, 0));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> CreateCudaIpcRegion(
    const std::string& name, uint64_t bytes, int device) {
  // The name only identifies the region in logs and cleanup; it follows the
  // POSIX rules so that both kinds share one naming scheme.
  if (absl::Status s = ValidatePosixName(name); !s.ok()) return s;
  if (bytes == 0) {
    return absl::InvalidArgumentError("a region needs at least one byte");
  }
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  RegionDesc desc{};
  desc.kind = static_cast<uint32_t>(RegionKind::kCudaIpc);
  desc.bytes = bytes;
  desc.device = device;
  std::memcpy(desc.name, name.data(), name.size());
  auto region = std::make_unique<CudaIpcRegion>(desc, /*owner=*/true);
  if (absl::Status s = region->InitOwner(); !s.ok()) return s;
  return std::unique_ptr<Region>(std::move(region));
}

absl::StatusOr<std::unique_ptr<Region>> OpenCudaIpcRegion(
    const RegionDesc& desc) {
  if (absl::StatusOr<std::string> name = DescName(desc); !name.ok()) {
    return name.status();
  }
  if (desc.bytes == 0) {
    return absl::InvalidArgumentError("descriptor of an empty region");
  }
  if (absl::Status s = CheckDevice(desc.device); !s.ok()) return s;
  auto region = std::make_unique<CudaIpcRegion>(desc, /*owner=*/false);
  if (absl::Status s = region->InitOpener(); !s.ok()) return s;
  return std::unique_ptr<Region>(std::move(region));
}

}  // namespace gift::shm::internal

namespace gift::shm::internal {

absl::StatusOr<std::string> CudaPciBusId(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  char id[32] = {};
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(id, sizeof(id), device));
  return std::string(id);
}

absl::StatusOr<int> CudaDeviceByPciBusId(const std::string& bus_id) {
  if (absl::Status s = CheckDevice(0); !s.ok()) return s;
  int device = -1;
  if (cudaDeviceGetByPCIBusId(&device, bus_id.c_str()) != cudaSuccess) {
    cudaGetLastError();
    return absl::NotFoundError(
        absl::StrCat("no visible CUDA device has PCI bus id '", bus_id, "'"));
  }
  return device;
}

}  // namespace gift::shm::internal
