// The probe part of an Fp8Backend (fp8_backend.h): probe.h's ProbeLayer —
// the local FP8 round-trip error of the Euclidean and the GIFT path on one
// layer's gradient — on a gradient of the backend's memory kind.
//
//   ProbeResult p;
//   RETURN_IF_ERROR(backend->probe().Probe(grad, spec, factor, &p));
//   double gain = 1 - p.gift_rel_l2 / p.euclid_rel_l2;
//
// Thread safety: not thread-safe (implementations keep scratch space).
#ifndef GIFT_CLIENT_FP8_BACKEND_PROBE_H_
#define GIFT_CLIENT_FP8_BACKEND_PROBE_H_

#include "absl/status/status.h"
#include "client/epoch_plan.h"
#include "client/versioned_factors.h"

namespace gift::client {

struct ProbeResult {
  double euclid_rel_l2 = 0;
  double gift_rel_l2 = 0;
};

class LayerProbe {
 public:
  virtual ~LayerProbe() = default;

  // ProbeLayer's result for `grad` (the layer's d_out × d_in gradient).
  // REQUIRES: factor.d_in == layer.d_in().
  virtual absl::Status Probe(const float* grad, const BucketLayer& layer,
                             const LayerFactor& factor,
                             ProbeResult* result) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_PROBE_H_
