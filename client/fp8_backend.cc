// The one place that picks the allreduce's memory backend; the only #if on
// CUDA of the allreduce.
#include "client/fp8_backend.h"

#include "absl/strings/str_cat.h"
#include "client/host_fp8_backend.h"
#include "client/nccl_fp8_allreduce.h"
#if defined(GIFT_HAVE_CUDA)
#include "client/device_fp8_backend.h"
#include "client/nccl_fp8_device.h"
#endif

namespace gift::client {

absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateFp8Backend(Transport* comm) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("CreateFp8Backend: null communicator");
  }
  if (comm->memory_kind() == MemoryKind::kHost) {
    return std::unique_ptr<Fp8Backend>(new HostFp8Backend(comm));
  }
#if defined(GIFT_HAVE_CUDA)
  return CreateDeviceFp8Backend(comm);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "the ", comm->backend_name(),
      " communicator uses device memory, but this build has no CUDA"));
#endif
}

absl::StatusOr<std::unique_ptr<NcclFp8AllReduce>> CreateNcclFp8AllReduce(
    Transport* comm) {
  if (comm == nullptr || comm->backend_name() != "nccl") {
    return absl::FailedPreconditionError(
        "nccl-fp8 needs the NCCL backend on sm_90");
  }
#if defined(GIFT_HAVE_CUDA)
  return CreateNcclFp8Device(comm);
#else
  return absl::FailedPreconditionError(
      "nccl-fp8 needs a CUDA build (this one has none)");
#endif
}

}  // namespace gift::client
