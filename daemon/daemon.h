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
//   ASSIGN_OR_RETURN(auto d, Daemon::Create(config, &registry));
//   ... GrpcServer::Start(options, d.get()) ...
//   d->Stop();
//
// Thread safety: thread-safe (one mutex around the state; the refresher
// computes outside it).
#ifndef GIFT_DAEMON_DAEMON_H_
#define GIFT_DAEMON_DAEMON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/core.h"
#include "daemon/daemon_metrics.h"
#include "daemon/kv_store.h"
#include "daemon/refresher.h"
#include "daemon/selector.h"
#include "daemon/session.h"
#include "shm/protocol.h"

namespace gift::daemon {

inline constexpr char kGiftVersion[] = "0.1.0";

class Daemon : public DaemonCore {
 public:
  // Removes shared-memory objects a crashed giftd left under the prefix,
  // starts the refresher and the poll thread.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(
      const DaemonConfig& config, metrics::Registry* registry);
  ~Daemon() override;
  // Stops the poll thread and refresher, drops every session (unlinking
  // its shared memory). Idempotent.
  void Stop();

  // One poll cycle now (tests; the poll thread calls it too).
  void PollOnce();
  const std::string& instance() const { return instance_; }

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
  absl::StatusOr<v1::SetRankResponse> SetRank(
      const v1::SetRankRequest& request) override;
  absl::StatusOr<v1::SetSelectionPolicyResponse> SetSelectionPolicy(
      const v1::SetSelectionPolicyRequest& request) override;
  absl::StatusOr<v1::TriggerRefreshResponse> TriggerRefresh(
      const v1::TriggerRefreshRequest& request) override;
  absl::StatusOr<v1::TelemetryUpdate> Snapshot() override;

 private:
  // One job layer (a 2-D weight the ranks declared).
  struct Layer {
    std::string name;
    int64_t d_out = 0, d_in = 0;
    int32_t r_cap = 0, k_cap = 0;
    v1::LayerSettings settings;  // effective (pin, transform, r, β, format)
    bool candidate = false, selected = false;
    int64_t refresh_seq = 0;
    std::vector<float> omega0;
    // Factors: the next version to assign, the newest published one (for
    // late joiners) and the Ω of recent versions (to read their windows).
    int64_t next_version = 1;
    std::unique_ptr<shm::FactorData> newest;
    std::map<int64_t, std::vector<float>> omega_by_version;
    int64_t factor_step = -1;  // end step of the newest factor's window
    double last_refresh_seconds = 0;
    int64_t refreshes = 0;
    bool early_refresh = false;
    // Windows being collected: (end_step, omega_version) → running sum.
    struct Pending {
      shm::SketchData sum;
      int contributors = 0;
      std::vector<std::string> sessions;
    };
    std::map<std::pair<int64_t, int64_t>, Pending> pending;
    // Windowed local round trip for operators.
    double rel_l2 = 0, cosine = 0;
    LayerScore score;
  };

  Daemon(const DaemonConfig& config, metrics::Registry* registry);

  // ---- daemon.cc: sessions
  absl::Status CheckRegister(const v1::RegisterRequest& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AdoptJob(const v1::RegisterRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Device ranks get CUDA IPC data regions (on the GPU named by the rank's
  // PCI bus id), or host ones when this giftd cannot use that GPU.
  absl::StatusOr<std::unique_ptr<RankSession>> CreateSession(
      const v1::RegisterRequest& r, SessionSpec spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropSession(const std::string& id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapDead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPlanTo(RankSession& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPlanToAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NewEpoch(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureFullRegions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PollLoop();

  // ---- daemon_poll.cc: telemetry, selection, windows, refresh
  void ReadTelemetry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the selector's decision; with `publish`, a change publishes a
  // new epoch. Returns whether anything changed.
  bool ApplySelection(bool publish = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectWindows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SubmitRefresh(Layer& l, Layer::Pending& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishResults() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t SlowestStep() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, SelectorSettings> SelectorSettingsByLayer() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- daemon_control.cc
  absl::StatusOr<Layer*> FindLayer(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::LayerStatus LayerStatusOf(const Layer& l) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::GetStatusResponse StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateLayerSettings(const Layer& l,
                                     const v1::LayerSettings& s) const;

  // {job_id, node, extra...}: the label values of a metric series.
  std::vector<std::string> Labels(std::initializer_list<std::string> extra)
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
  std::map<std::string, std::unique_ptr<RankSession>> sessions_
      ABSL_GUARDED_BY(mu_);
  // Dropped sessions with device regions whose process is still alive.
  std::vector<std::unique_ptr<RankSession>> graveyard_ ABSL_GUARDED_BY(mu_);
  int64_t session_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t plan_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  int refresh_interval_ ABSL_GUARDED_BY(mu_);
  int rank_r_ ABSL_GUARDED_BY(mu_);
  LayerSelector selector_ ABSL_GUARDED_BY(mu_);
  int64_t refreshes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reaped_total_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;

  absl::Notification stop_;
  std::thread poll_thread_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_DAEMON_H_
