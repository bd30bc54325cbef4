// The CUDA implementation of NcclFp8AllReduce (nccl_fp8_allreduce.h).
// Compiled only when GIFT_HAVE_CUDA; create through CreateNcclFp8AllReduce.
#ifndef GIFT_CLIENT_NCCL_FP8_DEVICE_H_
#define GIFT_CLIENT_NCCL_FP8_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/nccl_fp8_allreduce.h"

namespace gift::client {

// REQUIRES: comm is an NCCL communicator on the current CUDA device.
absl::StatusOr<std::unique_ptr<NcclFp8AllReduce>> CreateNcclFp8Device(
    Transport* comm);

}  // namespace gift::client

#endif  // GIFT_CLIENT_NCCL_FP8_DEVICE_H_
