#include "daemon/daemon_metrics.h"

#include <vector>

#include "shm/layout.h"

namespace gift::daemon {
namespace {

std::vector<std::string> L(std::initializer_list<const char*> extra) {
  std::vector<std::string> labels = {"job_id", "node"};
  for (const char* e : extra) labels.push_back(e);
  return labels;
}

std::vector<double> DurationBounds() {
  std::vector<double> b;
  for (int i = 0; i + 1 < shm::kDurationBuckets; ++i) {
    b.push_back(shm::DurationBound(i));
  }
  return b;
}

}  // namespace

DaemonMetrics::DaemonMetrics(metrics::Registry* r) {
  ranks_registered = &r->AddGauge("gift_ranks_registered",
                                  "Local ranks attached to this giftd.", L({}));
  ranks_reaped = &r->AddCounter(
      "gift_ranks_reaped_total",
      "Ranks removed because their heartbeat stopped or their process died.",
      L({}));
  plan_epoch = &r->AddGauge("gift_plan_epoch",
                            "Epoch of the newest published plan.", L({}));
  refresh_interval =
      &r->AddGauge("gift_refresh_interval_steps",
                   "Refresh interval K: steps per sketch window.", L({}));
  selected_layers =
      &r->AddGauge("gift_selected_layers", "Layers on the GIFT path.", L({}));
  // daemon_instance, not "instance": that is Prometheus' target label, which
  // would rename ours to exported_instance on every scrape.
  info = &r->AddGauge("gift_daemon_info", "giftd build and instance (1).",
                      L({"version", "daemon_instance"}));
  layer_selected =
      &r->AddGauge("gift_layer_selected",
                   "1 when the layer takes the GIFT path.", L({"layer"}));
  layer_candidate = &r->AddGauge(
      "gift_layer_candidate",
      "1 when the layer gets factors (chosen by the policy or pinned).",
      L({"layer"}));
  vulnerability = &r->AddGauge(
      "gift_layer_vulnerability",
      "Windowed FP8 boundary-hit fraction (upper + lower) / n.", L({"layer"}));
  gain = &r->AddGauge(
      "gift_layer_gain",
      "Windowed measured gain 1 - RelL2(GIFT)/RelL2(Euclidean) on probe steps.",
      L({"layer"}));
  factor_version = &r->AddGauge(
      "gift_factor_version", "Newest published factor version.", L({"layer"}));
  factor_age =
      &r->AddGauge("gift_factor_age_steps",
                   "Steps since the sketch window of the newest factor closed.",
                   L({"layer"}));
  refreshes = &r->AddCounter("gift_factor_refreshes_total",
                             "Factors computed and published.", L({"layer"}));
  refresh_failures = &r->AddCounter(
      "gift_factor_refresh_failures_total",
      "Refreshes that failed (bad sketch, numerical failure).", L({"layer"}));
  refresh_duration = &r->AddHistogram(
      "gift_factor_refresh_duration_seconds",
      "Time to turn a summed sketch into a factor.", L({"layer"}),
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
       5, 10});
  factors_rejected = &r->AddCounter(
      "gift_factor_rejected_total",
      "Factors dropped before publication: a non-finite or out-of-bounds "
      "entry (the layer keeps its previous factor).",
      L({"layer"}));
  sketch_windows = &r->AddCounter(
      "gift_sketch_windows_total",
      "Sketch windows seen, by what became of them.", L({"layer", "result"}));
  rel_l2 = &r->AddGauge(
      "gift_quantization_rel_l2",
      "Local FP8 round-trip RelL2 of the layer since the last poll.",
      L({"rank", "layer", "path"}));
  cosine = &r->AddGauge(
      "gift_quantization_cosine",
      "Local FP8 round-trip cosine similarity since the last poll.",
      L({"rank", "layer", "path"}));
  boundary_hits = &r->AddCounter(
      "gift_boundary_hits_total",
      "Elements quantized to the FP8 range ends (upper) or flushed to zero "
      "or the smallest subnormal (lower).",
      L({"rank", "layer", "bound"}));
  quantized_elements =
      &r->AddCounter("gift_quantized_elements_total",
                     "Elements quantized by the rank.", L({"rank", "layer"}));
  nonfinite_inputs =
      &r->AddCounter("gift_nonfinite_inputs_total",
                     "NaN/Inf gradient elements seen before quantization.",
                     L({"rank", "layer"}));
  bytes_sent = &r->AddCounter("gift_bytes_sent_total",
                              "Payload bytes the rank sent, by path.",
                              L({"rank", "path"}));
  shm_rejected = &r->AddCounter(
      "gift_shm_rejected_total",
      "Malformed windows and telemetry samples a rank wrote into its shared "
      "memory, dropped by the daemon, by reason (window, sketch_meta, "
      "sketch_data, layer_counters, step_counters, step).",
      L({"rank", "reason"}));
  bytes_saved = &r->AddCounter(
      "gift_bytes_saved_total",
      "Bytes an FP32 ring allreduce would have sent minus the bytes sent.",
      L({"rank"}));
  steps = &r->AddCounter("gift_steps_total", "Allreduce steps of the rank.",
                         L({"rank"}));
  collective_duration =
      &r->AddHistogram("gift_collective_duration_seconds",
                       "Wall time of the rank's gradient allreduce per step.",
                       L({"rank"}), DurationBounds());
  transform_seconds = &r->AddCounter(
      "gift_transform_seconds_total",
      "Wall time spent in GIFT whitening and un-whitening.", L({"rank"}));
  nonfinite_layers = &r->AddCounter(
      "gift_nonfinite_layers_total",
      "Layer results marked non-finite (a NaN/Inf on some rank).", L({"rank"}));
  rank_step = &r->AddGauge("gift_rank_step", "Steps completed by the rank.",
                           L({"rank"}));
  heartbeat_age =
      &r->AddGauge("gift_rank_heartbeat_age_seconds",
                   "Seconds since the rank's last heartbeat.", L({"rank"}));
  staleness_limit = &r->AddGauge(
      "gift_staleness_limit_steps",
      "Factor age (steps) beyond which ranks drop a layer to the Euclidean "
      "path.",
      L({}));
  peer_connected = &r->AddGauge(
      "gift_peer_connected",
      "1 while this follower giftd is joined to its job's leader, 0 while "
      "detached (followers only).",
      L({}));
  peer_bytes = &r->AddCounter(
      "gift_peer_bytes_total",
      "Serialized bytes of Peer messages between daemons, by direction "
      "(sent, received) and message kind (join, telemetry, plan, sketch, "
      "factor, control, store).",
      L({"direction", "kind"}));
}

}  // namespace gift::daemon
