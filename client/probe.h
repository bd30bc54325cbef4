// The live benefit measurement of DESIGN §2: on probe steps, for a layer that
// could take the GIFT path, the local FP8 round-trip error of both paths on
// this rank's own gradient, with no communication. The layer selector keeps
// a layer on the GIFT path only while the GIFT error is clearly lower.
//
//   ProbeResult p;
//   RETURN_IF_ERROR(ProbeLayer(grad, spec, factor, &transformer, &p));
//   double gain = 1 - p.gift_rel_l2 / p.euclid_rel_l2;
//
// ProbeLayer is the host reference; fp8_backend_probe.h's LayerProbe runs it
// on either backend's memory.
//
// Thread safety: pure apart from the transformer's scratch.
#ifndef GIFT_CLIENT_PROBE_H_
#define GIFT_CLIENT_PROBE_H_

#include "absl/status/status.h"
#include "client/epoch_plan.h"
#include "client/fp8_backend_probe.h"
#include "client/gift_transform.h"
#include "client/versioned_factors.h"

namespace gift::client {

// grad is the layer's d_out × d_in gradient. Euclidean: quantize with the
// layer's wire format (FP8 or 4-bit) and granularity (over the whole
// layer). GIFT: W T,
// quantize, dequantize, · T⁻¹, compared with W. RelL2 = ‖Ŵ − W‖ / ‖W‖
// (0 for an all-zero W). REQUIRES: factor.d_in == layer.d_in().
absl::Status ProbeLayer(const float* grad, const BucketLayer& layer,
                        const LayerFactor& factor, GiftTransformer* transformer,
                        ProbeResult* result);

}  // namespace gift::client

#endif  // GIFT_CLIENT_PROBE_H_
