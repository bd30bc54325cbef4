// Internal to GiftdConnection (daemon_attachment.cc: registration and
// heartbeats on the private thread; attachment_step.cc: the per-step work on
// the training thread). Not a public header.
#ifndef GIFT_CLIENT_GIFTD_CONNECTION_IMPL_H_
#define GIFT_CLIENT_GIFTD_CONNECTION_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/device_sketch.h"
#include "client/giftd_connection.h"
#include "gift/v1/agent.grpc.pb.h"
#include "shm/layout.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::client {

struct GiftdConnection::Impl {
  // The shared memory of one registration.
  struct Mapping {
    std::string session_id;
    std::string instance;
    std::unique_ptr<shm::Region> control;
    std::vector<std::unique_ptr<shm::Region>> data;  // per declared layer
    std::vector<std::unique_ptr<shm::Region>> full;
    std::vector<uint32_t> full_generation;
    std::vector<std::vector<float>> omega0;
    void* block() const { return control->data(); }
  };
  // Per declared (2-D) layer.
  struct LayerState {
    int plan_index = 0;  // index in the bucket plan
    int64_t d_in = 0;
    // The newest factor received from the current daemon instance, and the
    // end step of each held version's window (for the staleness limit).
    int64_t newest_received = -1;
    // The newest version read from the current daemon instance's slots (a
    // new instance may republish a version the rank already holds: a
    // restarted follower giftd of a multi-node job; reading it again brings
    // the Ω the other nodes sketch with).
    int64_t instance_newest = -1;
    std::map<int64_t, int64_t> window_end;
    std::vector<float> omega;  // Ω of the newest low-rank factor
    int64_t omega_version = -1;
    // The open sketch window.
    bool open = false;
    bool usable = false;  // false: the daemon had not consumed w − 2
    int64_t window = -1;
    int64_t start_step = 0;
    int64_t refresh_seq = 0;
    int64_t window_omega_version = -1;
    bool full = false;
    // The first k columns of the window's Ω, d_in × k (shm::SketchColumns
    // of the rank in the plan the window opened under).
    std::vector<float> window_omega;
    int64_t k() const {
      return d_in > 0 ? static_cast<int64_t>(window_omega.size()) / d_in : 0;
    }
    // The host path's accumulators (the device path's are in `sketcher`).
    std::vector<float> y, a;
    double trace = 0, a_trace = 0;
    int64_t count = 0, a_count = 0;
    shm::LayerCounters counters{};
  };

  Impl(const ConnectionOptions& o, EpochPlan b);

  // ---- daemon_attachment.cc (private thread)
  void Loop();
  void TryAttach();
  void Beat();
  void Detach(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  v1::RegisterRequest MakeRegisterRequest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<std::unique_ptr<Mapping>> Map(
      const v1::RegisterResponse& response);
  // Records `message` (stats.last_error) and logs it when it changed; with
  // rank0_only, only rank 0 logs (what every rank sees alike).
  void Note(const std::string& message, bool rank0_only = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // ---- attachment_step.cc (training thread)
  absl::Status ApplyPlan(AllReduceEngine* allreduce, VersionedFactors* factors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status TakeFactors(VersionedFactors* factors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void DropStale(VersionedFactors* factors) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void WriteTelemetry(const StepTelemetry& t, double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Per base layer, its share of the step's two-phase bytes (bytes_euclid +
  // bytes_gift) by its wire bytes in the step's formats (the agreed plan's
  // for declared layers, base's for the rest).
  std::vector<int64_t> LayerBytes(const StepTelemetry& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status StepWindows(const shm::PlanView& agreed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status CloseWindow(int j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status WriteHostWindow(int j, int b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status CopyDeviceWindow(int j, int b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Waits for the device copies of the last window close (device path)
  // before a region they write into is unmapped.
  void QuiesceDeviceCopies() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status OpenWindow(int j, const shm::PlanView& agreed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status MapFullRegions(const shm::PlanView& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The bucket layers of `plan` (base's, with the plan's path, transform
  // and format of each declared layer): INVALID_ARGUMENT naming the layer
  // for a format code outside kernels::WireFormat or one the layer's shape
  // cannot take (the shared block is the daemon's to write, not trusted).
  absl::StatusOr<std::vector<BucketLayer>> PlanLayers(
      const shm::PlanView& plan) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  const shm::PlanView* AgreedPlan(int64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const ConnectionOptions options;
  const EpochPlan base;
  std::vector<LayerState> layers ABSL_GUARDED_BY(mu);
  std::map<std::string, int> by_name;  // immutable after construction
  std::unique_ptr<v1::Agent::Stub> stub;

  mutable absl::Mutex mu;
  std::unique_ptr<Mapping> mapping ABSL_GUARDED_BY(mu);
  std::map<int64_t, shm::PlanView> plans ABSL_GUARDED_BY(mu);  // by epoch
  int64_t newest_epoch ABSL_GUARDED_BY(mu);  // highest epoch given to AddPlan
  int64_t step ABSL_GUARDED_BY(mu) = 0;      // steps completed
  // The agreed plan's sketch stride: the next step is a sketch step when
  // shm::SketchStepDue(step, sketch_stride).
  int32_t sketch_stride ABSL_GUARDED_BY(mu) = 1;
  // options.resume.gift_layers went to a daemon (they are sent once).
  bool resume_registered ABSL_GUARDED_BY(mu) = false;
  // Probation: a resumed rank keeps the GIFT path on the versions its state
  // was whitened with until its daemon's plan names the accepted ones.
  bool resume_gate_pending ABSL_GUARDED_BY(mu) = false;
  int64_t staleness_limit ABSL_GUARDED_BY(mu);
  int heartbeat_ms ABSL_GUARDED_BY(mu) = 1000;
  // The block's daemon_beat at the last beat: when it moved since, the
  // daemon is alive and serves this session, and the beat needs no RPC.
  int32_t daemon_beat_seen ABSL_GUARDED_BY(mu) = 0;
  shm::StepCounters totals ABSL_GUARDED_BY(mu){};
  ConnectionStats stats ABSL_GUARDED_BY(mu);
  std::vector<float> rows_scratch, sketch_scratch;  // host path, under mu
  // device_memory: the device accumulators and the sketch stream. Made by
  // Create before the private thread starts, then the pointer is constant;
  // its calls are serialised by mu. Declared after `mapping`, so that it is
  // destroyed first (waiting for its copies into the mapped regions).
  std::unique_ptr<DeviceSketcher> sketcher;

  absl::Notification stop;
  std::thread thread;
};

// Copies n rows (each d floats, taken every `stride` rows) of host `src`
// to `dst`.
void CopyRowsToHost(const float* src, int64_t d, int64_t stride, int64_t n,
                    float* dst);

}  // namespace gift::client

#endif  // GIFT_CLIENT_GIFTD_CONNECTION_IMPL_H_
