// The job's telemetry, aggregated once per poll (DESIGN §2, §6): what every
// local rank wrote into its shared memory since the last poll (each layer's
// counters, the step counters), copied once, checked (shm/rank_counters.h)
// and summed per layer; with peers the followers' reports (the leader adds
// them to its own; a follower sends its node's sums to the leader). The sums
// feed the layer selector (on the leader, or without peers) and the
// metrics; the layers' round trip and audit figures are kept for operators.
//
// Something malformed a rank wrote is dropped and counted (Malformed,
// gift_shm_rejected_total{reason}); a rank malformed
// kMalformedPollsBeforeDisconnect polls in a row is disconnected
// (DisconnectMalformed, the caller reaps it).
//
//   Telemetry t(core);  // core: core_state.h
//   t.Read();                                      // every poll
//   t.DisconnectMalformed([&](id, why) { Reap(id, why); });
//   RETURN_IF_ERROR(t.AcceptReport(follower_report));  // leader
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex), like the components it reads.
#ifndef GIFT_DAEMON_CORE_TELEMETRY_H_
#define GIFT_DAEMON_CORE_TELEMETRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/planner.h"
#include "daemon/core/session_table.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/selector.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

// Adds one node's samples (a follower's report) into `to` (steps: max, the
// rest summed; the β grid only at its full length).
void AddSample(const v1::LayerSample& s, SelectorSample* to, double* err_sq,
               double* x_sq, double* xhat_x);
// Field-wise sum of two reports of one layer (steps: the max, like the
// ranks of one node).
void MergeSample(const v1::LayerSample& s, v1::LayerSample* to);
// A follower's report: INVALID_ARGUMENT for negative counts or audit sums
// that are not finite and >= 0.
absl::Status CheckReport(const v1::ReportTelemetryRequest& r);

class Telemetry {
 public:
  // What it reads and writes: the core's shared state (core_state.h); every
  // pointer must outlive it.
  using Parts = CoreState;
  explicit Telemetry(Parts parts) : p_(parts) {}

  // One poll: every local rank's samples and step counters, plus (leader)
  // the followers' reports since the last poll, into the selector (not on a
  // follower, which reports them to the leader) and the metrics.
  void Read();
  // Counts (gift_shm_rejected_total{reason}) and logs, rate-limited per
  // rank, something malformed that `s` wrote; `garbage` counts it towards
  // disconnecting the rank.
  void Malformed(RankSession& s, const char* reason, const std::string& what,
                 bool garbage = true);
  // Ends the poll's count: `reap`s (after a log line) the ranks malformed
  // kMalformedPollsBeforeDisconnect polls in a row.
  void DisconnectMalformed(
      absl::FunctionRef<void(const std::string& id, const std::string& why)>
          reap);
  // Leader: a follower's report (CheckReport), kept for the next poll (the
  // layers not adopted yet are ignored).
  absl::Status AcceptReport(const v1::ReportTelemetryRequest& r);

 private:
  // What a rank wrote, copied once and checked (shm/rank_counters.h): a
  // malformed sample is dropped (Malformed).
  void TakeLayerSample(RankSession& s, int i, SelectorSample* x, double* err,
                       double* xsq, double* xhx);
  // The newest audit figures of layer `l` from a rank's counters.
  void TakeAudits(JobLayer& l, const shm::LayerCounters& now,
                  const shm::LayerCounters& d);
  void TakeStepCounters(RankSession& s);
  void SendReport(const std::vector<SelectorSample>& samples,
                  const std::vector<double>& err,
                  const std::vector<double>& xsq,
                  const std::vector<double>& xhx);
  // Leader: the followers' samples since the last poll, into this poll's.
  void TakeRemoteSamples(std::vector<SelectorSample>* samples,
                         std::vector<double>* err, std::vector<double>* xsq,
                         std::vector<double>* xhx);

  const Parts p_;
  // Leader: followers' telemetry since the last poll, by layer.
  std::map<std::string, v1::LayerSample> remote_samples_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_TELEMETRY_H_
