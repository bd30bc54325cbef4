// AllReduceEngine (the public gift::QuantizedAllReduce wraps one): the
// per-step gradient allreduce of libgift over one fused bucket
// (DESIGN §3, §4): averages a bucket of FP32 gradients across the ranks of a
// Transport, by default with the two-phase FP8 algorithm, GIFT whitening
// and error feedback on the plan's GIFT layers, and the per-step agreement
// on plan epoch and factor versions.
//
// Modes:
//   fp8       two-phase quantized allreduce (fp8_round.h), each layer in its
//             wire format (BucketLayer::format: FP8 e4m3 / e5m2, or 4-bit
//             nvfp4 / mxfp4): local per-segment scales, FP32 accumulation by
//             the chunk owner, re-quantization, all-gather. GIFT layers:
//             Ũ = W T + R (worker residual R), quantize, R = Ũ − deq(q);
//             after: Ŵ = Û T⁻¹. The owner keeps its own residual for the
//             re-quantization of GIFT segments. Euclidean error feedback
//             (options.euclid_error_feedback; on by default for 4-bit
//             layers only): the same two residuals for a layer sent
//             Euclidean, in gradient coordinates: quantize x + r, r = x + r −
//             deq(q).
//   fp32      Transport::AllReduce SUM in FP32, then / W.
//   bf16      the same in bfloat16 (every partial sum rounded), then / W.
//   nccl-fp8  the paper's path (nccl_fp8_allreduce.h: global MAX-reduced
//             per-layer scale, W-fold headroom, NCCL's FP8 sum): needs the
//             NCCL backend on sm_90 (FAILED_PRECONDITION otherwise). GIFT
//             layers go Euclidean; no agreement, no probes.
// Averaging (÷ W) is done once, in FP32, in every mode.
//
// Factor switch (a layer's agreed version changes from v to v′): the worker
// residual moves with it, R ← (R T_v⁻¹) T_v′. So does the owner residual of
// that layer's segments, row by row (T acts along d_in): each owner
// reprojects the whole rows of its segments the same way; only the partial
// rows at a segment's two ends, whose other elements live in another
// owner's chunk, are zeroed (Fp8Round, LayerIo::owner_from). Zeroing all of
// it dropped one rounding of one step's sum at every refresh, and the
// running sum's drift grew with the number of refreshes.
//
// Euclidean residuals follow the layer: a format change keeps the worker
// residual (it is in gradient coordinates, whatever the format); a layer
// whose Euclidean feedback turns off (a new epoch moves it from a 4-bit to
// an FP8 format under the default) or that takes the GIFT path with an
// agreed factor adds its worker residual to the gradient of that step
// (before whitening) and drops it — exact, as (W + r) T = W T + r T; a layer
// leaving the GIFT path flushes its GIFT residual into the gradient as above
// and then starts a Euclidean one. A GIFT layer without an agreed factor
// for a step goes Euclidean with Euclidean feedback (when on) and keeps its
// GIFT residual for later. The owner residuals of a layer's segments
// follow it between the paths too: a GIFT layer sent Euclidean un-whitens
// their whole rows (R T⁻¹), and a layer taking the GIFT path after
// Euclidean steps with feedback whitens them (R T); they are reset
// whenever they last held nothing usable (no feedback, nothing). A new
// plan epoch keeps them: plans share one layout, so each owner holds the
// same elements in every epoch.
//
// The transform of a GIFT layer is that of the agreed factor (LayerFactor::
// kind); BucketLayer::transform tells the daemon which kind to build.
//
// Non-finite gradients: a NaN/Inf in a layer on any rank makes that whole
// layer NaN on every rank (the NaN scale of its block marks it; every rank
// then fills the layer), as an FP32 allreduce would mark the step; counted in
// StepTelemetry. Gaps between layers are neither sent nor written.
//
//   AllReduceEngineOptions options;  // fp8
//   ASSIGN_OR_RETURN(auto ar, AllReduceEngine::Create(comm.get(), plan,
//                                                        options));
//   VersionedFactors factors;  // filled from the daemon's factor slots
//   StepTelemetry t;
//   RETURN_IF_ERROR(ar->Run(bucket.data(), factors, &t));
//
// Memory: the communicator's kind (fp8_backend.h): host memory with Gloo,
// device memory with NCCL. The two share every step above and differ only in
// the backend's kernels; the FP8 codes, scales, sums and residuals are
// bit-identical between them, the GIFT transforms agree to GEMM rounding.
// On the device path every Run points the communicator at the backend's own
// stream (several allreduces may share a communicator), reads the bucket on
// it (REQUIRES: the caller's writes to the bucket are complete, e.g. its
// stream synchronised) and returns with the results complete. The control
// messages built on the host (plan and option checks, the agreement) travel
// through a staging wrapper (staging_transport.h).
//
// Overlapped steps (a framework that hands its gradient buckets over one by
// one while the backward pass still computes, like DDP's comm hook): one
// step is BeginStep (the agreement, once), RunBucket for every bucket (each
// holds some of the plan's layers at offsets of the bucket's own buffer;
// every layer in exactly one bucket; the same buckets in the same order on
// every rank) and EndStep. Run(bucket) is exactly that with one bucket, the
// plan's own layout. A bucket's layout is checked across the ranks the first
// time it is seen in an epoch (a mismatch is FAILED_PRECONDITION on every
// rank); the owner residuals are kept per bucket layout (a layout no step
// uses any more is dropped at EndStep).
//
//   RETURN_IF_ERROR(ar->BeginStep(factors));
//   for (each bucket b, in order)  // e.g. on a communication thread
//     RETURN_IF_ERROR(ar->RunBucket(b.group, b.data));
//   RETURN_IF_ERROR(ar->EndStep(&t));
//
// Thread safety: not thread-safe; one step at a time, from one thread at a
// time, and the communicator must not be used concurrently by anything else.
#ifndef GIFT_CLIENT_ALLREDUCE_ENGINE_H_
#define GIFT_CLIENT_ALLREDUCE_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/epoch_plan.h"
#include "client/fp8_backend.h"
#include "client/fp8_round.h"
#include "client/nccl_fp8_allreduce.h"
#include "client/telemetry.h"
#include "client/transport.h"
#include "client/versioned_factors.h"

namespace gift::client {

enum class AllReduceMode { kFp8, kFp32, kBf16, kNcclFp8 };

// "fp8", "fp32", "bf16", "nccl-fp8".
absl::string_view AllReduceModeName(AllReduceMode mode);
absl::StatusOr<AllReduceMode> ParseAllReduceMode(absl::string_view name);

// Error feedback on the Euclidean path (AllReduceEngineOptions::
// euclid_error_feedback): kAuto is on for 4-bit layers, off for FP8 ones.
enum class EuclidFeedback : uint8_t { kAuto = 0, kOff = 1, kOn = 2 };

// "auto", "off", "on".
absl::string_view EuclidFeedbackName(EuclidFeedback f);
absl::StatusOr<EuclidFeedback> ParseEuclidFeedback(absl::string_view name);

struct AllReduceEngineOptions {
  // Default: fp8.
  AllReduceMode mode = AllReduceMode::kFp8;
  // Buckets whose FP32 payload exceeds this are processed in pieces, each a
  // full two-phase round (bounds the staging buffers). Default: 256 MiB.
  // REQUIRES: >= 4 (one float).
  int64_t piece_bytes = int64_t{256} << 20;
  // Probe steps every this many Run calls (step 0 is one); 0 = never.
  // Default: 10. REQUIRES: >= 0. An attached giftd's plan overrides it
  // (set_probe_interval).
  int probe_interval = 10;
  // Worker and owner error feedback on GIFT layers. Default: true. A layer
  // that a new plan epoch takes off the GIFT path sends its worker residual,
  // un-whitened, with its first Euclidean step and drops it (a GIFT layer
  // without an agreed factor for a step keeps it for the next one).
  bool error_feedback = true;
  // Audit steps (fp8 mode): every this many steps (steps audit_interval,
  // 2·audit_interval, …) the step also runs an FP32 allreduce of the same
  // local gradients and reports, per layer, the error of the gradient it
  // applies against that FP32 average (LayerTelemetry::audit_*): one extra
  // FP32 collective on that step, of 1× (2× with drift) the bucket. 0 =
  // never. Default: 100. REQUIRES: >= 0. Changeable between steps
  // (set_audit_interval): a step is an audit step only when it is one for
  // every rank's interval (the per-step agreement decides), so ranks that
  // see a change at different steps never disagree.
  int audit_interval = 100;
  // Drift on audit steps: running sums of every layer's local and applied
  // gradients since the previous audit (memory: 2 × 4 bytes per gradient
  // element; two additions per element on every step, kept only while
  // audit_interval > 0: allreduce_bench fp8+drift, 16 MiB on 4 CPU ranks,
  // +50% step time, memory-bound; on a GPU a few µs). Reported only when
  // every rank's sums cover the same steps. Default: false (opt in to
  // measure drift). Must be the same on every rank.
  bool audit_drift = false;
  // Worker and owner error feedback (fp8 mode) on the steps a layer is sent
  // Euclidean (its plan path, or GIFT without an agreed factor): the worker
  // quantizes x + r and keeps r = x + r − x̂ per layer, the owner keeps a
  // residual per segment, as on the GIFT path (memory: 4 bytes per element
  // of such layers, plus the owner's share). kAuto: on for 4-bit layers
  // (nvfp4, mxfp4), off for FP8 layers, so FP8 results are those without
  // it. Default: kAuto. Must be the same on every rank.
  EuclidFeedback euclid_error_feedback = EuclidFeedback::kAuto;
  // Owner error feedback with a capped release (either path): an owner
  // adds at most owner_release_cap × ‖the segment's sum‖ of its residual
  // (L2, per segment of its chunk) to a step's sum and keeps the rest for
  // later steps, so nothing is dropped. Without the cap, a step after an
  // energetic batch releases that batch's whole quantization error at once:
  // the demo's step-200 audit and its 50-step-window misses (README).
  // 0 = no cap (textbook error feedback). Default: 0.25 (in the demo at
  // NVFP4 the owner residual is about 0.1 of the sum, so the cap acts on
  // about 1.5% of the additions, after energetic batches). REQUIRES:
  // finite, >= 0. Must be the same on every rank.
  float owner_release_cap = 0.25f;
};

// Everything a AllReduceEngine carries from one step to the next, as
// plain host data (checkpointing: a job restored from it continues exactly,
// given the same factors). Scratch buffers are not part of it.
struct AllReduceState {
  struct GiftLayer {
    std::string name;
    // Worker residual in the coordinates of `factor` (empty: none yet).
    std::vector<float> residual;
    bool has_factor = false;
    LayerFactor factor;  // the factor the residual is in
    int64_t owner_version = kNoVersion;
  };
  int64_t step = 0;              // Run calls so far
  int64_t current_epoch = 0;     // the epoch in use
  std::vector<EpochPlan> plans;  // held epochs, ascending
  std::vector<GiftLayer> gift_layers;
  // The owner residuals of one bucket layout (BucketGroup), per piece; an
  // empty vector = not allocated yet.
  struct OwnerResiduals {
    std::vector<int> layers;
    std::vector<int64_t> offsets;
    int64_t elements = 0;
    std::vector<std::vector<float>> pieces;
  };
  std::vector<OwnerResiduals> owner_residuals;
  // Euclidean error feedback: per layer that holds one, the worker residual
  // (gradient coordinates) and whether the owner residuals of its segments
  // hold Euclidean residuals (false: reset at its next Euclidean step).
  // Empty in a state exported before this existed: importing it starts
  // every Euclidean residual at zero.
  struct EuclidLayer {
    std::string name;
    std::vector<float> residual;
    bool owner_live = false;
  };
  std::vector<EuclidLayer> euclid_layers;
};

// One framework bucket of an overlapped step: some of the plan's layers,
// each at an element offset of the bucket's own buffer.
struct BucketGroup {
  std::vector<int> layers;       // indices into the plan's layers
  std::vector<int64_t> offsets;  // of each layer in the buffer, ascending
  int64_t elements = 0;          // the buffer's size in floats

  // The whole plan as one bucket in its own layout (what Run uses).
  static BucketGroup WholePlan(const EpochPlan& plan);
  // Stable across processes: keys the owner residuals.
  uint64_t Key() const;
};

class AllReduceEngine {
 public:
  // Collective: checks the plan across ranks (FAILED_PRECONDITION "bucket
  // plan mismatch across ranks ..." on every rank when they differ), and the
  // mode against the backend. REQUIRES: comm not null, outlives this.
  static absl::StatusOr<std::unique_ptr<AllReduceEngine>> Create(
      Transport* comm, EpochPlan plan, const AllReduceEngineOptions& options);

  // Local (not collective): makes a newer plan epoch available; the job
  // switches to it in the first step in which every rank's newest epoch is
  // the same. Keeps the epoch in use and the newest one (never evicting the
  // one in use), so a step in which the ranks' newest epochs differ (a
  // daemon published several in a row) simply stays on the current epoch.
  // INVALID_ARGUMENT unless plan.epoch() is above every held epoch and the
  // layout (bucket size, names, shapes, offsets) matches. When the ranks
  // hold different plans under the epoch they would switch to (a restarted
  // giftd reused the number), every rank drops it in that step and stays on
  // the epoch in use (StepTelemetry::dropped_epoch).
  absl::Status AddPlan(EpochPlan plan);

  // Averages `bucket` (plan.bucket_elements() floats, of the communicator's
  // memory kind) in place
  // across the ranks. Collective. `factors` supplies the GIFT layers'
  // factors by layer name; the agreed version of each is used. telemetry is
  // nullable. On a communication error (DEADLINE_EXCEEDED / UNAVAILABLE, or
  // FAILED_PRECONDITION once the communicator is broken) the bucket holds
  // partial results.
  absl::Status Run(float* bucket, const VersionedFactors& factors,
                   StepTelemetry* telemetry);

  // An overlapped step (see the class comment). BeginStep: collective (the
  // agreement); `factors` must stay unchanged until EndStep. RunBucket:
  // collective; `data` holds group.elements floats of the communicator's
  // memory kind and is averaged in place (gaps untouched); INVALID_ARGUMENT
  // (local) for an unknown or repeated layer or a bad layout. EndStep: local;
  // fills the step's telemetry (nullable) and returns the step's first
  // error, or FAILED_PRECONDITION when some layer of the plan was in no
  // bucket. Every BeginStep must be followed by EndStep, also after errors.
  // On the device path the results of RunBucket are complete on stream()
  // (the caller orders its use with an event), not on the host, until
  // EndStep.
  absl::Status BeginStep(const VersionedFactors& factors);
  absl::Status RunBucket(const BucketGroup& group, float* data);
  absl::Status EndStep(StepTelemetry* telemetry);
  bool in_step() const { return step_ctx_.open; }
  // The stream the device path runs on (cudaStream_t), or nullptr.
  void* stream() const { return backend_->stream(); }
  const EpochPlan& layout() const { return plans_.rbegin()->second; }
  // The plan of `epoch` if held (the one in use and the newest), else null.
  const EpochPlan* plan(int64_t epoch) const {
    auto it = plans_.find(epoch);
    return it != plans_.end() ? &it->second : nullptr;
  }

  // Local. Host-memory backends only (FAILED_PRECONDITION on the device
  // path for now).
  absl::StatusOr<AllReduceState> ExportState() const;
  // Local: replaces the state; every rank must import its own export of the
  // same step. INVALID_ARGUMENT unless every plan shares this allreduce's
  // layout, the current epoch is among them and the residual sizes fit.
  absl::Status ImportState(const AllReduceState& state);

  const AllReduceEngineOptions& options() const { return options_; }
  // Local: the audit interval from the next step on (INVALID_ARGUMENT when
  // negative). 0 stops auditing and frees the drift sums.
  absl::Status set_audit_interval(int steps);
  int audit_interval() const { return audit_interval_; }
  // Local: the probe interval from the next step on (INVALID_ARGUMENT when
  // negative; 0 = no probes). Probes are local, so ranks may differ.
  absl::Status set_probe_interval(int steps);
  int probe_interval() const { return probe_interval_; }
  // The epoch used by the last Run (the creation plan's before the first).
  int64_t current_epoch() const { return current_epoch_; }
  // The factor version the layer's last GIFT-path step used (its owner
  // residual's; kept by ExportState), kNoVersion when it was Euclidean.
  int64_t GiftVersionInUse(const std::string& layer) const {
    auto it = gift_.find(layer);
    return it == gift_.end() ? kNoVersion : it->second.owner_version;
  }

 private:
  // Per-layer GIFT state that lives across steps.
  struct GiftState {
    // Worker residual, whitened coordinates (backend memory); null until the
    // layer first takes the GIFT path with error feedback.
    std::unique_ptr<Fp8Buffer> residual;
    std::unique_ptr<LayerFactor> factor;  // the factor the residual is in
    int64_t owner_version = kNoVersion;   // owner residual's version
    // The factor that the layer's last step replaced in `factor` (else
    // null): the owner residual (of version owner_version) is still in its
    // coordinates until that step's rounds reproject it (LayerIo::
    // owner_from). Only that step reads it, so it is not checkpoint state:
    // a restored layer's next switch reprojects from `factor`.
    std::unique_ptr<LayerFactor> previous;
  };
  // Per-layer Euclidean error-feedback state.
  struct EuclidState {
    std::unique_ptr<Fp8Buffer> residual;  // gradient coordinates
    bool owner_live = false;              // owner residuals hold Euclidean ones
  };

  AllReduceEngine(Transport* comm, EpochPlan plan,
                  const AllReduceEngineOptions& options,
                  std::unique_ptr<Fp8Backend> backend,
                  std::unique_ptr<NcclFp8AllReduce> nccl_fp8);

  // The step in progress (BeginStep .. EndStep).
  struct StepContext {
    bool open = false;
    const VersionedFactors* factors = nullptr;
    const EpochPlan* plan = nullptr;  // the agreed epoch's plan
    std::vector<int64_t> versions;    // agreed factor version per layer
    std::vector<bool> done;           // per layer: reduced this step
    std::vector<uint64_t> groups;     // bucket layouts used this step
    bool drift = false;  // running sums kept this step (and audited if so)
    bool drift_agreed = false;  // every rank's sums cover the same steps
    uint64_t bytes_before = 0;
    StepTelemetry t;
    absl::Status error;
  };
  // One bucket in the plan of the step: its layers (indices into the step's
  // plan) as a plan of their own over the bucket's buffer.
  struct Group {
    std::vector<int> index;
    EpochPlan plan;
  };

  absl::Status Begin(const VersionedFactors& factors);
  absl::StatusOr<const Group*> GroupFor(const BucketGroup& g);
  absl::Status RunPlain(float* data, const EpochPlan& plan, StepTelemetry* t);
  absl::Status FlushResidual(int i, const BucketLayer& l, float* grad,
                             GiftState& st);
  absl::Status RunFp8(float* data, const Group& g, const BucketGroup& layout,
                      StepTelemetry* t);
  // RunFp8's three stages: the layers' inputs (GIFT whitening), the rounds
  // over the pieces, the layers' outputs (NaN fill, un-whitening).
  absl::Status PrepareLayers(float* data, const Group& g, StepTelemetry* t,
                             std::vector<LayerIo>* io,
                             std::vector<const LayerFactor*>* used);
  absl::Status RunRounds(const EpochPlan& plan, const BucketGroup& layout,
                         const std::vector<LayerIo>& io, RoundOutcome* outcome);
  absl::Status FinishLayers(float* data, const Group& g,
                            const std::vector<LayerIo>& io,
                            const std::vector<const LayerFactor*>& used,
                            const RoundOutcome& outcome, StepTelemetry* t);
  absl::StatusOr<const EpochPlan*> AgreeOnStep(const VersionedFactors& factors,
                                               std::vector<int64_t>* versions);
  // Audit steps: the running sums before the round, the audit after it.
  absl::Status AuditBefore(const Group& g, const float* data);
  absl::Status AuditAfter(const Group& g, float* data, StepTelemetry* t);
  // euclid_owner: the owner residuals of the layer's segments hold its
  // Euclidean ones (it leaves the Euclidean path this step).
  absl::Status PrepareGiftLayer(int i, const BucketLayer& l,
                                const LayerFactor& f, const float* grad,
                                bool euclid_owner, LayerIo* io);
  // Euclidean error feedback: whether layer l uses it, the step's input
  // x + r (in place in grad), and the flush of a residual into grad.
  bool EuclidFeedbackOn(const BucketLayer& l) const;
  absl::Status PrepareEuclidLayer(const BucketLayer& l, float* grad,
                                  const LayerFactor* gift_owner, LayerIo* io);
  // owner_live (nullable): whether the owner residuals held Euclidean ones.
  absl::Status FlushEuclidResidual(const BucketLayer& l, float* grad,
                                   bool* owner_live = nullptr);
  absl::Status ImportEuclidLayers(
      const AllReduceState& state,
      std::map<std::string, EuclidState>* euclid) const;
  absl::Status Probe(const Group& g, const float* data, StepTelemetry* t);
  // After RunRounds: what the layout's owner residuals now hold.
  void NoteOwnerCoords(const Group& g, const BucketGroup& layout,
                       const std::vector<LayerIo>& io,
                       const std::vector<const LayerFactor*>& used);
  struct OwnerState;
  // A bucket layout no step uses any more (DDP rebuilt its buckets): each of
  // its owner residuals this rank holds joins the worker residual of its
  // layer in the same coordinates, so the next step's sum carries it.
  absl::Status FoldOwnerResidual(const OwnerState& os);

  Transport* const comm_;
  const AllReduceEngineOptions options_;
  std::map<int64_t, EpochPlan> plans_;  // by epoch, at most two
  int64_t current_epoch_;
  int64_t step_ = 0;
  std::map<std::string, GiftState> gift_;
  std::map<std::string, EuclidState> euclid_;
  // β auto: per layer, the probe's copies of one factor version rebuilt for
  // each β of kBetaGridValues (kept, so their addresses stay those of the
  // same coefficients while the device backend caches uploads by address).
  struct BetaVariants {
    int64_t version = kNoVersion;
    std::vector<LayerFactor> f;
  };
  std::map<std::string, BetaVariants> beta_variants_;
  // The memory backend (also the control messages' communicator) and the
  // round on it.
  std::unique_ptr<Fp8Backend> backend_;
  std::unique_ptr<Fp8Round> round_;
  // nccl-fp8 only.
  std::unique_ptr<NcclFp8AllReduce> nccl_fp8_;
  std::vector<std::unique_ptr<Fp8Buffer>> whitened_;  // per plan layer
  // Owner residuals per bucket layout (BucketGroup::Key), per piece, with
  // the layout's plan and each of its layers' coordinates as of the last
  // step that used it (FoldOwnerResidual; both unset after ImportState).
  struct OwnerState {
    BucketGroup group;
    std::vector<std::unique_ptr<Fp8Buffer>> pieces;
    std::optional<EpochPlan> plan;
    // Per plan layer: kEuclidCoords, a GIFT factor version, or kNoVersion
    // (no owner residual).
    std::vector<int64_t> coords;
  };
  static constexpr int64_t kEuclidCoords = -2;
  std::map<uint64_t, OwnerState> owner_residual_;
  // The bucket layouts of the epoch in use, checked across ranks.
  std::map<uint64_t, Group> groups_;
  StepContext step_ctx_;
  std::unique_ptr<Fp8Buffer> bf16_;
  // Probe steps (options.probe_interval until set_probe_interval).
  int probe_interval_;
  // Audit steps.
  int audit_interval_;
  // Per layer name: running sums of the local and the applied gradient
  // since the previous audit (backend memory).
  struct DriftSums {
    std::unique_ptr<Fp8Buffer> local, applied;
  };
  std::map<std::string, DriftSums> drift_;
  int64_t drift_steps_ = 0;  // steps the running sums cover
  // One bucket's audit payload: its local gradients, packed, then (with
  // drift) its local running sums; averaged in place.
  std::unique_ptr<Fp8Buffer> audit_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_ALLREDUCE_ENGINE_H_
