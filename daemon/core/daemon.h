// giftd's core (DESIGN §1, §2, §4–§6) behind the DaemonCore interface (the
// Agent and Control services) and the PeerHandler interface (the job's
// other daemons). The Daemon is a façade: it owns giftd's components, wires
// them to each other at construction, and only routes each call to the
// component that owns its logic, under the one mutex that guards them all.
//
// The components, each in its own file under daemon/core/ with its own
// header and tests (all but KvStore, Refresher and PeerCoordinator have no
// lock of their own: "guarded by the caller's lock", the daemon's mutex):
//  * JobLayout (job_layout.h): the job, its world size and layers (each a
//    JobLayer with its plan state, FactorStore and WindowCollector);
//  * SessionTable (session_table.h): the node's rank sessions;
//  * Registrar (registrar.h): Register, Heartbeat, Deregister, reaping;
//  * Planner (planner.h): the plan and the layer selector; PlanPublisher
//    (plan_publisher.h): new epochs, the plan to the ranks and the peers;
//  * Telemetry (telemetry.h): the ranks' and followers' samples, the
//    malformed-poll rule;
//  * FactorPipeline (factor_pipeline.h): windows → Refresher → install →
//    broadcast (the Refresher computes on its own threads);
//  * ControlPlane (control_plane.h): the Control service's logic;
//  * PeerCoordinator (peer_coordinator.h): the Peer link, the election and
//    the term (its own mutex and atomics); PeerMessages (peer_messages.h):
//    what this daemon answers the peers;
//  * Gauges (gauges.h): the per-poll gauges; KvStore (kv_store.h): the
//    rendezvous store (its own lock); DaemonMetrics: the families.
//
// A poll thread, every config.poll_interval_ms (PollOnce): with a
// coordinator the election's outcome first (PeerCoordinator::ApplyElection,
// outside the mutex); then Registrar::ReapDead, Telemetry::Read, the
// selection (PlanPublisher::ApplySelection, not on a follower),
// FactorPipeline::Collect, Telemetry::DisconnectMalformed,
// FactorPipeline::PublishResults and Gauges::Update. Nothing here waits for
// a rank, and a rank never waits for the daemon. A poll that would find
// nothing new (Quiet: no rank stepped, none came or left, no refresh
// finished or started, no peer message came, the term and role unchanged)
// runs only Registrar::ReapDead, and doubles the wait before the next poll,
// for at most 1 s since the last full poll (with peers also a quarter of
// peer_timeout_ms: a follower's report is its liveness; poll_gate.h):
// giftd's work follows the ranks' steps, not the poll rate.
//
// With config.peer_address set the daemon is one member of a multi-node job
// (DESIGN §4): it serves config.job_id only and the job's world size spans
// every node. The leader decides plans from the whole job's telemetry and
// broadcasts them; followers report telemetry, apply the leader's plans and
// forward Control changes and the rendezvous store to it. Each layer's
// owner sums the nodes' sketch windows, computes the factor and broadcasts
// it; every member installs it the same way, so factors are byte-identical
// on every rank. Without peer_address nothing of this exists and the daemon
// adopts the job of its first rank.
//
//   ASSIGN_OR_RETURN(auto d, Daemon::Create(config, &registry));
//   ... GrpcServer::Start(options, d.get()) ...
//   d->Stop();
//
// Thread safety: thread-safe (one mutex around the components; the
// refresher computes outside it; the peer link's blocking calls are made
// outside it).
#ifndef GIFT_DAEMON_CORE_DAEMON_H_
#define GIFT_DAEMON_CORE_DAEMON_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/core/control_plane.h"
#include "daemon/core/core.h"
#include "daemon/core/core_state.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/core/gauges.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/kv_store.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/peer_messages.h"
#include "daemon/core/plan_publisher.h"
#include "daemon/core/planner.h"
#include "daemon/core/poll_gate.h"
#include "daemon/core/registrar.h"
#include "daemon/core/series.h"
#include "daemon/core/session_table.h"
#include "daemon/core/telemetry.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/peer/peer_link.h"
#include "daemon/refresher.h"
#include "shm/prefix_lock.h"

namespace gift::daemon {

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
  std::string PeerRole() const { return peers_.PeerRole(); }
  // The role, the leader, the connection and the members as GetStatus
  // reports them (takes the link's lock, not the daemon's).
  v1::PeerStatus PeerStatusNow() const { return peers_.Status(); }

  // DaemonCore (daemon.cc).
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
  // A follower forwards these to the leader (its next plan reaches us).
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
  Daemon(const DaemonConfig& config, metrics::Registry* registry);
  // The job's peers: options, the follower's epoch 0, the link or the
  // election (daemon_peer.cc).
  absl::Status StartPeers(PeerLinkFactory factory);
  void PollLoop();
  // Whether nothing a poll reads changed since the last full poll (see
  // above, poll_gate.h).
  bool Quiet() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The longest a poll may stay quiet (1 s; with peers also a quarter of
  // peer_timeout_ms).
  static absl::Duration MaxQuiet(const DaemonConfig& c);

  // Declared first: released last, after every session's memory is gone.
  std::unique_ptr<shm::PrefixLock> prefix_lock_;

  const DaemonConfig config_;
  const std::string instance_;
  const absl::Time started_;
  DaemonMetrics metrics_;
  KvStore store_;
  std::unique_ptr<Refresher> refresher_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // The link, the election and the term (own locks; the hooks it calls
  // take mu_). Set up before the poll thread starts; the link may call the
  // handler earlier (it then answers UNAVAILABLE).
  PeerCoordinator peers_;
  JobLayout layout_ ABSL_GUARDED_BY(mu_);
  // The node's ranks (and the dropped device sessions kept while their
  // process lives).
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  Planner planner_ ABSL_GUARDED_BY(mu_);
  SeriesCache series_ ABSL_GUARDED_BY(mu_);
  // The pointers above, as every component below gets them.
  const CoreState core_;
  PlanPublisher plans_ ABSL_GUARDED_BY(mu_);
  Telemetry telemetry_ ABSL_GUARDED_BY(mu_);
  FactorPipeline factors_ ABSL_GUARDED_BY(mu_);
  Gauges gauges_ ABSL_GUARDED_BY(mu_);
  Registrar registrar_ ABSL_GUARDED_BY(mu_);
  ControlPlane control_ ABSL_GUARDED_BY(mu_);
  PeerMessages messages_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread poll_thread_;
  // Quiet polls and the wait before the next poll (MaxQuiet at most).
  PollGate poll_gate_ ABSL_GUARDED_BY(mu_);
  // Messages taken from peers (plans, reports, windows, factors, joins,
  // membership changes): a full poll follows each.
  uint64_t peer_messages_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_DAEMON_H_
