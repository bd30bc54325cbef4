// giftd's state and logic (DESIGN §1, §2, §4–§6) behind the DaemonCore
// interface: rank sessions and their shared memory, the job's plan, the
// layer selector, the factor refresher, the rendezvous store and the
// metrics. A poll thread, every config.poll_interval_ms:
//  1. reaps ranks whose heartbeat stopped or whose process is gone;
//  2. reads every rank's telemetry, updates metrics and the selector;
//  3. applies the selector's decision (a new plan epoch when the candidate
//     or selected set changes) and early-refresh requests;
//  4. collects closed sketch windows: when every live rank closed the
//     window ending at the same step with the same basis, sums them and
//     submits a refresh; publishes finished factors into every rank's slots.
// Nothing here waits for a rank, and a rank never waits for the daemon.
//
// With config.peer_address set the daemon is one member of a multi-node job
// (DESIGN §4, peer_link.h; daemon_peer.cc): it serves config.job_id only and
// the job's world size spans every node. The leader decides plans from the
// whole job's telemetry and broadcasts them; followers report telemetry,
// apply the leader's plans and forward Control changes and the rendezvous
// store to it. Each layer's owner sums the nodes' sketch windows, computes
// the factor and broadcasts it; every member installs it the same way, so
// factors are byte-identical on every rank. Without peer_address nothing of
// this exists and the daemon adopts the job of its first rank.
//
// The Daemon is the façade that wires giftd's components, each in its own
// file under daemon/core/ with its own tests and no lock of its own (the
// daemon's mutex guards them): SessionTable (the node's rank sessions:
// register, heartbeat, reap, shared memory), and per layer a
// WindowCollector (closed sketch windows → refresh requests) and a
// FactorStore (factor versions; published into the sessions' slots);
// the Planner (the plan: epochs, K, audit interval, rank r, the
// LayerSelector, each layer's plan state, the leader's or the follower's
// plan rules); KvStore (the rendezvous store, its own lock) and Refresher
// (refresher.h). What is still the façade's own: publishing the plan (to
// the sessions and the peers), telemetry accumulation, Control and the peer
// handlers.
//
//   ASSIGN_OR_RETURN(auto d, Daemon::Create(config, &registry));
//   ... GrpcServer::Start(options, d.get()) ...
//   d->Stop();
//
// Thread safety: thread-safe (one mutex around the state; the refresher
// computes outside it; the peer link's blocking calls are made outside it).
#ifndef GIFT_DAEMON_CORE_DAEMON_H_
#define GIFT_DAEMON_CORE_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/coord/election.h"
#include "daemon/core/core.h"
#include "daemon/core/factor_store.h"
#include "daemon/core/kv_store.h"
#include "daemon/core/planner.h"
#include "daemon/core/session.h"
#include "daemon/core/session_table.h"
#include "daemon/core/window_collector.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/peer/peer_link.h"
#include "daemon/refresher.h"
#include "daemon/selector.h"
#include "shm/prefix_lock.h"
#include "shm/protocol.h"

namespace gift::daemon {

inline constexpr char kGiftVersion[] = "0.1.0";

// Makes the link to the job's other daemons (PeerLink::Create, or a fake in
// tests).
using PeerLinkFactory = std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
    const PeerLinkOptions&, PeerHandler*)>;

class Daemon : public DaemonCore, public PeerHandler {
 public:
  // Takes the shm prefix (FAILED_PRECONDITION while another giftd holds
  // it, before anything is touched), removes shared-memory objects a
  // crashed giftd left under it, starts the refresher, the peer link (with
  // config.peer_address; the token is read from config.job_token_file) and the
  // poll thread. `peer_link_factory` Default: PeerLink::Create.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(
      const DaemonConfig& config, metrics::Registry* registry,
      PeerLinkFactory peer_link_factory = nullptr);
  ~Daemon() override;
  // Stops the poll thread and refresher, drops every session (unlinking
  // its shared memory). Idempotent.
  void Stop();

  // One poll cycle now (tests; the poll thread calls it too).
  void PollOnce();
  const std::string& instance() const { return instance_; }
  // "" without peers, else "leader of job J at ADDR" / "follower of ADDR
  // in job J" (for the start-up log).
  std::string PeerRole() const;
  // The role, the leader, the connection and the members as GetStatus
  // reports them (takes the link's lock, not the daemon's).
  v1::PeerStatus PeerStatusNow() const;

  // DaemonCore.
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override;
  absl::Status Deregister(const v1::DeregisterRequest& request) override;
  absl::Status StoreSet(const v1::StoreSetRequest& request) override;
  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& request, absl::Duration max_wait) override;
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& request) override;
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const v1::GetStatusRequest& request) override;
  absl::StatusOr<v1::ListLayersResponse> ListLayers(
      const v1::ListLayersRequest& request) override;
  absl::StatusOr<v1::SetLayerPolicyResponse> SetLayerPolicy(
      const v1::SetLayerPolicyRequest& request) override;
  absl::StatusOr<v1::SetRefreshIntervalResponse> SetRefreshInterval(
      const v1::SetRefreshIntervalRequest& request) override;
  absl::StatusOr<v1::SetAuditIntervalResponse> SetAuditInterval(
      const v1::SetAuditIntervalRequest& request) override;
  absl::StatusOr<v1::SetRankResponse> SetRank(
      const v1::SetRankRequest& request) override;
  absl::StatusOr<v1::SetSelectionPolicyResponse> SetSelectionPolicy(
      const v1::SetSelectionPolicyRequest& request) override;
  absl::StatusOr<v1::TriggerRefreshResponse> TriggerRefresh(
      const v1::TriggerRefreshRequest& request) override;
  absl::StatusOr<v1::TelemetryUpdate> Snapshot() override;

  // PeerHandler (daemon_peer.cc).
  absl::StatusOr<v1::PeerPlan> OnJoin(const v1::JoinRequest& r) override;
  absl::Status OnTelemetry(const v1::ReportTelemetryRequest& r) override;
  void OnMembersChanged() override;
  absl::Status OnPlan(const v1::PeerPlan& plan) override;
  absl::Status OnSketch(const v1::PushSketchRequest& r) override;
  absl::Status OnFactor(const v1::PublishFactorRequest& r) override;
  std::vector<v1::PublishFactorRequest> NewestFactors() override;
  absl::StatusOr<v1::ForwardControlResponse> OnControl(
      const v1::ForwardControlRequest& r) override;
  absl::Status OnStoreSet(const v1::StoreSetRequest& r) override;
  absl::StatusOr<v1::StoreGetResponse> OnStoreGet(
      const v1::StoreGetRequest& r, absl::Duration max_wait) override;
  absl::StatusOr<v1::StoreAddResponse> OnStoreAdd(
      const v1::StoreAddRequest& r) override;
  v1::JoinRequest JoinState() override;

 private:
  // One job layer (a 2-D weight the ranks declared): its plan state
  // (PlanLayer: name, settings, candidate, selected, refresh_seq, score;
  // the Planner's) and the rest.
  struct Layer : PlanLayer {
    int64_t d_out = 0, d_in = 0;
    int32_t r_cap = 0, k_cap = 0;
    std::vector<float> omega0;
    // Factor versions: the next to assign, the newest installed (for late
    // joiners) and the Ω of recent ones (to read their windows).
    FactorStore factors;
    bool early_refresh = false;
    // Closed sketch windows being summed (and, with peers on the layer's
    // owner, the job-wide sums of the nodes' windows).
    WindowCollector windows;
    // Windowed local round trip for operators.
    double rel_l2 = 0, cosine = 0;
    // The last audit on each path ([0] Euclidean, [1] GIFT) of the gradient
    // applied against the FP32 average (NaN: none yet); `audit_path` is the
    // path of the newest one (-1: none).
    struct Audit {
      double rel_l2 = std::numeric_limits<double>::quiet_NaN();
      double cosine = std::numeric_limits<double>::quiet_NaN();
      double drift = std::numeric_limits<double>::quiet_NaN();
    };
    Audit audit[2];
    int audit_path = -1;
    int64_t audits = 0;
    // Owner: per lagging node, the factor version last sent to it again and
    // how many times (the first may have crossed the broadcast: debug).
    std::map<std::string, std::pair<int64_t, int>> resent;
  };

  Daemon(const DaemonConfig& config, metrics::Registry* registry);

  // Declared first: released last, after every session's memory is gone.
  std::unique_ptr<shm::PrefixLock> prefix_lock_;

  // ---- daemon.cc: sessions (SessionTable) and the job they declare
  absl::Status CheckRegister(const v1::RegisterRequest& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Room on this node for one more session of r's process (`replaced`: a
  // session it replaces) and for its shared memory: RESOURCE_EXHAUSTED
  // naming the limit.
  absl::Status CheckCapacity(const v1::RegisterRequest& r,
                             const std::string& replaced) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A layer's slot capacity: min(max_rank, d_in).
  int32_t RankCap(int64_t d_in) const;
  // Whether a new layer takes the full transform (the default transform,
  // within full_max_d_in).
  bool DefaultFull(int64_t d_in) const;
  // The job's layers as a session declares them, and which have a full
  // region.
  std::vector<shm::LayerDecl> Decls() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<bool> FullLayers() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's layer list and world size against a rank's or a follower's.
  absl::Status CheckSameJob(
      int world_size,
      const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AdoptJob(const v1::RegisterRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AdoptLayers(
      const std::string& job_id, int world_size,
      const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Register's epoch and version bookkeeping for a (re-)attaching rank;
  // returns whether the whole node needs the plan again.
  absl::StatusOr<bool> ContinueAbove(const v1::RegisterRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Device ranks get CUDA IPC data regions (on the GPU named by the rank's
  // PCI bus id), or host ones when this giftd cannot use that GPU.
  absl::StatusOr<std::unique_ptr<RankSession>> CreateSession(
      const v1::RegisterRequest& r, SessionSpec spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropSession(const std::string& id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DropSession, counted as a reap.
  void Reap(const std::string& id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapDead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPlanTo(RankSession& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPlanToAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NewEpoch(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureFullRegions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PollLoop();

  // ---- daemon_poll.cc: telemetry, selection, windows, refresh
  void ReadTelemetry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds one node's samples into `to` (steps: max, the rest summed).
  static void AddSample(const v1::LayerSample& s, SelectorSample* to,
                        double* err_sq, double* x_sq, double* xhat_x);
  // Applies the selector's decision; with `publish`, a change publishes a
  // new epoch. Returns whether anything changed.
  bool ApplySelection(bool publish = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a rank wrote, copied once and checked (shm/rank_counters.h,
  // shm::ReadWindow): a malformed sample or window is dropped (Malformed).
  void TakeLayerSample(RankSession& s, int i, SelectorSample* x, double* err,
                       double* xsq, double* xhx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeStepCounters(RankSession& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The windows of layer i that rank `s` closed since the last poll (two at
  // most), into the layer's pending sums.
  void TakeWindows(int i, RankSession& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts (gift_shm_rejected_total{reason}) and logs, rate-limited per
  // rank, something malformed that `s` wrote; `garbage` counts it towards
  // disconnecting the rank.
  void Malformed(RankSession& s, const char* reason, const std::string& what,
                 bool garbage = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps the ranks malformed kMalformedPollsBeforeDisconnect polls in a
  // row (called once per poll).
  void DisconnectMalformed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectWindows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A complete window of `l` (this node's, or with peers the job's) to the
  // refresher.
  void SubmitRefresh(Layer& l, WindowSum& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishResults() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The factor a refresh produced (owner side; PublishResults).
  std::unique_ptr<shm::FactorData> FactorOf(const Layer& l,
                                            RefreshResult& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A factor from a peer (OnFactor; AdoptJob for the ones kept while this
  // follower had no layers): checked like a rank's slot, then installed.
  absl::Status InstallPeerFactor(const v1::PublishFactorRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InstallPendingFactors() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Installs a factor version (the owner's own or one a peer broadcast)
  // in the layer's FactorStore and publishes it into every local rank's
  // slot. Returns whether it was installed (not: a version not above the
  // newest); INVALID_ARGUMENT (counted in gift_factor_rejected_total,
  // logged) for a factor outside factor_check.h's bounds, which the layer
  // never gets.
  absl::StatusOr<bool> InstallFactor(Layer& l,
                                     std::unique_ptr<shm::FactorData> f,
                                     double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Peers: term, leader, coordinated (every poll, with or without ranks).
  void UpdatePeerGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The layers' plan state, for the Planner.
  std::vector<PlanLayer*> PlanLayers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<const PlanLayer*> PlanLayers() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- daemon_peer.cc
  PeerLink* link() const { return link_.load(std::memory_order_acquire); }
  // With peers and not the leader: the leader decides. With a coordinator,
  // the leader is the election's winner once its link leads (a daemon that
  // lost or cannot confirm its lease decides nothing).
  bool IsFollower() const {
    if (coordinated_) return !coord_leader_.load(std::memory_order_acquire);
    PeerLink* l = link();
    return l != nullptr && !l->is_leader();
  }
  // PERMISSION_DENIED for a peer message of another job.
  absl::Status CheckPeerJob(const std::string& job_id) const;
  absl::StatusOr<v1::ForwardControlResponse> Forward(
      v1::ForwardControlRequest r) const;  // outside mu_
  absl::Status StartPeerLink(PeerLinkFactory factory);

  // ---- daemon_coord.cc: leader election (config.coordinator)
  // Connects to etcd (a clear error for bad credentials or no answer),
  // starts campaigning and waits up to ttl + 5 s for a leader; builds the
  // first link to it.
  absl::Status StartElection();
  // The election's callback (its thread): steps down at once when the lease
  // is lost, remembers the newest term and leaves the rest to the poll.
  void OnElection(const coord::ElectionState& s);
  // Poll thread, outside mu_: a new leader (or this daemon elected) rebuilds
  // the Peer link to follow it (or to lead). False when the link could not
  // be built (retried at the next poll).
  bool ApplyElection();
  absl::Status RebuildLink(const coord::ElectionState& s);
  // Fencing: FAILED_PRECONDITION (counted) for a message of a term older
  // than the newest this daemon has seen; a newer one raises it.
  absl::Status CheckTerm(int64_t term, const char* kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RaiseTerm(int64_t term);
  // The Planner's plan with the members, this leader's instance and term.
  v1::PeerPlan PlanLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendTelemetryReport(const std::vector<SelectorSample>& samples,
                           const std::vector<double>& err,
                           const std::vector<double>& xsq,
                           const std::vector<double>& xhx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leader: the followers' samples since the last poll, into this poll's.
  void TakeRemoteSamples(std::vector<SelectorSample>* samples,
                         std::vector<double>* err, std::vector<double>* xsq,
                         std::vector<double>* xhx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- daemon_peer_windows.cc
  // A node's complete window of layer i: to the owner, or into `owned`.
  void Contribute(int i, Layer& l, WindowSum& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::PublishFactorRequest FactorMessage(const Layer& l,
                                         const shm::FactorData& f,
                                         double seconds) const;
  // Owner: a node's window sum into the layer's owned windows; a complete
  // one is refreshed.
  void AddOwned(Layer& l, const std::string& node, int contributors,
                shm::SketchData data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Owner: sends the newest factor again to the `lagging` nodes, whose
  // windows are in an older basis than `basis` (they lack its factor).
  void ResendFactor(Layer& l,
                    const std::vector<std::pair<std::string, int64_t>>& lagging,
                    int64_t basis) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- daemon_control.cc
  absl::StatusOr<Layer*> FindLayer(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::LayerStatus LayerStatusOf(const Layer& l) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::GetStatusResponse StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateLayerSettings(const Layer& l,
                                     const v1::LayerSettings& s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // {job_id, node} and `extra`: the labels of a metric series.
  metrics::Labels Labels(
      std::initializer_list<std::pair<const std::string, std::string>> extra)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DaemonConfig config_;
  const std::string instance_;
  const absl::Time started_;
  metrics::Registry* const registry_;
  DaemonMetrics metrics_;
  KvStore store_;
  std::unique_ptr<Refresher> refresher_;

  mutable absl::Mutex mu_;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int world_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Layer> layers_ ABSL_GUARDED_BY(mu_);
  // The node's ranks (and the dropped device sessions kept while their
  // process lives).
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  // The plan: epoch, K, audit interval, r, the selector, the follower's
  // held plan.
  Planner planner_ ABSL_GUARDED_BY(mu_);
  int64_t refreshes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reaped_total_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;

  // ---- peers (null without config.peer_address). Set before the poll
  // thread starts; the link may call the handler earlier (it then answers
  // UNAVAILABLE).
  const bool peered_;
  std::map<std::string, v1::PublishFactorRequest> pending_factors_
      ABSL_GUARDED_BY(mu_);
  // PeerLinkStats byte totals already counted, by "direction/kind".
  std::map<std::string, int64_t> peer_bytes_seen_ ABSL_GUARDED_BY(mu_);
  int64_t joins_seen_ ABSL_GUARDED_BY(mu_) = 0;  // follower: link joins
  std::unique_ptr<PeerLink> link_owner_;
  std::atomic<PeerLink*> link_{nullptr};
  PeerLinkOptions link_options_;  // as first built (coordinated: rebuilt)
  PeerLinkFactory link_factory_;

  // ---- leader election (config.coordinator; daemon_coord.cc)
  const bool coordinated_;
  std::unique_ptr<coord::Election> election_;
  mutable absl::Mutex coord_mu_;
  std::optional<coord::ElectionState> coord_pending_ ABSL_GUARDED_BY(coord_mu_);
  // The poll thread's: links replaced by a rebuild, stopped, freed at Stop
  // (a handler or a caller may still hold their pointer until then).
  std::vector<std::unique_ptr<PeerLink>> retired_links_;
  std::string link_leader_;  // the leader address the current link follows
  // The same for readers on other threads (PeerStatusNow, PeerRole).
  std::string leader_address_ ABSL_GUARDED_BY(coord_mu_);
  std::string LeaderAddress() const {
    absl::MutexLock lock(&coord_mu_);
    return leader_address_;
  }
  std::atomic<bool> coord_leader_{false};
  std::atomic<int64_t> term_{0};
  std::atomic<int64_t> leader_changes_{0};
  // Leader: followers' telemetry since the last poll, by layer.
  std::map<std::string, v1::LayerSample> remote_samples_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread poll_thread_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_DAEMON_H_
