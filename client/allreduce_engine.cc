// AllReduceEngine's step lifecycle: creation and the cross-rank checks,
// plan epochs, BeginStep / RunBucket / EndStep with the per-step agreement,
// and the bucket layouts. The modes' work lives beside it:
// quantized_allreduce_plain.cc (fp32, bf16), quantized_allreduce_fp8.cc
// (fp8 with GIFT layers, probes), quantized_allreduce_audit.cc (audit
// steps) and quantized_allreduce_state.cc (ExportState / ImportState).
#include "client/allreduce_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/agreement.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// Fingerprint of the options every rank must share.
uint64_t OptionsFingerprint(const AllReduceEngineOptions& o) {
  // -0.0 and 0.0 are the same setting (no cap): one fingerprint.
  const float cap = o.owner_release_cap == 0.0f ? 0.0f : o.owner_release_cap;
  uint32_t cap_bits;
  std::memcpy(&cap_bits, &cap, sizeof(cap_bits));
  const int64_t v[6] = {static_cast<int64_t>(o.mode),
                        o.piece_bytes,
                        o.error_feedback ? 1 : 0,
                        o.audit_drift ? 1 : 0,
                        static_cast<int64_t>(o.euclid_error_feedback),
                        cap_bits};
  return Fnv1a64(v, sizeof(v));
}

absl::Status CheckOptionsAcrossRanks(Transport& comm,
                                     const AllReduceEngineOptions& o) {
  const uint64_t f = OptionsFingerprint(o);
  const int64_t hi = static_cast<int64_t>(f >> 32), lo = f & 0xFFFFFFFFu;
  int64_t v[4] = {hi, lo, -hi, -lo};
  RETURN_IF_ERROR(comm.AllReduce(v, v, 4, DataType::kInt64, ReduceOp::kMin));
  if (v[0] == -v[2] && v[1] == -v[3]) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "quantized allreduce options differ across ranks (this rank: mode ",
      AllReduceModeName(o.mode), ", piece_bytes ", o.piece_bytes,
      ", error_feedback ", o.error_feedback, ", audit_drift ", o.audit_drift,
      ", euclid_error_feedback ", EuclidFeedbackName(o.euclid_error_feedback),
      ", owner_release_cap ", o.owner_release_cap, ")"));
}

}  // namespace

absl::string_view AllReduceModeName(AllReduceMode mode) {
  switch (mode) {
    case AllReduceMode::kFp8:
      return "fp8";
    case AllReduceMode::kFp32:
      return "fp32";
    case AllReduceMode::kBf16:
      return "bf16";
    case AllReduceMode::kNcclFp8:
      return "nccl-fp8";
  }
  return "?";
}

absl::StatusOr<AllReduceMode> ParseAllReduceMode(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (AllReduceMode m : {AllReduceMode::kFp8, AllReduceMode::kFp32,
                          AllReduceMode::kBf16, AllReduceMode::kNcclFp8}) {
    if (n == AllReduceModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown allreduce mode '", name, "' (fp8, fp32, bf16, nccl-fp8)"));
}

absl::string_view EuclidFeedbackName(EuclidFeedback f) {
  switch (f) {
    case EuclidFeedback::kAuto:
      return "auto";
    case EuclidFeedback::kOff:
      return "off";
    case EuclidFeedback::kOn:
      return "on";
  }
  return "?";
}

absl::StatusOr<EuclidFeedback> ParseEuclidFeedback(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (EuclidFeedback f :
       {EuclidFeedback::kAuto, EuclidFeedback::kOff, EuclidFeedback::kOn}) {
    if (n == EuclidFeedbackName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown Euclidean error feedback '", name, "' (auto, off, on)"));
}

AllReduceEngine::AllReduceEngine(Transport* comm, EpochPlan plan,
                                 const AllReduceEngineOptions& options,
                                 std::unique_ptr<Fp8Backend> backend,
                                 std::unique_ptr<NcclFp8AllReduce> nccl_fp8)
    : comm_(comm),
      options_(options),
      current_epoch_(plan.epoch()),
      backend_(std::move(backend)),
      nccl_fp8_(std::move(nccl_fp8)),
      probe_interval_(options.probe_interval),
      audit_interval_(options.audit_interval) {
  plans_.emplace(plan.epoch(), std::move(plan));
  round_ = std::make_unique<Fp8Round>(
      comm_, &backend_->memory(), &backend_->codec(), &backend_->math(),
      &backend_->transforms(), options.owner_release_cap);
  bf16_ = backend_->memory().NewBuffer();
  audit_ = backend_->memory().NewBuffer();
}

absl::StatusOr<std::unique_ptr<AllReduceEngine>> AllReduceEngine::Create(
    Transport* comm, EpochPlan plan, const AllReduceEngineOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("AllReduceEngine: null communicator");
  }
  if (options.piece_bytes < 4 || options.probe_interval < 0 ||
      options.audit_interval < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceEngine: piece_bytes must be >= 4 (is ", options.piece_bytes,
        "), probe_interval >= 0 (is ", options.probe_interval,
        ") and audit_interval >= 0 (is ", options.audit_interval, ")"));
  }
  if (static_cast<int>(options.euclid_error_feedback) > 2) {
    return absl::InvalidArgumentError(
        "AllReduceEngine: unknown euclid_error_feedback value");
  }
  if (!(options.owner_release_cap >= 0) ||
      !std::isfinite(options.owner_release_cap)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduceEngine: owner_release_cap must be finite and "
                     ">= 0 (0 = no cap), is ",
                     options.owner_release_cap));
  }
  if (options.mode == AllReduceMode::kNcclFp8 &&
      comm->backend_name() != "nccl") {
    return absl::FailedPreconditionError(
        "nccl-fp8 needs the NCCL backend on sm_90");
  }
  // Local checks and set-up first, so that a rank fails before the
  // collectives rather than inside them.
  // The backend also carries the control messages (host memory) in every
  // mode.
  ASSIGN_OR_RETURN(std::unique_ptr<Fp8Backend> backend, CreateFp8Backend(comm));
  std::unique_ptr<NcclFp8AllReduce> nccl_fp8;
  if (options.mode == AllReduceMode::kNcclFp8) {
    ASSIGN_OR_RETURN(nccl_fp8, CreateNcclFp8AllReduce(comm));
  }
  RETURN_IF_ERROR(CheckPlanAcrossRanks(*backend->control(), plan));
  RETURN_IF_ERROR(CheckOptionsAcrossRanks(*backend->control(), options));
  if (nccl_fp8 != nullptr) RETURN_IF_ERROR(nccl_fp8->Connect());
  return std::unique_ptr<AllReduceEngine>(new AllReduceEngine(
      comm, std::move(plan), options, std::move(backend), std::move(nccl_fp8)));
}

absl::Status AllReduceEngine::AddPlan(EpochPlan plan) {
  const EpochPlan& newest = plans_.rbegin()->second;
  if (plan.epoch() <= newest.epoch() || !plan.SameLayout(newest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AddPlan: epoch ", plan.epoch(), " must exceed ", newest.epoch(),
        " and the layout (bucket size, layer names, shapes, offsets) must "
        "stay the same"));
  }
  plans_.emplace(plan.epoch(), std::move(plan));
  KeepNewestPlans(plans_, 2, current_epoch_);
  return absl::OkStatus();
}

BucketGroup BucketGroup::WholePlan(const EpochPlan& plan) {
  BucketGroup g;
  g.elements = plan.bucket_elements();
  for (size_t i = 0; i < plan.layers().size(); ++i) {
    g.layers.push_back(static_cast<int>(i));
    g.offsets.push_back(plan.layers()[i].offset);
  }
  return g;
}

uint64_t BucketGroup::Key() const {
  uint64_t h = Fnv1a64(&elements, sizeof(elements));
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t v[2] = {layers[i], i < offsets.size() ? offsets[i] : -1};
    h = Fnv1a64(v, sizeof(v), h);
  }
  return h;
}

absl::Status AllReduceEngine::Run(float* bucket,
                                  const VersionedFactors& factors,
                                  StepTelemetry* telemetry) {
  const EpochPlan& plan = plans_.rbegin()->second;
  if (bucket == nullptr && plan.bucket_elements() > 0) {
    // Local misuse: the other ranks will time out in the next collective.
    return absl::InvalidArgumentError("AllReduceEngine::Run: null bucket");
  }
  const BucketGroup whole = BucketGroup::WholePlan(plan);
  if (BeginStep(factors).ok()) (void)RunBucket(whole, bucket);
  return EndStep(telemetry);
}

absl::Status AllReduceEngine::BeginStep(const VersionedFactors& factors) {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError(
        "AllReduceEngine::BeginStep: the previous step has not ended");
  }
  step_ctx_ = StepContext();
  step_ctx_.open = true;
  step_ctx_.factors = &factors;
  step_ctx_.t.step = step_;
  step_ctx_.bytes_before = comm_->bytes_sent().Total();
  step_ctx_.error = Begin(factors);
  return step_ctx_.error;
}

absl::Status AllReduceEngine::Begin(const VersionedFactors& factors) {
  StepTelemetry& t = step_ctx_.t;
  const bool fp8 = nccl_fp8_ == nullptr && options_.mode == AllReduceMode::kFp8;
  if (nccl_fp8_ == nullptr) RETURN_IF_ERROR(backend_->BeginStep());
  const EpochPlan* plan = &plans_.at(current_epoch_);
  if (fp8) {
    // The drift sums are kept while this rank audits; dropped otherwise.
    step_ctx_.drift = options_.audit_drift && audit_interval_ > 0;
    if (!step_ctx_.drift && !drift_.empty()) {
      drift_.clear();
      drift_steps_ = 0;
    }
    ASSIGN_OR_RETURN(plan, AgreeOnStep(factors, &step_ctx_.versions));
    t.probe_step = probe_interval_ > 0 && step_ % probe_interval_ == 0;
  } else {
    step_ctx_.versions.assign(plan->layers().size(), kNoVersion);
  }
  step_ctx_.plan = plan;
  step_ctx_.done.assign(plan->layers().size(), false);
  t.plan_epoch = plan->epoch();
  t.layers.resize(plan->layers().size());
  for (size_t i = 0; i < plan->layers().size(); ++i) {
    t.layers[i].name = plan->layers()[i].name;
    if (!fp8) t.layers[i].local.n = plan->layers()[i].size();
  }
  whitened_.resize(plan->layers().size());
  return absl::OkStatus();
}

absl::StatusOr<const AllReduceEngine::Group*> AllReduceEngine::GroupFor(
    const BucketGroup& g) {
  const uint64_t key = g.Key();
  if (auto it = groups_.find(key); it != groups_.end()) return &it->second;
  const EpochPlan& plan = *step_ctx_.plan;
  if (g.layers.size() != g.offsets.size()) {
    return absl::InvalidArgumentError(
        "RunBucket: one offset per layer is required");
  }
  std::vector<int> index;
  std::vector<BucketLayer> specs;
  for (size_t j = 0; j < g.layers.size(); ++j) {
    const int i = g.layers[j];
    if (i < 0 || i >= static_cast<int>(plan.layers().size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("RunBucket: no layer ", i, " in the plan"));
    }
    specs.push_back(plan.layers()[i]);
    specs.back().offset = g.offsets[j];
    index.push_back(i);
  }
  absl::StatusOr<EpochPlan> sub =
      EpochPlan::Create(plan.epoch(), g.elements, std::move(specs));
  if (!sub.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunBucket: bad bucket layout: ", sub.status().message()));
  }
  // The plan itself as one bucket was checked when it was created.
  if (sub->Fingerprint() != plan.Fingerprint()) {
    RETURN_IF_ERROR(CheckPlanAcrossRanks(*backend_->control(), *sub));
  }
  return &groups_.emplace(key, Group{std::move(index), *std::move(sub)})
              .first->second;
}

absl::Status AllReduceEngine::RunBucket(const BucketGroup& g, float* data) {
  StepContext& c = step_ctx_;
  if (!c.open) {
    return absl::FailedPreconditionError(
        "AllReduceEngine::RunBucket outside BeginStep/EndStep");
  }
  if (!c.error.ok()) return c.error;  // the step already failed
  auto run = [&]() -> absl::Status {
    if (data == nullptr && g.elements > 0) {
      return absl::InvalidArgumentError("RunBucket: null bucket");
    }
    for (int i : g.layers) {
      if (i >= 0 && i < static_cast<int>(c.done.size()) && c.done[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("RunBucket: layer '", c.plan->layers()[i].name,
                         "' was already reduced in this step"));
      }
    }
    ASSIGN_OR_RETURN(const Group* group, GroupFor(g));
    for (int i : group->index) c.done[i] = true;
    const uint64_t key = g.Key();
    c.groups.push_back(key);
    // The bucket's telemetry, merged into the step's by layer.
    StepTelemetry bt;
    bt.layers.resize(group->index.size());
    for (size_t j = 0; j < group->index.size(); ++j) {
      bt.layers[j] = c.t.layers[group->index[j]];
    }
    if (nccl_fp8_ != nullptr) {
      RETURN_IF_ERROR(nccl_fp8_->Run(data, group->plan, &bt));
    } else if (options_.mode != AllReduceMode::kFp8) {
      const uint64_t before = comm_->bytes_sent().Total();
      RETURN_IF_ERROR(RunPlain(data, group->plan, &bt));
      bt.bytes_euclid = comm_->bytes_sent().Total() - before;
    } else {
      RETURN_IF_ERROR(RunFp8(data, *group, g, &bt));
    }
    for (size_t j = 0; j < group->index.size(); ++j) {
      c.t.layers[group->index[j]] = std::move(bt.layers[j]);
    }
    c.t.bytes_euclid += bt.bytes_euclid;
    c.t.bytes_gift += bt.bytes_gift;
    c.t.nonfinite_layers += bt.nonfinite_layers;
    c.t.transform_seconds += bt.transform_seconds;
    c.t.audit_seconds += bt.audit_seconds;
    c.t.bytes_audit += bt.bytes_audit;
    return absl::OkStatus();
  };
  c.error = run();
  return c.error;
}

absl::Status AllReduceEngine::EndStep(StepTelemetry* telemetry) {
  StepContext& c = step_ctx_;
  if (!c.open) {
    return absl::FailedPreconditionError(
        "AllReduceEngine::EndStep without BeginStep");
  }
  absl::Status s = c.error;
  if (s.ok()) {
    int64_t missing = 0;
    for (bool d : c.done) missing += !d;
    if (missing > 0) {
      s = absl::FailedPreconditionError(
          absl::StrCat("AllReduceEngine: ", missing, " of ", c.done.size(),
                       " layers were in no bucket of the step"));
    }
  }
  // Even after an error: the backend's queue must drain before the next.
  if (nccl_fp8_ == nullptr) {
    const absl::Status e = backend_->EndStep();
    if (s.ok()) s = e;
  }
  if (s.ok()) {
    // Bucket layouts no step uses any more (DDP rebuilt its buckets after
    // the first step): their owner residuals go to the worker residuals.
    for (auto it = owner_residual_.begin(); it != owner_residual_.end();) {
      if (std::find(c.groups.begin(), c.groups.end(), it->first) !=
          c.groups.end()) {
        ++it;
        continue;
      }
      if (s.ok()) s = FoldOwnerResidual(it->second);
      it = owner_residual_.erase(it);
    }
    if (nccl_fp8_ == nullptr) {
      c.t.bytes_control = comm_->bytes_sent().Total() - c.bytes_before -
                          c.t.bytes_euclid - c.t.bytes_gift - c.t.bytes_audit;
    }
  }
  if (c.drift) {
    // After an error the sums may be partial: restart them (the agreement
    // keeps the drift of ranks whose windows differ unreported).
    if (!s.ok()) drift_.clear();
    drift_steps_ = !s.ok() || c.t.audit_step ? 0 : drift_steps_ + 1;
  }
  ++step_;
  if (telemetry != nullptr) *telemetry = std::move(c.t);
  step_ctx_ = StepContext();
  return s;
}
absl::StatusOr<const EpochPlan*> AllReduceEngine::AgreeOnStep(
    const VersionedFactors& factors, std::vector<int64_t>* versions) {
  // Slot 0: plan epochs; then one slot per layer (the layout is shared by
  // every held epoch): versions whose factor fits the layer.
  const EpochPlan& any = plans_.rbegin()->second;
  std::vector<std::vector<int64_t>> held(1 + any.layers().size());
  for (const auto& [epoch, plan] : plans_) held[0].push_back(epoch);
  for (size_t i = 0; i < any.layers().size(); ++i) {
    const BucketLayer& l = any.layers()[i];
    if (l.shape.size() != 2) continue;
    // Only versions the daemon accepted for the GIFT path (probation).
    for (int64_t v : factors.Usable(l.name)) {
      if (factors.Find(l.name, v)->Validate(l.d_in()).ok()) {
        held[1 + i].push_back(v);
      }
    }
  }
  // Two more slots: "audit this step" (1 on a rank whose interval makes it
  // an audit step; the job audits only when every rank says so) and the
  // steps its drift sums cover (kNoVersion unless they are equal everywhere).
  const size_t audit_slot = held.size(), drift_slot = held.size() + 1;
  held.resize(held.size() + 2);
  if (audit_interval_ > 0 && step_ > 0 && step_ % audit_interval_ == 0) {
    held[audit_slot].push_back(1);
  }
  if (step_ctx_.drift) held[drift_slot].push_back(drift_steps_);
  ASSIGN_OR_RETURN(std::vector<int64_t> agreed,
                   AgreeOnVersions(*backend_->control(), held));
  step_ctx_.t.audit_step = agreed[audit_slot] == 1;
  step_ctx_.drift_agreed = agreed[drift_slot] != kNoVersion;
  // Not every rank holds the slowest rank's newest epoch (they added
  // different ones): stay on the epoch in use, which every rank holds.
  int64_t epoch = agreed[0] == kNoVersion ? current_epoch_ : agreed[0];
  if (epoch != current_epoch_) {
    // Every rank switches in this same step, so all of them check. Plans
    // that differ under one epoch number come from two giftd instances: one
    // restarted while a rank still held an epoch of the old one that the job
    // never used, and gave the same number to another plan. Every rank sees
    // the mismatch in this same collective, drops that epoch and stays on
    // the one in use; the daemon's next epoch brings the ranks together.
    absl::Status same =
        CheckPlanAcrossRanks(*backend_->control(), plans_.at(epoch));
    if (absl::IsFailedPrecondition(same)) {
      step_ctx_.t.dropped_epoch = epoch;
      plans_.erase(epoch);
      epoch = current_epoch_;
    } else if (!same.ok()) {
      return same;
    } else {
      // Every held plan has the same layout (AddPlan), so every owner holds
      // the same elements of each bucket in the new epoch (chunks depend on
      // the layer sizes only): the owner residuals stay, each layer's in the
      // coordinates its state records; its next step carries or resets them
      // as within an epoch. Clearing them here dropped one step's
      // owner-side error of every layer at each plan change.
      groups_.clear();
      current_epoch_ = epoch;
    }
  }
  const EpochPlan& plan = plans_.at(epoch);
  versions->assign(plan.layers().size(), kNoVersion);
  for (size_t i = 0; i < plan.layers().size(); ++i) {
    if (plan.layers()[i].path == LayerPath::kGift) {
      (*versions)[i] = agreed[1 + i];
    }
  }
  return &plan;
}

}  // namespace gift::client
