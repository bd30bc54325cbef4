#include "daemon/metrics/daemon_metrics.h"

#include <vector>

#include "shm/layout.h"

namespace gift::daemon {
namespace {

template <typename T>
metrics::Family<T>* Register(prometheus::detail::Builder<T> builder,
                             metrics::Registry* r, const std::string& name,
                             const std::string& help) {
  return &builder.Name(name).Help(help).Register(*r);
}

metrics::Family<metrics::Gauge>* AddGauge(metrics::Registry* r,
                                          const std::string& name,
                                          const std::string& help) {
  return Register(prometheus::BuildGauge(), r, name, help);
}
metrics::Family<metrics::Counter>* AddCounter(metrics::Registry* r,
                                              const std::string& name,
                                              const std::string& help) {
  return Register(prometheus::BuildCounter(), r, name, help);
}
metrics::Family<metrics::Histogram>* AddHistogram(metrics::Registry* r,
                                                  const std::string& name,
                                                  const std::string& help) {
  return Register(prometheus::BuildHistogram(), r, name, help);
}

std::vector<double> DurationBounds() {
  std::vector<double> b;
  for (int i = 0; i + 1 < shm::kDurationBuckets; ++i) {
    b.push_back(shm::DurationBound(i));
  }
  return b;
}

// {job_id, node}: the job's ranks and plan; gift_daemon_info.
void AddJobFamilies(metrics::Registry* r, DaemonMetrics* m) {
  m->ranks_registered = AddGauge(r, "gift_ranks_registered",
                                 "Local ranks attached to this giftd.");
  m->ranks_reaped = AddCounter(
      r, "gift_ranks_reaped_total",
      "Ranks removed because their heartbeat stopped or their process died.");
  m->polls = AddCounter(
      r, "gift_daemon_polls_total",
      "Polls of the ranks' shared memory: full (something to read) or quiet "
      "(nothing changed since the last full poll: only the reaper ran).");
  m->plan_epoch =
      AddGauge(r, "gift_plan_epoch", "Epoch of the newest published plan.");
  m->refresh_interval =
      AddGauge(r, "gift_refresh_interval_steps",
               "Refresh interval K: steps per sketch window.");
  m->selected_layers =
      AddGauge(r, "gift_selected_layers", "Layers on the GIFT path.");
  // daemon_instance, not "instance": that is Prometheus' target label, which
  // would rename ours to exported_instance on every scrape.
  m->info = AddGauge(r, "gift_daemon_info", "giftd build and instance (1).");
}

// {job_id, node, layer, ...}: each layer's selection, factors, windows,
// audits and probes.
void AddLayerFamilies(metrics::Registry* r, DaemonMetrics* m) {
  m->layer_selected = AddGauge(r, "gift_layer_selected",
                               "1 when the layer takes the GIFT path.");
  m->layer_candidate = AddGauge(
      r, "gift_layer_candidate",
      "1 when the layer gets factors (chosen by the policy or pinned).");
  m->layer_format = AddGauge(
      r, "gift_layer_format_info",
      "1 for the layer's wire format (label format: e4m3, e5m2, nvfp4, "
      "mxfp4).");
  m->vulnerability =
      AddGauge(r, "gift_layer_vulnerability",
               "Windowed FP8 boundary-hit fraction (upper + lower) / n.");
  m->gain = AddGauge(
      r, "gift_layer_gain",
      "Windowed measured gain 1 - RelL2(GIFT)/RelL2(Euclidean) on probe "
      "steps.");
  m->factor_version =
      AddGauge(r, "gift_factor_version", "Newest published factor version.");
  m->factor_age =
      AddGauge(r, "gift_factor_age_steps",
               "Steps since the sketch window of the newest factor closed.");
  m->refreshes = AddCounter(r, "gift_factor_refreshes_total",
                            "Factors computed and published.");
  m->refresh_failures =
      AddCounter(r, "gift_factor_refresh_failures_total",
                 "Refreshes that failed (bad sketch, numerical failure).");
  m->refresh_duration =
      AddHistogram(r, "gift_factor_refresh_duration_seconds",
                   "Time to turn a summed sketch into a factor.");
  m->factors_rejected = AddCounter(
      r, "gift_factor_rejected_total",
      "Factors dropped before publication: a non-finite or out-of-bounds "
      "entry (the layer keeps its previous factor).");
  m->sketch_windows =
      AddCounter(r, "gift_sketch_windows_total",
                 "Sketch windows seen, by what became of them.");
  m->audit_rel_l2 = AddGauge(
      r, "gift_layer_audit_rel_l2",
      "Audited per-step RelL2 of the gradient applied against the FP32 "
      "average of the same gradients (newest audit), by path.");
  m->audit_cosine = AddGauge(
      r, "gift_layer_audit_cosine",
      "Audited cosine of the gradient applied against the FP32 average "
      "(newest audit), by path.");
  m->audit_drift = AddGauge(
      r, "gift_layer_audit_drift",
      "Audited RelL2 of the running sum of applied gradients since the "
      "previous audit against the FP32 one (what error feedback bounds).");
  m->probe_rel_l2 = AddGauge(
      r, "gift_layer_probe_rel_l2",
      "Probe steps: local FP8 round-trip RelL2 of the layer on each path "
      "(no error feedback, one rank's gradient), mean over the last poll.");
}

// {job_id, node, rank, ...}: what each rank measured and sent.
void AddRankFamilies(metrics::Registry* r, DaemonMetrics* m) {
  m->rel_l2 =
      AddGauge(r, "gift_quantization_rel_l2",
               "Local FP8 round-trip RelL2 of the layer since the last poll.");
  m->cosine =
      AddGauge(r, "gift_quantization_cosine",
               "Local FP8 round-trip cosine similarity since the last poll.");
  m->boundary_hits = AddCounter(
      r, "gift_boundary_hits_total",
      "Elements quantized to the FP8 range ends (upper) or flushed to zero "
      "or the smallest subnormal (lower).");
  m->quantized_elements = AddCounter(r, "gift_quantized_elements_total",
                                     "Elements quantized by the rank.");
  m->nonfinite_inputs =
      AddCounter(r, "gift_nonfinite_inputs_total",
                 "NaN/Inf gradient elements seen before quantization.");
  m->layer_bytes_sent = AddCounter(
      r, "gift_layer_bytes_sent_total",
      "Payload bytes the rank sent for the layer: its share of each step's "
      "two-phase bytes by its wire bytes.");
  m->bytes_sent = AddCounter(r, "gift_bytes_sent_total",
                             "Payload bytes the rank sent, by path.");
  m->shm_rejected = AddCounter(
      r, "gift_shm_rejected_total",
      "Malformed windows and telemetry samples a rank wrote into its shared "
      "memory, dropped by the daemon, by reason (window, sketch_meta, "
      "sketch_data, layer_counters, step_counters, step).");
  m->bytes_saved = AddCounter(
      r, "gift_bytes_saved_total",
      "Bytes an FP32 ring allreduce would have sent minus the bytes sent.");
  m->steps = AddCounter(r, "gift_steps_total", "Allreduce steps of the rank.");
  m->audit_steps = AddCounter(
      r, "gift_audit_steps_total",
      "Audit steps of the rank (an FP32 allreduce beside the quantized one).");
  m->audit_seconds =
      AddCounter(r, "gift_audit_seconds_total",
                 "Wall time of the rank's audits and their running sums.");
  m->collective_duration =
      AddHistogram(r, "gift_collective_duration_seconds",
                   "Wall time of the rank's gradient allreduce per step.");
  m->transform_seconds =
      AddCounter(r, "gift_transform_seconds_total",
                 "Wall time spent in GIFT whitening and un-whitening.");
  m->nonfinite_layers =
      AddCounter(r, "gift_nonfinite_layers_total",
                 "Layer results marked non-finite (a NaN/Inf on some rank).");
  m->rank_step = AddGauge(r, "gift_rank_step", "Steps completed by the rank.");
  m->heartbeat_age = AddGauge(r, "gift_rank_heartbeat_age_seconds",
                              "Seconds since the rank's last heartbeat.");
  m->staleness_limit = AddGauge(
      r, "gift_staleness_limit_steps",
      "Factor age (steps) beyond which ranks drop a layer to the Euclidean "
      "path.");
}

// {job_id, node, ...}: the Peer link and the election.
void AddPeerFamilies(metrics::Registry* r, DaemonMetrics* m) {
  m->peer_connected = AddGauge(
      r, "gift_peer_connected",
      "1 while this follower giftd is joined to its job's leader, 0 while "
      "detached (followers only).");
  m->peer_term = AddGauge(r, "gift_peer_term",
                          "The newest leader term this giftd has seen (the "
                          "election key's etcd revision; 0 with a static "
                          "leader).");
  m->peer_leader = AddGauge(r, "gift_peer_leader",
                            "1 while this giftd leads its job, else 0.");
  m->peer_coordinated = AddGauge(
      r, "gift_peer_coordinated",
      "1 when this giftd's leader is elected on a coordinator (etcd).");
  m->peer_leader_changes = AddCounter(
      r, "gift_peer_leader_changes_total",
      "Times the leader this giftd follows (or it being the leader) changed.");
  m->peer_refused = AddCounter(
      r, "gift_peer_refused_total",
      "Peer plans and factors refused for carrying an older leader term, by "
      "kind (plan, factor, join).");
  m->peer_bytes = AddCounter(
      r, "gift_peer_bytes_total",
      "Serialized bytes of Peer messages between daemons, by direction "
      "(sent, received) and message kind (join, telemetry, plan, sketch, "
      "factor, control, store).");
}

}  // namespace

DaemonMetrics::DaemonMetrics(metrics::Registry* r)
    : refresh_bounds({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                      0.25, 0.5, 1, 2.5, 5, 10}),
      duration_bounds(DurationBounds()) {
  AddJobFamilies(r, this);
  AddLayerFamilies(r, this);
  AddRankFamilies(r, this);
  AddPeerFamilies(r, this);
}

}  // namespace gift::daemon
