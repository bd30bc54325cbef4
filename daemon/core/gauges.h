// giftd's gauges (DESIGN §6), set once per poll from the state of the other
// components: per layer (selected, candidate, wire format, vulnerability,
// gain, factor version and age), the job's (selected layers, epoch, K, ranks,
// staleness limit), per rank (heartbeat age), and with peers the election's
// (term, leader, coordinated), the follower's connection and the Peer link's
// byte counters, which advance by what is new since the last poll. A follower
// that (re)joined its leader broadcasts its newest factors
// (FactorPipeline::BroadcastNewest).
//
//   Gauges g({core, &factors});  // core: core_state.h
//   g.Update();            // every poll with ranks or layers
//   g.UpdatePeer();        // every poll of a peered daemon without them
//   g.ResetLinkCounts();   // a new Peer link counts from 0
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_GAUGES_H_
#define GIFT_DAEMON_CORE_GAUGES_H_

#include <cstdint>
#include <map>
#include <string>

#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/planner.h"
#include "daemon/core/session_table.h"
#include "daemon/metrics/daemon_metrics.h"

namespace gift::daemon {

class Gauges {
 public:
  // What it reads: the core's shared state (core_state.h) and the components it
  // calls; every pointer must outlive it.
  struct Parts : CoreState {
    FactorPipeline* factors;
  };
  explicit Gauges(Parts parts) : p_(parts) {}

  void Update();
  // Peers: term, leader, coordinated (every poll, with or without ranks).
  void UpdatePeer();
  // A new Peer link: its totals and joins count from 0.
  void ResetLinkCounts();

 private:
  // Per layer, through the core's SeriesCache (series.h); the layer's
  // gift_layer_format series: 1 for its format, no other series.
  void UpdateLayers();
  // The link's connection, (re)joins and byte totals.
  void UpdateLink(PeerLink* l);

  const Parts p_;
  // PeerLinkStats byte totals already counted, by "direction/kind".
  std::map<std::string, int64_t> peer_bytes_seen_;
  int64_t joins_seen_ = 0;  // follower: link joins
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_GAUGES_H_
