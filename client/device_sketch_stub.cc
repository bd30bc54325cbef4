// DeviceSketcher in a build without CUDA: there is no device to sketch on
// (device_sketch_cuda.cc is the implementation).
#include "client/device_sketch.h"

namespace gift::client {

absl::StatusOr<std::unique_ptr<DeviceSketcher>> DeviceSketcher::Create(
    int device, int layers) {
  (void)device;
  (void)layers;
  return absl::FailedPreconditionError(
      "device activations in a build without CUDA (GIFT_CUDA=ON)");
}

}  // namespace gift::client
