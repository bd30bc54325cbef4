// Every Prometheus family giftd exports (DESIGN §6), created in one place.
// Names: gift_ prefix, base units, _total counters, _seconds histograms;
// labels job_id and node on every series, plus rank / layer / path where
// they apply.
//
//   DaemonMetrics m(&registry);
//   m.ranks_registered->Add({{"job_id", job}, {"node", node}}).Set(4);
//   m.refresh_duration->Add(labels, m.refresh_bounds).Observe(0.02);
//
// The comments name each family's labels; a series must carry exactly
// those (Prometheus does not require it, the dashboards do).
//
// Thread safety: the families are thread-safe (prometheus-cpp).
#ifndef GIFT_DAEMON_METRICS_DAEMON_METRICS_H_
#define GIFT_DAEMON_METRICS_DAEMON_METRICS_H_

#include <vector>

#include "daemon/metrics/metrics.h"

namespace gift::daemon {

struct DaemonMetrics {
  explicit DaemonMetrics(metrics::Registry* registry);

  // {job_id, node}
  metrics::Family<metrics::Gauge>* ranks_registered;
  metrics::Family<metrics::Counter>* ranks_reaped;
  // {job_id, node, kind = full|quiet}
  metrics::Family<metrics::Counter>* polls;
  metrics::Family<metrics::Gauge>* plan_epoch;
  metrics::Family<metrics::Gauge>* refresh_interval;
  metrics::Family<metrics::Gauge>* selected_layers;
  // {job_id, node, version, daemon_instance} = 1
  metrics::Family<metrics::Gauge>* info;

  // {job_id, node, layer}
  metrics::Family<metrics::Gauge>* layer_selected;
  metrics::Family<metrics::Gauge>* layer_candidate;
  // {job_id, node, layer, format} = 1: the layer's wire format (e4m3, e5m2,
  // nvfp4, mxfp4); the series of a format it left is removed.
  metrics::Family<metrics::Gauge>* layer_format;
  metrics::Family<metrics::Gauge>* vulnerability;
  metrics::Family<metrics::Gauge>* gain;
  metrics::Family<metrics::Gauge>* factor_version;
  metrics::Family<metrics::Gauge>* factor_age;
  metrics::Family<metrics::Counter>* refreshes;
  metrics::Family<metrics::Counter>* refresh_failures;
  metrics::Family<metrics::Histogram>* refresh_duration;
  // Factors dropped before publication (non-finite or out of bounds).
  metrics::Family<metrics::Counter>* factors_rejected;
  // {job_id, node, layer, result = used|incomplete|busy}
  metrics::Family<metrics::Counter>* sketch_windows;
  // {job_id, node, layer, path}: the newest audit of the layer on that path
  // (the same figures on every rank, so no rank label).
  metrics::Family<metrics::Gauge>* audit_rel_l2;
  metrics::Family<metrics::Gauge>* audit_cosine;
  metrics::Family<metrics::Gauge>* audit_drift;
  // {job_id, node, layer, path}: mean probe RelL2 of the poll's probes.
  metrics::Family<metrics::Gauge>* probe_rel_l2;

  // {job_id, node, rank, layer, path}
  metrics::Family<metrics::Gauge>* rel_l2;
  metrics::Family<metrics::Gauge>* cosine;
  // {job_id, node, rank, layer, bound = upper|lower}
  metrics::Family<metrics::Counter>* boundary_hits;
  // {job_id, node, rank, layer}
  metrics::Family<metrics::Counter>* quantized_elements;
  metrics::Family<metrics::Counter>* nonfinite_inputs;
  metrics::Family<metrics::Counter>* layer_bytes_sent;

  // {job_id, node, rank, path = euclid|gift|control}
  metrics::Family<metrics::Counter>* bytes_sent;
  // {job_id, node, rank, reason}: what a rank wrote into its shared memory
  // that the daemon dropped (reason: window, sketch_meta, sketch_data,
  // layer_counters, step_counters, step).
  metrics::Family<metrics::Counter>* shm_rejected;
  // {job_id, node, rank}
  metrics::Family<metrics::Counter>* bytes_saved;
  metrics::Family<metrics::Counter>* steps;
  metrics::Family<metrics::Counter>* audit_steps;
  metrics::Family<metrics::Counter>* audit_seconds;
  metrics::Family<metrics::Histogram>* collective_duration;
  metrics::Family<metrics::Counter>* transform_seconds;
  metrics::Family<metrics::Counter>* nonfinite_layers;
  metrics::Family<metrics::Gauge>* rank_step;
  metrics::Family<metrics::Gauge>* heartbeat_age;
  metrics::Family<metrics::Gauge>* staleness_limit;
  metrics::Family<metrics::Gauge>* peer_connected;  // followers only
  // Leader election (with a coordinator; term also with a static leader).
  metrics::Family<metrics::Gauge>* peer_term;
  metrics::Family<metrics::Gauge>* peer_leader;
  metrics::Family<metrics::Gauge>* peer_coordinated;
  metrics::Family<metrics::Counter>* peer_leader_changes;
  metrics::Family<metrics::Counter>* peer_refused;  // {kind}: plan, factor
  // {job_id, node, direction, kind}
  metrics::Family<metrics::Counter>* peer_bytes;

  // The bucket bounds of refresh_duration and collective_duration (+Inf
  // implicit), passed to Add() with a series' labels.
  const std::vector<double> refresh_bounds;
  const std::vector<double> duration_bounds;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_METRICS_DAEMON_METRICS_H_
