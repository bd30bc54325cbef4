// Fp8Backend on device memory: the kernels' cuda:: variants and a few
// elementwise kernels of its own (device_ops.h), all queued on one
// gpu::Context whose stream is also the communicator's (SetStream), so every
// kernel and collective of a step is ordered on one stream. Each part of
// fp8_backend.h is a small class: memory, codec, vector math and comparator
// in device_fp8_backend.cc, the GIFT transforms and the probe in
// device_fp8_backend_transforms.h. Per-round statistics and non-finite flags
// stay on the device until EndRound reads them back (a few bytes per layer);
// the payload never leaves the device. GIFT factors are uploaded once per
// (factor object, version) and cached.
// Compiled only when GIFT_HAVE_CUDA; create through CreateFp8Backend.
//
// Thread safety: not thread-safe.
#ifndef GIFT_CLIENT_DEVICE_FP8_BACKEND_H_
#define GIFT_CLIENT_DEVICE_FP8_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/fp8_backend.h"
#include "client/transport.h"

namespace gift::client {

// The device backend on the current CUDA device; sets comm's stream to the
// backend's. REQUIRES: comm->memory_kind() == kDevice.
absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateDeviceFp8Backend(
    Transport* comm);

}  // namespace gift::client

#endif  // GIFT_CLIENT_DEVICE_FP8_BACKEND_H_
