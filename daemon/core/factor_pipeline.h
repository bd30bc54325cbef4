// The factor pipeline (DESIGN §4): closed sketch windows → refresh →
// install → broadcast. Every poll it takes the windows each local rank
// closed (checked like everything a rank writes; Telemetry::Malformed),
// sums them per layer (WindowCollector) and submits a complete one to the
// Refresher; finished refreshes become factor versions that are installed
// (FactorStore) and published into every local rank's slots.
//
// With peers, a node's complete window goes to the layer's owner, which
// sums the nodes' windows until they cover the job's world size, refreshes
// and broadcasts the factor; every member installs it the same way
// (AcceptFactor), so every rank's slot holds the same bytes on every node.
// The owner sends the newest factor again to a node whose windows lag in
// an older basis, and a follower that (re)joins broadcasts its newest ones.
//
//   FactorPipeline f({core, &telemetry});  // core: core_state.h
//   f.set_refresher(refresher.get());
//   f.Collect();          // every poll: windows → refresher
//   f.PublishResults();   // finished refreshes → slots (and peers)
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex). The refresher computes on its own threads.
#ifndef GIFT_DAEMON_CORE_FACTOR_PIPELINE_H_
#define GIFT_DAEMON_CORE_FACTOR_PIPELINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/core/core_state.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/planner.h"
#include "daemon/core/session_table.h"
#include "daemon/core/telemetry.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/refresher.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

// A factor of layer `l` as the peers send it (owner: `node`, leader term
// `term`): Ω's columns up to the last that differs from l.omega0
// (omega_cols), less the leading ones that equal U's (omega_u_cols).
v1::PublishFactorRequest FactorToMessage(const std::string& job_id,
                                         const std::string& node, int64_t term,
                                         const JobLayer& l,
                                         const shm::FactorData& f,
                                         double seconds);
// A peer's factor of layer `l`, checked like a rank's slot (version, kind,
// r within r_cap, every length): INVALID_ARGUMENT naming what is wrong. Ω is
// rebuilt with U's leading columns and completed to k_cap columns with
// l.omega0's.
absl::StatusOr<std::unique_ptr<shm::FactorData>> FactorFromMessage(
    const JobLayer& l, const v1::PublishFactorRequest& r);

class FactorPipeline {
 public:
  // What it reads and writes: the core's shared state (core_state.h) and the
  // components it calls; every pointer must outlive it.
  struct Parts : CoreState {
    Telemetry* telemetry;
  };
  explicit FactorPipeline(Parts parts) : p_(parts) {}
  // REQUIRES: before the first Collect; outlives every call.
  void set_refresher(Refresher* refresher) { refresher_ = refresher; }

  // ---- every poll
  // The windows every local rank closed since the last poll; a complete
  // one goes to the refresher (with peers: to the layer's owner).
  void Collect();
  // Finished refreshes: installed, published and (with peers) broadcast.
  void PublishResults();

  // ---- peers
  // Owner: a node's window sum (PushSketch), checked against the layer.
  absl::Status AcceptSketch(const v1::PushSketchRequest& r);
  // A factor from a peer (its term already checked): installed, or kept
  // while this follower has no layers yet (InstallPending).
  absl::Status AcceptFactor(const v1::PublishFactorRequest& r);
  // The factors kept while this follower had no layers (its layers came).
  void InstallPending();
  // The newest factor of every layer, as the peers send it.
  std::vector<v1::PublishFactorRequest> NewestFactors() const;
  // (Re)joined: broadcasts the newest factor of every layer (a partition
  // may have kept one this daemon computed as an owner from the others;
  // every member installs what is newer than its own).
  void BroadcastNewest(PeerLink* link);

  // Factors installed since giftd started.
  int64_t refreshes_total() const { return refreshes_total_; }

 private:
  // The windows of layer i that rank `s` closed since the last poll (two at
  // most), into the layer's pending sums.
  void TakeWindows(int i, RankSession& s);
  // A complete window of `l` (this node's, or with peers the job's) to the
  // refresher.
  void SubmitRefresh(JobLayer& l, WindowSum& p);
  // The factor a refresh produced (owner side; PublishResults).
  std::unique_ptr<shm::FactorData> FactorOf(const JobLayer& l,
                                            RefreshResult& r) const;
  // Installs a factor version (the owner's own or one a peer broadcast)
  // in the layer's FactorStore and publishes it into every local rank's
  // slot. Returns whether it was installed (not: a version not above the
  // newest); INVALID_ARGUMENT (counted in gift_factor_rejected_total,
  // logged) for a factor outside factor_check.h's bounds, which the layer
  // never gets.
  absl::StatusOr<bool> InstallFactor(JobLayer& l,
                                     std::unique_ptr<shm::FactorData> f,
                                     double seconds);
  // A factor from a peer: checked like a rank's slot, then installed.
  absl::Status InstallPeerFactor(const v1::PublishFactorRequest& r);
  // A node's complete window of layer i: to the owner, or into `owned`.
  void Contribute(int i, JobLayer& l, WindowSum& p);
  // Owner: a node's window sum into the layer's owned windows; a complete
  // one is refreshed.
  void AddOwned(JobLayer& l, const std::string& node, int contributors,
                shm::SketchData data);
  // Owner: sends the newest factor again to the `lagging` nodes, whose
  // windows are in an older basis than `basis` (they lack its factor).
  void ResendFactor(JobLayer& l,
                    const std::vector<std::pair<std::string, int64_t>>& lagging,
                    int64_t basis);
  v1::PublishFactorRequest FactorMessage(const JobLayer& l,
                                         const shm::FactorData& f,
                                         double seconds) const;
  // gift_sketch_windows_total{layer, result} += n.
  void CountWindows(const JobLayer& l, const char* result, int n = 1);

  const Parts p_;
  Refresher* refresher_ = nullptr;
  // Follower without layers: the newest factor of each layer from a peer.
  std::map<std::string, v1::PublishFactorRequest> pending_factors_;
  int64_t refreshes_total_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_FACTOR_PIPELINE_H_
