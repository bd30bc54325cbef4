// The job this giftd serves and its layers (DESIGN §2): the job id, the
// world size and one JobLayer per 2-D weight the ranks declared, in their
// order. The layout adopts a job's layers with the defaults of the config
// (transform, wire format, β auto, slot capacity, Ω₀; the job's format may
// be the first rank's ask instead, and a layer whose shape cannot take a
// 4-bit default gets e4m3 with a note), checks that a rank or
// a follower declares the same job, and answers what every session's shared
// memory holds (Decls, FullLayers). Each JobLayer also carries the state
// the other components keep per layer: its plan state (PlanLayer, the
// Planner's), its factor versions (FactorStore), its closed sketch windows
// (WindowCollector), its round trip and audit figures (Telemetry).
//
//   JobLayout layout(config);
//   RETURN_IF_ERROR(layout.CheckSameJob(r.world_size(), r.layers()));
//   RETURN_IF_ERROR(layout.Adopt(job, world, r.layers(), on_each_layer));
//   ASSIGN_OR_RETURN(JobLayer * l, layout.Find("fc1"));
//   SessionShmBytes(layout.Decls(), layout.FullLayers(), limits);
//
// Thread safety: not thread-safe; guarded by the caller's lock (the
// daemon's mutex).
#ifndef GIFT_DAEMON_CORE_JOB_LAYOUT_H_
#define GIFT_DAEMON_CORE_JOB_LAYOUT_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/core/factor_store.h"
#include "daemon/core/planner.h"
#include "daemon/core/window_collector.h"
#include "daemon/metrics/metrics.h"
#include "gift/v1/types.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "kernels/wire_format.h"
#include "shm/protocol.h"

namespace gift::daemon {

// One job layer (a 2-D weight the ranks declared): its plan state
// (PlanLayer: name, settings, candidate, selected, refresh_seq, score; the
// Planner's) and the rest.
struct JobLayer : PlanLayer {
  int64_t d_out = 0, d_in = 0;
  int32_t r_cap = 0, k_cap = 0;
  // Why the layer's format is not the job's default (its shape cannot take
  // it); "" when it is, or when an operator set the format.
  std::string format_note;
  // Payload bytes the ranks reported sending for the layer (telemetry).
  int64_t bytes_sent = 0;
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

using LayerShapes = google::protobuf::RepeatedPtrField<v1::LayerShape>;

class JobLayout {
 public:
  // `config` (max_rank, transform, full_max_d_in, format, beta_auto,
  // omega_seed, node) must outlive the layout.
  explicit JobLayout(const DaemonConfig& config)
      : config_(config), format_(ConfigFormat()) {}

  const std::string& job_id() const { return job_id_; }
  void set_job_id(const std::string& job_id) {
    job_id_ = job_id;
    ++generation_;
  }
  // Bumped whenever the job id or the layer list is set anew (Adopt): what
  // was derived from the old ones (series.h's handles) is stale.
  uint64_t generation() const { return generation_; }
  int world_size() const { return world_size_; }
  // The job's default wire format (Adopt's); the config's before any job.
  kernels::WireFormat format() const { return format_; }
  // The config's default format (`format`, validated when loaded).
  kernels::WireFormat ConfigFormat() const;
  // A follower takes the leader's job format `format` (REQUIRES: valid()),
  // with or without layers: later ranks are checked against it and the
  // layers' format notes follow it (each layer's own format comes with the
  // leader's plan). Logs a change.
  void TakeFormat(kernels::WireFormat format);
  // The Planner sets it from a leader's plan (while still 0).
  int* mutable_world_size() { return &world_size_; }

  std::vector<JobLayer>& layers() { return layers_; }
  const std::vector<JobLayer>& layers() const { return layers_; }
  bool empty() const { return layers_.empty(); }
  size_t size() const { return layers_.size(); }
  // REQUIRES: `l` is one of layers().
  int IndexOf(const JobLayer& l) const {
    return static_cast<int>(&l - layers_.data());
  }

  // A layer's slot capacity: min(max_rank, d_in).
  int32_t RankCap(int64_t d_in) const;
  // Whether a new layer takes the full transform (the default transform,
  // within full_max_d_in).
  bool DefaultFull(int64_t d_in) const;
  // The job's layers as a session declares them, and which have a full
  // region.
  std::vector<shm::LayerDecl> Decls() const;
  std::vector<bool> FullLayers() const;
  // Layers on the GIFT path.
  int SelectedCount() const;

  // The job's layer list and world size against a rank's or a follower's:
  // FAILED_PRECONDITION naming what differs.
  absl::Status CheckSameJob(int world_size, const LayerShapes& layers) const;
  // A rank of the running job asking wire format `asked` (a
  // RegisterRequest's; UNSPECIFIED takes the job's): INVALID_ARGUMENT for an
  // unknown value, FAILED_PRECONDITION when it differs from the job's.
  absl::Status CheckFormat(int rank, v1::WireFormat asked) const;
  // A peer's plan's formats: INVALID_ARGUMENT when the job format (if set)
  // or a layer's (if set; unset keeps the layer's own) is no wire format,
  // or a layer of this job cannot take its format
  // (kernels::CheckFormatFitsShape). `from` names the sender.
  absl::Status CheckPlanFormats(const v1::PeerPlan& plan,
                                const std::string& from) const;
  // Becomes job `job_id` of `world_size` ranks with one layer per shape and
  // the config's defaults, `format` (REQUIRES: valid()) the job's default
  // format (ConfigFormat() without it): a layer whose shape cannot take it
  // gets e4m3 and a format_note, logged. `each` sees every new layer before
  // it is added; its error stops there (the layers before it stay).
  absl::Status Adopt(const std::string& job_id, int world_size,
                     const LayerShapes& layers,
                     absl::FunctionRef<absl::Status(const JobLayer&)> each);
  absl::Status Adopt(const std::string& job_id, int world_size,
                     const LayerShapes& layers, kernels::WireFormat format,
                     absl::FunctionRef<absl::Status(const JobLayer&)> each);

  // INVALID_ARGUMENT for an unknown layer (naming how many there are).
  absl::StatusOr<JobLayer*> Find(const std::string& name);
  // Null for an unknown layer.
  JobLayer* FindOrNull(const std::string& name);
  const JobLayer* FindOrNull(const std::string& name) const;

  // The layers' plan state, for the Planner.
  std::vector<PlanLayer*> PlanLayers();
  std::vector<const PlanLayer*> PlanLayers() const;

  // {job_id, node} and `extra`: the labels of a metric series.
  metrics::Labels Labels(
      std::initializer_list<std::pair<const std::string, std::string>> extra)
      const;

 private:
  const DaemonConfig& config_;
  std::string job_id_;
  uint64_t generation_ = 0;
  int world_size_ = 0;
  kernels::WireFormat format_;
  std::vector<JobLayer> layers_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_JOB_LAYOUT_H_
