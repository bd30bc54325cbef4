// One training rank's libgift session behind the Python package `gift`
// (client/python/gift/_state.py): the communicator, ONE bucket plan over
// all of the model's trainable parameters (a flat buffer in the order the
// Python side chooses), ONE AllReduceEngine over it, and in gift mode the
// attachment to the local giftd. The Python comm hook gathers DDP's
// GradBuckets into the flat buffer and calls Step once per iteration, when
// the last bucket arrives (see __init__.py for why one flat plan).
//
//   NativeRankOptions o;
//   o.mode = "gift";
//   o.rank = 0; o.world_size = 2; o.store_dir = "/tmp/job/store";
//   o.job_id = "job42";
//   o.format = "nvfp4";                  // every layer that fits; else e4m3
//   ASSIGN_OR_RETURN(auto s, NativeRank::Create(o, layers, total_elements));
//   if (s->WantsSketch("fc1")) RETURN_IF_ERROR(s->Sketch("fc1", x, rows));
//   ASSIGN_OR_RETURN(StepResult r, s->Step(flat.data()));
//
// Modes: fp32, bf16 (AllReduceEngine modes of the same names), euclid
// (quantized, every layer Euclidean, no factors, no daemon) and gift
// (quantized with the attachment: the daemon's plans and factors).
// Quantized modes send every layer in options.format (e4m3, e5m2, nvfp4,
// mxfp4) where its shape can take it (kernels::CheckFormatFitsShape), e4m3
// otherwise (format_fallbacks() names those layers); in gift mode that is
// the base plan, and the daemon's plans choose per layer from then on.
// Overlapped steps (the comm hook reducing DDP's buckets one by one on a
// communication thread while the backward pass computes): BeginStep,
// ReduceBucket per bucket, EndStep — see AllReduceEngine.
//
// The communicator is set up as transport_setup.h says, its keys under
// key_prefix + "grad/".
//
// Thread safety: the step calls (Step, or BeginStep/ReduceBucket/EndStep)
// from one thread at a time (the communication thread); Sketch and
// WantsSketch may run on another (the training thread) — the attachment
// locks; Export/ImportState between steps only.
#ifndef GIFT_CLIENT_PYTHON_NATIVE_RANK_H_
#define GIFT_CLIENT_PYTHON_NATIVE_RANK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/allreduce_engine.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/store.h"
#include "client/telemetry.h"
#include "client/transport.h"
#include "client/versioned_factors.h"

namespace gift::client::python {

struct NativeRankOptions {
  // "fp32", "bf16", "euclid" or "gift". Default: gift.
  std::string mode = "gift";
  // "gloo" (host buffers) or "nccl" (device buffers). Default: gloo.
  std::string backend = "gloo";
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // Default: 0.
  int local_rank = 0;
  // CUDA device (nccl). Default: 0.
  int device = 0;
  // Rendezvous: through giftd's Agent socket when daemon_store, else a
  // FileStore on store_dir (REQUIRES: empty at the start, the same for
  // every rank). Keys are prefixed with key_prefix. Default: FileStore.
  bool daemon_store = false;
  std::string store_dir;
  std::string key_prefix;
  // A store of the job's own (the torch.distributed c10d store): used for
  // the rendezvous instead of store_dir when set and not daemon_store. The
  // session lets go of it once its communicator is connected (options()
  // has it empty).
  std::shared_ptr<Store> store;
  // Gloo: the interface to listen on; "" = chosen as net_endpoint.h says
  // (GLOO_SOCKET_IFNAME, GIFT_SOCKET_IFNAME, the route to MASTER_ADDR, ...).
  std::string socket_ifname;
  // giftd's Agent socket (gift mode and daemon_store). Default:
  // DefaultAgentSocket() ($GIFT_AGENT_SOCKET, else /tmp/gift/agent.sock;
  // common/agent_socket.h).
  std::string agent_socket;
  // REQUIRES: not empty in gift mode or with daemon_store; the same on
  // every rank.
  std::string job_id;
  // Default: 10. REQUIRES: >= 0.
  int probe_interval = 10;
  // Audit steps every this many steps (AllReduceEngineOptions); 0 =
  // never. An attached giftd's interval overrides it. Default: 100.
  // REQUIRES: >= 0.
  int audit_interval = 100;
  // Also the drift of the running sums between audits
  // (AllReduceEngineOptions::audit_drift). Default: false.
  bool audit_drift = false;
  // Bound of rendezvous and of every collective. Default: 60 s.
  double timeout_seconds = 60;
  // Modes euclid and gift: the wire format of every layer (in gift mode the
  // job's default, sent to giftd at registration; the daemon's plans may
  // choose per layer): "e4m3", "e5m2", "nvfp4" or "mxfp4"
  // (kernels::ParseWireFormat); "" = unset: e4m3 in mode euclid, giftd's
  // configured format in mode gift. A layer whose shape cannot take it keeps
  // e4m3 (NativeRank::format_fallbacks()). Modes fp32 and bf16: must be
  // unset. Default: unset.
  std::string format;
  // Euclidean error feedback (AllReduceEngineOptions::
  // euclid_error_feedback): "auto" (on for 4-bit layers, off for FP8),
  // "on" or "off". Modes fp32 and bf16: must be auto. Default: auto.
  std::string error_feedback = "auto";
  // Modes euclid and gift: AllReduceEngineOptions::owner_release_cap
  // (0 = no cap). Default: 0.25.
  float owner_release_cap = 0.25f;
};

// One layer's element format on the wire in a step, and the bytes of its
// codes and scales (one encoded copy of the layer, as the plan cuts it for
// this world size: a rank sends about 2 (W - 1) / W of it per step, as an
// FP32 ring allreduce sends 2 (W - 1) / W of 4 bytes per element).
struct LayerWire {
  std::string format;  // "e4m3", "e5m2", "nvfp4", "mxfp4", "fp32", "bf16"
  int64_t bytes = 0;
};

struct StepResult {
  StepTelemetry telemetry;
  double seconds = 0;  // wall time of BeforeStep + Run
};

class NativeRank {
 public:
  // Collective (the communicator and the allreduce are created on every
  // rank). `layers`: the flat buffer's layout (all Euclidean; 2-D layers
  // are the candidates declared to the daemon).
  static absl::StatusOr<std::unique_ptr<NativeRank>> Create(
      const NativeRankOptions& options, std::vector<BucketLayer> layers,
      int64_t total_elements);
  ~NativeRank();

  const NativeRankOptions& options() const { return options_; }
  // options().format as parsed when the options were checked (nullopt:
  // unset).
  const std::optional<kernels::WireFormat>& format() const { return format_; }
  const EpochPlan& base_plan() const { return base_; }
  // The layers that kept e4m3 because their shape cannot take
  // options().format (layer order).
  const std::vector<std::string>& format_fallbacks() const {
    return format_fallbacks_;
  }
  // Per layer (plan order), the wire format and bytes of the plan of
  // `epoch` (a step's StepTelemetry::plan_epoch; the base plan's when the
  // allreduce no longer holds that epoch).
  // Call between steps or on the step's thread (the allreduce's plans).
  std::vector<LayerWire> WireOf(int64_t epoch) const;
  // The same for `plan` (any thread for base_plan()).
  std::vector<LayerWire> WireOfPlan(const EpochPlan& plan) const;
  bool device_memory() const { return options_.backend == "nccl"; }

  bool WantsSketch(const std::string& layer) const;
  // rows × d_in activations (host, or device memory with nccl, produced on
  // `producer_stream`, a cudaStream_t; nullptr = the legacy default stream).
  absl::Status Sketch(const std::string& layer, const float* activations,
                      int64_t rows, void* producer_stream = nullptr);
  // The stream device sketches run on (the caller keeps the activations
  // alive for it: tensor.record_stream), or nullptr.
  void* sketch_stream() const;
  // Averages the flat buffer (base_plan().bucket_elements() floats) in
  // place across the ranks. Collective.
  absl::StatusOr<StepResult> Step(float* flat);

  // One overlapped step. BeginStep: the daemon's plans and factors, then
  // the agreement (collective). ReduceBucket: averages one DDP bucket's
  // buffer in place (collective). EndStep: the telemetry, to the daemon
  // too; returns the step's first error. Every BeginStep needs an EndStep.
  absl::Status BeginStep();
  absl::Status ReduceBucket(const BucketGroup& group, float* data);
  absl::StatusOr<StepResult> EndStep();
  // The device path's stream (cudaStream_t) or nullptr.
  void* stream() const { return allreduce_->stream(); }
  // Where this rank's Gloo listens, and why (empty for nccl).
  const std::string& endpoint() const { return endpoint_; }

  // Attachment state (gift mode); attached == false otherwise.
  ConnectionStats attachment_stats() const;
  const AllReduceEngine& allreduce() const { return *allreduce_; }

  // Offline use and tests (no daemon): a plan epoch with `gift_layers` on
  // the GIFT path, and factors by hand. A daemon's later epochs must then
  // exceed `epoch`.
  absl::Status AddPlan(int64_t epoch,
                       const std::vector<std::string>& gift_layers);
  absl::Status PutFactor(const std::string& layer, LayerFactor factor);

  // The allreduce's state and the factors held (every version of every
  // 2-D layer), for checkpoints. In gift mode ImportState re-registers with
  // the daemon as a resumed rank (ConnectionOptions::resume): it continues
  // above the restored epochs and versions and keeps the restored GIFT
  // layers selected.
  absl::StatusOr<AllReduceState> ExportState() const;
  std::vector<std::pair<std::string, LayerFactor>> ExportFactors() const;
  absl::Status ImportState(
      const AllReduceState& state,
      std::vector<std::pair<std::string, LayerFactor>> factors);

 private:
  NativeRank(const NativeRankOptions& options,
             std::optional<kernels::WireFormat> format, EpochPlan base,
             std::vector<std::string> format_fallbacks)
      : options_(WithoutStore(options)),
        format_(format),
        job_store_(options.store),
        base_(std::move(base)),
        format_fallbacks_(std::move(format_fallbacks)) {}
  static NativeRankOptions WithoutStore(NativeRankOptions o) {
    o.store.reset();
    return o;
  }
  absl::Status Connect();
  ConnectionOptions AttachmentOptionsFor() const;

  const NativeRankOptions options_;
  const std::optional<kernels::WireFormat> format_;  // options_.format
  std::shared_ptr<Store> job_store_;  // options.store, until connected
  const EpochPlan base_;
  const std::vector<std::string> format_fallbacks_;
  std::unique_ptr<Store> store_;  // the daemon's or the FileStore, or null
  std::unique_ptr<Transport> comm_;
  std::unique_ptr<AllReduceEngine> allreduce_;
  std::unique_ptr<GiftdConnection> attachment_;  // gift mode only
  VersionedFactors factors_;
  std::string endpoint_;
  // The step in progress: busy time of its calls.
  absl::Duration busy_;
};

}  // namespace gift::client::python

#endif  // GIFT_CLIENT_PYTHON_NATIVE_RANK_H_
