// gift::QuantizedAllReduce: the per-step gradient allreduce of libgift over
// one bucket plan. It averages a bucket of FP32 gradients across the ranks
// of a Communicator, by default with the two-phase FP8 algorithm (75% fewer
// bytes than FP32), and on the plan's GIFT layers with whitening and error
// feedback, using the factors a giftd attachment (or PutFactor) supplies.
//
//   std::unique_ptr<gift::QuantizedAllReduce> ar;
//   gift::Status s = gift::QuantizedAllReduce::Create(comm, plan, {}, &ar);
//   ...
//   // after backward, every step, on every rank:
//   s = ar->Step(bucket.data(), bucket.size());  // averaged in place
//
// Modes:
//   fp8       two-phase FP8: per-segment scales, FP32 accumulation by the
//             chunk owner, re-quantization, FP8 all-gather; the GIFT path
//             on GIFT layers that have an agreed factor (the default).
//   fp32      FP32 sum, then / world_size (the exact baseline).
//   bf16      the same in bfloat16 (every partial sum rounded).
//   nccl-fp8  NCCL's own FP8 sum with a global per-layer scale (NCCL
//             backend on sm_90 only; FAILED_PRECONDITION otherwise).
// Every rank gets bit-identical results in every mode. A NaN/Inf in a
// layer on any rank makes that whole layer NaN on every rank (as an FP32
// allreduce would), counted in StepStats::nonfinite_layers.
//
// Memory: the bucket is host memory for the Gloo backend and device memory
// of the communicator's GPU for NCCL; on the device path the caller's
// writes to the bucket must be complete (its stream synchronised) and the
// results are complete when Step returns.
//
// Overlapped steps (buckets handed over one by one while the backward pass
// still computes): BeginStep, ReduceBucket per bucket (each holds some of
// the plan's layers at offsets of its own buffer; every layer in exactly
// one bucket; the same buckets in the same order on every rank), EndStep.
// Step(bucket) is that with one bucket, the plan's own layout.
//
// With a DaemonAttachment (Attach), every step first takes the daemon's
// newer plan epochs and factors, and afterwards publishes the step's
// telemetry and closes the activation windows; the attachment never stops
// training (without a daemon the plan's own paths are used).
//
// Thread safety: not thread-safe; one step at a time, from one thread at a
// time, and its communicator must not be used concurrently by anything
// else. The allreduce keeps its communicator alive (shared ownership).
#ifndef GIFT_ALLREDUCE_H_
#define GIFT_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gift/bucket_plan.h"
#include "gift/communicator.h"
#include "gift/export.h"
#include "gift/status.h"

namespace gift {

class DaemonAttachment;

enum class AllReduceMode : int { kFp8 = 0, kFp32 = 1, kBf16 = 2, kNcclFp8 = 3 };

// "fp8", "fp32", "bf16", "nccl-fp8".
GIFT_EXPORT const char* AllReduceModeName(AllReduceMode mode);
// The inverse; INVALID_ARGUMENT listing the modes for anything else.
GIFT_EXPORT Status ParseAllReduceMode(const std::string& name,
                                      AllReduceMode* out);

// Error feedback on the Euclidean path (AllReduceOptions::
// euclid_error_feedback): kAuto is on for 4-bit layers, off for FP8 ones.
enum class EuclidFeedback : int { kAuto = 0, kOff = 1, kOn = 2 };

struct AllReduceOptions {
  // Default: fp8.
  AllReduceMode mode = AllReduceMode::kFp8;
  // Buckets whose FP32 payload exceeds this are sent in pieces, each a full
  // two-phase round (bounds the staging memory). Default: 256 MiB.
  // REQUIRES: >= 4.
  int64_t piece_bytes = int64_t{256} << 20;
  // Euclidean-vs-GIFT probe steps every this many steps (step 0 is one);
  // 0 = never. Default: 10. REQUIRES: >= 0. An attached giftd's own
  // interval (its plan's) overrides it.
  int probe_interval = 10;
  // Error feedback on GIFT layers. Default: true.
  bool error_feedback = true;
  // Audit steps (fp8 mode): steps audit_interval, 2 audit_interval, ...
  // also run an FP32 allreduce of the same local gradients and report, per
  // layer, the error of what was applied against that FP32 average
  // (LayerStats::audit_*): one extra FP32 collective on those steps. An
  // attached giftd's interval overrides it. 0 = never. Default: 100.
  // REQUIRES: >= 0. Changeable between steps (SetAuditInterval).
  int audit_interval = 100;
  // On audit steps also the drift: the running sum of the applied
  // gradients since the previous audit against the FP32 average of the
  // running sums of the local ones (memory: 8 bytes per gradient element
  // while audit_interval > 0; two additions per element and step). Default:
  // false. The same on every rank.
  bool audit_drift = false;
  // Error feedback (fp8 mode) on the steps a layer is sent Euclidean (its
  // path, or GIFT without an agreed factor): each rank quantizes its
  // gradient plus its residual and keeps what the quantization lost, and
  // the chunk owner keeps its own residual, as on GIFT layers (4 bytes of
  // memory per element of such layers). kAuto: on for 4-bit layers, off
  // for FP8 ones. Default: kAuto. The same on every rank.
  EuclidFeedback euclid_error_feedback = EuclidFeedback::kAuto;
  // Error feedback with a capped release (either path): a chunk owner adds
  // at most owner_release_cap × the norm of the step's sum of its residual
  // and keeps the rest for later steps (nothing is dropped), so a step
  // after an energetic batch does not release that batch's whole
  // quantization error at once. 0 = no cap. Default: 0.25 (the residual is
  // about 0.1 of the sum at 4 bits, so the cap acts only after such
  // batches). Finite, >= 0; the same on every rank.
  float owner_release_cap = 0.25f;
};

// One version of the whitening transform of a GIFT layer, FP32 row-major.
// Low-rank: T = I + U diag(c) U^T, T^-1 = I + U diag(c_inv) U^T, with u
// d_in x r and c, c_inv of r entries. Full: t and t_inv, d_in x d_in.
struct GiftFactor {
  // REQUIRES: >= 0; versions of a layer increase with time.
  int64_t version = 0;
  GiftTransform kind = GiftTransform::kLowRank;
  int64_t d_in = 0;
  int64_t r = 0;
  std::vector<float> u;
  std::vector<float> c;
  std::vector<float> c_inv;
  std::vector<float> t;
  std::vector<float> t_inv;
};

// What one step reports about one layer (this rank's view).
struct LayerStats {
  std::string name;
  // The path taken this step (a GIFT layer without an agreed factor goes
  // Euclidean).
  LayerPath path = LayerPath::kEuclid;
  // Factor version used, or -1.
  int64_t factor_version = -1;
  // This rank's quantization of the layer (whitened coordinates on the
  // GIFT path): elements, boundary hits at +-max (upper) and at zero or the
  // smallest subnormal (lower), non-finite inputs, and the round trip's
  // ||x^ - x||^2 and ||x||^2.
  int64_t elements = 0;
  int64_t upper = 0;
  int64_t lower = 0;
  int64_t nonfinite = 0;
  double err_sq = 0;
  double x_sq = 0;
  // Some rank had a NaN/Inf in this layer: its result is NaN everywhere.
  bool nonfinite_result = false;
  // Probe steps: the local round-trip RelL2 of each path.
  bool probed = false;
  double probe_euclid_rel_l2 = 0;
  double probe_gift_rel_l2 = 0;
  // Audit steps: the applied gradient against the FP32 average of the
  // ranks' local ones (RelL2 and cosine; the same on every rank), and with
  // drift the RelL2 of the running sums over the last drift_steps steps.
  bool audited = false;
  double audit_rel_l2 = 0;
  double audit_cosine = 0;
  bool drift_audited = false;
  double audit_drift = 0;
  int64_t drift_steps = 0;
};

struct StepStats {
  // Steps completed before this one, 0-based.
  int64_t step = 0;
  int64_t plan_epoch = 0;
  bool probe_step = false;
  std::vector<LayerStats> layers;  // plan order
  int64_t nonfinite_layers = 0;
  bool audit_step = false;
  // Payload bytes this rank sent, split by path, control messages, and the
  // audit's FP32 allreduce.
  uint64_t bytes_euclid = 0;
  uint64_t bytes_gift = 0;
  uint64_t bytes_control = 0;
  uint64_t bytes_audit = 0;
  // Wall time of the GIFT transforms, of the audit, and of the whole step
  // (with the attachment's work before it: what the daemon is told).
  double transform_seconds = 0;
  double audit_seconds = 0;
  double seconds = 0;
};

// One bucket of an overlapped step: layer indices into the plan, the
// element offset of each in the bucket's buffer (ascending), and the
// buffer's size in floats.
struct BucketLayout {
  std::vector<int> layers;
  std::vector<int64_t> offsets;
  int64_t elements = 0;
};

class GIFT_EXPORT QuantizedAllReduce {
 public:
  // Collective: checks the plan across the ranks (FAILED_PRECONDITION
  // "bucket plan mismatch across ranks ..." on every rank when they differ)
  // and the mode against the backend. INVALID_ARGUMENT for a null
  // communicator, an invalid plan or bad options. REQUIRES: out not null.
  static Status Create(std::shared_ptr<Communicator> comm,
                       const BucketPlan& plan, const AllReduceOptions& options,
                       std::unique_ptr<QuantizedAllReduce>* out);

  ~QuantizedAllReduce();  // detaches the attachment, if any
  QuantizedAllReduce(const QuantizedAllReduce&) = delete;
  QuantizedAllReduce& operator=(const QuantizedAllReduce&) = delete;

  // Averages bucket[0, count) in place across the ranks. Collective.
  // INVALID_ARGUMENT (before anything is sent) for a null bucket or a
  // count other than plan().bucket_elements(); FAILED_PRECONDITION inside
  // an overlapped step. On a communication error (DEADLINE_EXCEEDED /
  // UNAVAILABLE; FAILED_PRECONDITION once the communicator is broken) the
  // bucket holds partial results. stats: nullable.
  Status Step(float* bucket, size_t count, StepStats* stats = nullptr);

  // An overlapped step (see above). BeginStep: collective (the per-step
  // agreement). ReduceBucket: collective; data holds layout.elements floats
  // (count must equal it), averaged in place; INVALID_ARGUMENT for an
  // unknown or repeated layer or a bad layout. EndStep: local; returns the
  // step's first error, or FAILED_PRECONDITION when a layer of the plan was
  // in no bucket. Every BeginStep must be followed by EndStep, also after
  // errors.
  Status BeginStep();
  Status ReduceBucket(const BucketLayout& layout, float* data, size_t count);
  Status EndStep(StepStats* stats = nullptr);

  // Local: makes a newer plan epoch available (the job switches to it in
  // the first step in which every rank has it). INVALID_ARGUMENT unless its
  // epoch is above every held one and its layout is the plan's.
  Status AddPlan(const BucketPlan& plan);
  // Local: adds a factor version for a 2-D layer (the two newest versions
  // are kept); the per-step agreement picks the version every rank holds.
  // INVALID_ARGUMENT for an unknown or 1-D layer or inconsistent sizes.
  Status PutFactor(const std::string& layer, const GiftFactor& factor);
  // Local: the audit interval from the next step on (0 stops auditing);
  // INVALID_ARGUMENT when negative. A step audits only when it is an audit
  // step for every rank's interval.
  Status SetAuditInterval(int steps);

  // Feeds the daemon's plans and factors into every later step and
  // reports each step's telemetry to it. nullptr detaches. One attachment
  // serves one allreduce at a time (FAILED_PRECONDITION otherwise);
  // INVALID_ARGUMENT unless its base plan has this plan's layout; not
  // inside an overlapped step.
  Status Attach(std::shared_ptr<DaemonAttachment> attachment);

  // The creation plan (the layout of every epoch).
  const BucketPlan& plan() const;
  const AllReduceOptions& options() const;
  std::shared_ptr<Communicator> communicator() const;
  // The epoch used by the last step (the creation plan's before the first).
  int64_t current_epoch() const;
  // Steps completed.
  int64_t steps() const;
  // The stream the device path runs on (a cudaStream_t), or nullptr.
  void* stream() const;

 private:
  struct Rep;
  explicit QuantizedAllReduce(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace gift

#endif  // GIFT_ALLREDUCE_H_
