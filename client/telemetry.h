// What one AllReduceEngine::Run reports (DESIGN §2, §6): per layer the
// path it took, the local quantization telemetry (boundary hits, round-trip
// error sums, non-finite inputs), whether its result was marked non-finite,
// on probe steps the local Euclidean-vs-GIFT round-trip RelL2, and on audit
// steps the error of what was applied against the FP32 average; per step the
// payload bytes this rank sent, split by path.
//
// Plain data, filled by Run and read by the metrics exporter:
//   StepTelemetry t;
//   RETURN_IF_ERROR(allreduce->Run(bucket, factors, &t));
//   for (const LayerTelemetry& l : t.layers) Export(l.name, l.local.upper);
//
// Thread safety: plain structs.
#ifndef GIFT_CLIENT_TELEMETRY_H_
#define GIFT_CLIENT_TELEMETRY_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "client/agreement.h"
#include "client/epoch_plan.h"
#include "common/beta_grid.h"
#include "kernels/quantize.h"

namespace gift::client {

struct LayerTelemetry {
  std::string name;
  // The path actually taken this step (a GIFT layer without an agreed
  // factor goes Euclidean).
  LayerPath path = LayerPath::kEuclid;
  // Factor version used, or kNoVersion.
  int64_t factor_version = kNoVersion;
  // This rank's worker-side quantization of the layer (in whitened
  // coordinates on the GIFT path): n, upper, lower, nonfinite, err_sq, x_sq,
  // xhat_x.
  kernels::QuantizeStats local;
  // Some rank had a NaN/Inf in this layer: its result is NaN on every rank.
  bool nonfinite_result = false;
  // Probe steps, candidate layers (2-D, a factor held): local round trip
  // ‖Ŵ − W‖/‖W‖ of each path, no communication. GIFT: whiten, quantize,
  // dequantize, un-whiten, with the layer's format and granularity.
  bool probed = false;
  double probe_euclid_rel_l2 = 0;
  double probe_gift_rel_l2 = 0;
  int64_t probe_version = kNoVersion;  // the factor the probe used
  // β auto (a factor that carries its eigenvalues and LayerFactor::beta_auto):
  // the same GIFT round trip with the factor rebuilt for each β of
  // kBetaGridValues (LayerFactor::WithBeta).
  bool beta_probed = false;
  std::array<double, kBetaGrid> probe_beta_rel_l2{};
  // Audit steps (AllReduceEngineOptions::audit_interval): the gradient
  // this step applies (its result) against the FP32 average of the same
  // local gradients, ‖Ŵ − W̄‖/‖W̄‖ and cosine; and, with drift, the running
  // sum of the applied gradients over the last drift_steps steps against
  // the FP32 average of the running sums of the local ones (what error
  // feedback is meant to bound), as a RelL2. The same figures on every rank.
  // Not audited: a layer whose result was non-finite (its running sums
  // restart).
  bool audited = false;
  double audit_rel_l2 = 0;
  double audit_cosine = 0;
  bool drift_audited = false;
  double audit_drift = 0;
  int64_t drift_steps = 0;
};

struct StepTelemetry {
  // Run calls so far on this allreduce, 0-based.
  int64_t step = 0;
  int64_t plan_epoch = 0;
  bool probe_step = false;
  bool audit_step = false;
  // An epoch this step dropped because the ranks held different plans under
  // it (a restarted giftd; AllReduceEngine::AddPlan); 0 when none.
  int64_t dropped_epoch = 0;
  std::vector<LayerTelemetry> layers;  // plan order
  // Layers whose result was marked non-finite.
  int64_t nonfinite_layers = 0;
  // Payload bytes this rank sent (communicator counters): the two phases'
  // bytes split between the paths in proportion to each path's share of the
  // payload, and the rest (agreement, plan checks).
  uint64_t bytes_euclid = 0;
  uint64_t bytes_gift = 0;
  uint64_t bytes_control = 0;
  // The audit's FP32 allreduce (audit steps only; not in bytes_control).
  uint64_t bytes_audit = 0;
  // Wall time of the GIFT transforms (whitening with error feedback and
  // un-whitening) inside this step.
  double transform_seconds = 0;
  // Wall time of the audit (its copies, FP32 allreduce and comparisons).
  double audit_seconds = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_TELEMETRY_H_
