// The GIFT-transform and probe parts of the device Fp8Backend
// (device_fp8_backend.h): GiftTransforms on the kernels' cuda:: whitening
// variants, with each GIFT factor uploaded once per (factor object, version)
// and cached, and LayerProbe as ProbeLayer's steps on the device. Both queue
// on the backend's gpu::Context. Compiled only when GIFT_HAVE_CUDA; used by
// device_fp8_backend.cc and nothing else.
//
//   DeviceGiftTransforms tf(ctx, &memory);
//   RETURN_IF_ERROR(tf.BeginStep());  // once per step: evicts stale factors
//   RETURN_IF_ERROR(tf.Forward(f, grad, d_out, residual, whitened));
//   DeviceLayerProbe probe(ctx, &memory, &tf);
//
// Thread safety: not thread-safe (the backend's one user).
#ifndef GIFT_CLIENT_DEVICE_FP8_BACKEND_TRANSFORMS_H_
#define GIFT_CLIENT_DEVICE_FP8_BACKEND_TRANSFORMS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/fp8_backend_memory.h"
#include "client/fp8_backend_probe.h"
#include "client/fp8_backend_transforms.h"
#include "kernels/gpu.h"
#include "kernels/whiten.h"

namespace gift::client {

class DeviceGiftTransforms : public GiftTransforms {
 public:
  // REQUIRES: ctx and memory (device memory on ctx's stream) outlive this.
  DeviceGiftTransforms(gpu::Context* ctx, BackendMemory* memory);

  // Once per step: drops the device copies of factors the previous step did
  // not use (replaced versions, and the copies a switch re-projected from).
  absl::Status BeginStep();

  absl::Status Forward(const LayerFactor& f, const float* x, int64_t rows,
                       const float* add, float* out) override;
  absl::Status Inverse(const LayerFactor& f, const float* x, int64_t rows,
                       float* out) override;
  // The same steps as GiftTransformer::Reproject.
  absl::Status Reproject(const LayerFactor& old_f, const LayerFactor& new_f,
                         float* residual, int64_t rows) override;

 private:
  // A factor's arrays on the device.
  struct DeviceFactor {
    int64_t version = -1;
    int64_t used = 0;               // the step that last used it
    const float* host_u = nullptr;  // identity of the uploaded arrays
    const float* host_t = nullptr;
    std::unique_ptr<Fp8Buffer> u, c, c_inv, t, t_inv;
  };

  absl::StatusOr<float*> Scratch(int64_t rows, int64_t d, int64_t r);
  static kernels::LowRankView View(DeviceFactor& d, const LayerFactor& f,
                                   bool inverse);
  absl::Status Put(std::unique_ptr<Fp8Buffer>& dst,
                   const std::vector<float>& src);
  // The device copy of f, uploaded on first use. Keyed by the factor object
  // and checked against its version and array addresses, so a factor object
  // that was replaced is uploaded again. Entries live until a step does not
  // use them (BeginStep), so pointers stay valid within a step.
  absl::StatusOr<DeviceFactor*> Upload(const LayerFactor& f);

  gpu::Context* const ctx_;
  BackendMemory* const memory_;
  std::unique_ptr<Fp8Buffer> scratch_, tmp_;
  int64_t steps_ = 0;
  // Node-based: entries keep their addresses while others come and go.
  std::map<const LayerFactor*, DeviceFactor> factors_;
};

// ProbeLayer's steps on the device; RelL2 sums in double.
class DeviceLayerProbe : public LayerProbe {
 public:
  // REQUIRES: every argument outlives this; transforms are the device's.
  DeviceLayerProbe(gpu::Context* ctx, BackendMemory* memory,
                   GiftTransforms* transforms);

  absl::Status Probe(const float* grad, const BucketLayer& layer,
                     const LayerFactor& factor, ProbeResult* result) override;

 private:
  // out = x̂ of the layer's n elements x in its wire format (may alias x).
  absl::Status RoundTrip(const float* x, int64_t n, const BucketLayer& layer,
                         float* out);

  gpu::Context* const ctx_;
  GiftTransforms* const transforms_;
  std::unique_ptr<Fp8Buffer> codes_, scales_, a_, b_, sums_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_DEVICE_FP8_BACKEND_TRANSFORMS_H_
