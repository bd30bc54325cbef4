#include "client/quantized_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/agreement.h"
#include "client/chunking.h"
#include "client/probe.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// Fingerprint of the options every rank must share.
uint64_t OptionsFingerprint(const QuantizedAllReduceOptions& o) {
  const int64_t v[4] = {static_cast<int64_t>(o.mode), o.piece_bytes,
                        o.error_feedback ? 1 : 0, o.audit_drift ? 1 : 0};
  return Fnv1a64(v, sizeof(v));
}

absl::Status CheckOptionsAcrossRanks(Communicator& comm,
                                     const QuantizedAllReduceOptions& o) {
  const uint64_t f = OptionsFingerprint(o);
  const int64_t hi = static_cast<int64_t>(f >> 32), lo = f & 0xFFFFFFFFu;
  int64_t v[4] = {hi, lo, -hi, -lo};
  RETURN_IF_ERROR(comm.AllReduce(v, v, 4, DataType::kInt64, ReduceOp::kMin));
  if (v[0] == -v[2] && v[1] == -v[3]) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "quantized allreduce options differ across ranks (this rank: mode ",
      AllReduceModeName(o.mode), ", piece_bytes ", o.piece_bytes,
      ", error_feedback ", o.error_feedback, ", audit_drift ", o.audit_drift,
      ")"));
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

QuantizedAllReduce::QuantizedAllReduce(
    Communicator* comm, BucketPlan plan,
    const QuantizedAllReduceOptions& options,
    std::unique_ptr<Fp8Backend> backend,
    std::unique_ptr<NcclFp8AllReduce> nccl_fp8)
    : comm_(comm),
      options_(options),
      current_epoch_(plan.epoch()),
      backend_(std::move(backend)),
      nccl_fp8_(std::move(nccl_fp8)),
      audit_interval_(options.audit_interval) {
  plans_.emplace(plan.epoch(), std::move(plan));
  round_ = std::make_unique<Fp8Round>(comm_, backend_.get());
  bf16_ = backend_->NewBuffer();
  audit_ = backend_->NewBuffer();
}

absl::StatusOr<std::unique_ptr<QuantizedAllReduce>> QuantizedAllReduce::Create(
    Communicator* comm, BucketPlan plan,
    const QuantizedAllReduceOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("QuantizedAllReduce: null communicator");
  }
  if (options.piece_bytes < 4 || options.probe_interval < 0 ||
      options.audit_interval < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("QuantizedAllReduce: piece_bytes must be >= 4 (is ",
                     options.piece_bytes, "), probe_interval >= 0 (is ",
                     options.probe_interval, ") and audit_interval >= 0 (is ",
                     options.audit_interval, ")"));
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
  return std::unique_ptr<QuantizedAllReduce>(new QuantizedAllReduce(
      comm, std::move(plan), options, std::move(backend), std::move(nccl_fp8)));
}

absl::Status QuantizedAllReduce::AddPlan(BucketPlan plan) {
  const BucketPlan& newest = plans_.rbegin()->second;
  if (plan.epoch() <= newest.epoch() || !plan.SameLayout(newest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AddPlan: epoch ", plan.epoch(), " must exceed ", newest.epoch(),
        " and the layout (bucket size, layer names, shapes, offsets) must "
        "stay the same"));
  }
  plans_.emplace(plan.epoch(), std::move(plan));
  for (auto it = plans_.begin(); plans_.size() > 2;) {
    it = it->first == current_epoch_ ? std::next(it) : plans_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::set_audit_interval(int steps) {
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("audit interval must be >= 0 (is ", steps, ")"));
  }
  audit_interval_ = steps;
  return absl::OkStatus();
}

BucketGroup BucketGroup::WholePlan(const BucketPlan& plan) {
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

absl::Status QuantizedAllReduce::Run(float* bucket,
                                     const VersionedFactors& factors,
                                     StepTelemetry* telemetry) {
  const BucketPlan& plan = plans_.rbegin()->second;
  if (bucket == nullptr && plan.bucket_elements() > 0) {
    // Local misuse: the other ranks will time out in the next collective.
    return absl::InvalidArgumentError("QuantizedAllReduce::Run: null bucket");
  }
  const BucketGroup whole = BucketGroup::WholePlan(plan);
  if (BeginStep(factors).ok()) (void)RunBucket(whole, bucket);
  return EndStep(telemetry);
}

absl::Status QuantizedAllReduce::BeginStep(const VersionedFactors& factors) {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError(
        "QuantizedAllReduce::BeginStep: the previous step has not ended");
  }
  step_ctx_ = StepContext();
  step_ctx_.open = true;
  step_ctx_.factors = &factors;
  step_ctx_.t.step = step_;
  step_ctx_.bytes_before = comm_->bytes_sent().Total();
  step_ctx_.error = Begin(factors);
  return step_ctx_.error;
}

absl::Status QuantizedAllReduce::Begin(const VersionedFactors& factors) {
  StepTelemetry& t = step_ctx_.t;
  const bool fp8 = nccl_fp8_ == nullptr && options_.mode == AllReduceMode::kFp8;
  if (nccl_fp8_ == nullptr) RETURN_IF_ERROR(backend_->BeginStep());
  const BucketPlan* plan = &plans_.at(current_epoch_);
  if (fp8) {
    // The drift sums are kept while this rank audits; dropped otherwise.
    step_ctx_.drift = options_.audit_drift && audit_interval_ > 0;
    if (!step_ctx_.drift && !drift_.empty()) {
      drift_.clear();
      drift_steps_ = 0;
    }
    ASSIGN_OR_RETURN(plan, AgreeOnStep(factors, &step_ctx_.versions));
    t.probe_step =
        options_.probe_interval > 0 && step_ % options_.probe_interval == 0;
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

absl::StatusOr<const QuantizedAllReduce::Group*> QuantizedAllReduce::GroupFor(
    const BucketGroup& g) {
  const uint64_t key = g.Key();
  if (auto it = groups_.find(key); it != groups_.end()) return &it->second;
  const BucketPlan& plan = *step_ctx_.plan;
  if (g.layers.size() != g.offsets.size()) {
    return absl::InvalidArgumentError(
        "RunBucket: one offset per layer is required");
  }
  std::vector<int> index;
  std::vector<LayerSpec> specs;
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
  absl::StatusOr<BucketPlan> sub =
      BucketPlan::Create(plan.epoch(), g.elements, std::move(specs));
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

absl::Status QuantizedAllReduce::RunBucket(const BucketGroup& g, float* data) {
  StepContext& c = step_ctx_;
  if (!c.open) {
    return absl::FailedPreconditionError(
        "QuantizedAllReduce::RunBucket outside BeginStep/EndStep");
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

absl::Status QuantizedAllReduce::EndStep(StepTelemetry* telemetry) {
  StepContext& c = step_ctx_;
  if (!c.open) {
    return absl::FailedPreconditionError(
        "QuantizedAllReduce::EndStep without BeginStep");
  }
  absl::Status s = c.error;
  if (s.ok()) {
    int64_t missing = 0;
    for (bool d : c.done) missing += !d;
    if (missing > 0) {
      s = absl::FailedPreconditionError(
          absl::StrCat("QuantizedAllReduce: ", missing, " of ", c.done.size(),
                       " layers were in no bucket of the step"));
    }
  }
  // Even after an error: the backend's queue must drain before the next.
  if (nccl_fp8_ == nullptr) {
    const absl::Status e = backend_->EndStep();
    if (s.ok()) s = e;
  }
  if (s.ok()) {
    // Bucket layouts no step uses any more (DDP rebuilt its buckets).
    std::erase_if(owner_residual_, [&](const auto& e) {
      return std::find(c.groups.begin(), c.groups.end(), e.first) ==
             c.groups.end();
    });
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

absl::Status QuantizedAllReduce::RunPlain(float* bucket, const BucketPlan& plan,
                                          StepTelemetry* t) {
  const float w = static_cast<float>(comm_->world_size());
  const std::vector<LayerSpec>& layers = plan.layers();
  for (size_t i = 0; i < layers.size();) {
    // A maximal run of adjacent layers is one call.
    const int64_t begin = layers[i].offset;
    int64_t end = begin + layers[i].size();
    for (++i; i < layers.size() && layers[i].offset == end; ++i) {
      end += layers[i].size();
    }
    const int64_t n = end - begin;
    if (n == 0) continue;
    float* x = bucket + begin;
    if (options_.mode == AllReduceMode::kFp32) {
      RETURN_IF_ERROR(
          comm_->AllReduce(x, x, n, DataType::kFloat32, ReduceOp::kSum));
    } else {
      if (bf16_->bytes() < n * sizeof(uint16_t)) {
        RETURN_IF_ERROR(bf16_->Resize(n * sizeof(uint16_t)));
      }
      auto* bf = static_cast<uint16_t*>(bf16_->data());
      RETURN_IF_ERROR(backend_->ToBf16(x, n, bf));
      RETURN_IF_ERROR(
          comm_->AllReduce(bf, bf, n, DataType::kBFloat16, ReduceOp::kSum));
      RETURN_IF_ERROR(backend_->FromBf16(bf, n, x));
    }
    RETURN_IF_ERROR(backend_->Divide(x, n, w));
  }
  // Non-finite results, for the telemetry.
  RETURN_IF_ERROR(backend_->BeginRound(0, layers.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    RETURN_IF_ERROR(backend_->FlagNonFinite(bucket + layers[i].offset,
                                            layers[i].size(), i));
  }
  std::vector<kernels::QuantizeStats> unused;
  std::vector<uint8_t> flags;
  RETURN_IF_ERROR(backend_->EndRound(&unused, &flags));
  for (size_t i = 0; i < layers.size(); ++i) {
    t->layers[i].nonfinite_result = flags[i] != 0;
    t->nonfinite_layers += t->layers[i].nonfinite_result;
  }
  return absl::OkStatus();
}

absl::StatusOr<const BucketPlan*> QuantizedAllReduce::AgreeOnStep(
    const VersionedFactors& factors, std::vector<int64_t>* versions) {
  // Slot 0: plan epochs; then one slot per layer (the layout is shared by
  // every held epoch): versions whose factor fits the layer.
  const BucketPlan& any = plans_.rbegin()->second;
  std::vector<std::vector<int64_t>> held(1 + any.layers().size());
  for (const auto& [epoch, plan] : plans_) held[0].push_back(epoch);
  for (size_t i = 0; i < any.layers().size(); ++i) {
    const LayerSpec& l = any.layers()[i];
    if (l.shape.size() != 2) continue;
    for (int64_t v : factors.Held(l.name)) {
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
  const BucketPlan& plan =
      plans_.at(agreed[0] == kNoVersion ? current_epoch_ : agreed[0]);
  if (plan.epoch() != current_epoch_) {
    // Every rank switches in this same step, so all of them check.
    RETURN_IF_ERROR(CheckPlanAcrossRanks(*backend_->control(), plan));
    owner_residual_.clear();
    groups_.clear();
    for (auto& [name, state] : gift_) state.owner_version = kNoVersion;
    current_epoch_ = plan.epoch();
  }
  versions->assign(plan.layers().size(), kNoVersion);
  for (size_t i = 0; i < plan.layers().size(); ++i) {
    if (plan.layers()[i].path == LayerPath::kGift) {
      (*versions)[i] = agreed[1 + i];
    }
  }
  return &plan;
}

// A layer the plan took off the GIFT path that still holds a worker
// residual: un-whiten it into the gradient and
// drop it, so the error it carries is sent now, in this step, instead of
// re-entering whenever the layer comes back (possibly many steps and
// factors later). Every rank does the same in the same step.
absl::Status QuantizedAllReduce::FlushResidual(int i, const LayerSpec& l,
                                               float* grad, GiftState& st) {
  if (st.residual == nullptr || st.factor == nullptr ||
      st.residual->data() == nullptr) {
    return absl::OkStatus();
  }
  if (whitened_[i] == nullptr) whitened_[i] = backend_->NewBuffer();
  RETURN_IF_ERROR(whitened_[i]->Resize(l.size() * sizeof(float)));
  float* back = whitened_[i]->floats();
  RETURN_IF_ERROR(
      backend_->Inverse(*st.factor, st.residual->floats(), l.d_out(), back));
  RETURN_IF_ERROR(backend_->AddInPlace(grad, back, l.size()));
  RETURN_IF_ERROR(st.residual->Zero());
  st.factor.reset();
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::PrepareGiftLayer(int i, const LayerSpec& l,
                                                  const GiftFactor& f,
                                                  const float* grad,
                                                  LayerIo* io) {
  const size_t bytes = l.size() * sizeof(float);
  GiftState& st = gift_[l.name];
  const bool ef = options_.error_feedback;
  if (ef) {
    if (st.residual == nullptr) st.residual = backend_->NewBuffer();
    if (st.residual->bytes() != bytes || st.residual->data() == nullptr) {
      RETURN_IF_ERROR(st.residual->Resize(bytes));
      RETURN_IF_ERROR(st.residual->Zero());
      st.factor.reset();
    } else if (st.factor != nullptr && st.factor->version != f.version) {
      RETURN_IF_ERROR(
          backend_->Reproject(*st.factor, f, st.residual->floats(), l.d_out()));
    }
    if (st.factor == nullptr || st.factor->version != f.version) {
      st.factor = std::make_unique<GiftFactor>(f);
    }
  }
  if (whitened_[i] == nullptr) whitened_[i] = backend_->NewBuffer();
  RETURN_IF_ERROR(whitened_[i]->Resize(bytes));
  float* whitened = whitened_[i]->floats();
  float* residual = ef ? st.residual->floats() : nullptr;
  RETURN_IF_ERROR(backend_->Forward(f, grad, l.d_out(), residual, whitened));
  io->src = io->dst = whitened;
  io->worker_residual = residual;
  io->owner_feedback = ef;
  io->reset_owner_residual = st.owner_version != f.version;
  st.owner_version = f.version;
  io->gift = true;
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::Probe(const Group& g, const float* data,
                                       StepTelemetry* t) {
  const VersionedFactors& factors = *step_ctx_.factors;
  for (size_t j = 0; j < g.index.size(); ++j) {
    const LayerSpec& l = g.plan.layers()[j];
    const int64_t v = step_ctx_.versions[g.index[j]];
    const GiftFactor* f =
        v != kNoVersion ? factors.Find(l.name, v) : factors.Newest(l.name);
    if (l.shape.size() != 2 || l.size() == 0 || f == nullptr ||
        !f->Validate(l.d_in()).ok()) {
      continue;
    }
    ProbeResult p;
    RETURN_IF_ERROR(backend_->Probe(data + l.offset, l, *f, &p));
    LayerTelemetry& lt = t->layers[j];
    lt.probed = true;
    lt.probe_euclid_rel_l2 = p.euclid_rel_l2;
    lt.probe_gift_rel_l2 = p.gift_rel_l2;
    if (!f->beta_auto) continue;
    // β auto: the same round trip with the factor rebuilt for each grid β.
    BetaVariants& bv = beta_variants_[l.name];
    if (bv.version != f->version) {
      bv.version = kNoVersion;
      bv.f.clear();
      for (int b = 0; b < kBetaGrid; ++b) {
        ASSIGN_OR_RETURN(GiftFactor fb, f->WithBeta(kBetaGridValues[b]));
        bv.f.push_back(std::move(fb));
      }
      bv.version = f->version;
    }
    for (int b = 0; b < kBetaGrid; ++b) {
      RETURN_IF_ERROR(backend_->Probe(data + l.offset, l, bv.f[b], &p));
      lt.probe_beta_rel_l2[b] = p.gift_rel_l2;
    }
    lt.beta_probed = true;
  }
  return absl::OkStatus();
}

// One bucket of an fp8 step: `t` has one entry per layer of g.plan (the
// bucket's own layout; g.index maps them to the step's plan).
absl::Status QuantizedAllReduce::RunFp8(float* data, const Group& g,
                                        const BucketGroup& layout,
                                        StepTelemetry* t) {
  const BucketPlan* plan = &g.plan;
  const std::vector<LayerSpec>& layers = plan->layers();
  const VersionedFactors& factors = *step_ctx_.factors;
  if (step_ctx_.t.probe_step) RETURN_IF_ERROR(Probe(g, data, t));
  if (step_ctx_.drift || step_ctx_.t.audit_step) {
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(AuditBefore(g, data));
    t->audit_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  }
  std::vector<LayerIo> io(layers.size());
  std::vector<const GiftFactor*> used(layers.size(), nullptr);
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    const int i = g.index[j];
    const int64_t version = step_ctx_.versions[i];
    io[j].src = io[j].dst = data + l.offset;
    if (version == kNoVersion) {
      if (auto it = gift_.find(l.name); it != gift_.end()) {
        it->second.owner_version = kNoVersion;
        // Off the GIFT path in the plan: flush. A GIFT layer merely without
        // an agreed factor this step keeps its residual for the next one.
        if (l.path != LayerPath::kGift) {
          RETURN_IF_ERROR(FlushResidual(i, l, data + l.offset, it->second));
        }
      }
      continue;
    }
    const absl::Time start = absl::Now();
    used[j] = factors.Find(l.name, version);
    RETURN_IF_ERROR(PrepareGiftLayer(i, l, *used[j], data + l.offset, &io[j]));
    t->transform_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    t->layers[j].path = LayerPath::kGift;
    t->layers[j].factor_version = version;
  }
  const int w = comm_->world_size(), me = comm_->rank();
  const std::vector<Range> pieces =
      SplitIntoPieces(plan->communicated_elements(), options_.piece_bytes / 4);
  OwnerState* owners = nullptr;  // made when a chunk of mine needs one
  RoundOutcome outcome;
  outcome.Reset(layers.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    const PieceLayout piece =
        LayoutPiece(*plan, pieces[k].begin, pieces[k].end, w);
    bool feedback = false;
    for (const Segment& s : piece.chunks[me].segments) {
      feedback |= io[s.layer].owner_feedback;
    }
    float* owner = nullptr;
    if (feedback) {
      if (owners == nullptr) {
        owners = &owner_residual_[layout.Key()];
        owners->group = layout;
        owners->pieces.resize(pieces.size());
      }
      std::unique_ptr<Fp8Buffer>& b = owners->pieces[k];
      const size_t bytes = piece.chunks[me].packed.size() * sizeof(float);
      if (b == nullptr) b = backend_->NewBuffer();
      if (b->bytes() != bytes || b->data() == nullptr) {
        RETURN_IF_ERROR(b->Resize(bytes));
        RETURN_IF_ERROR(b->Zero());
      }
      owner = b->floats();
    }
    RETURN_IF_ERROR(round_->Run(*plan, piece, io, owner, &outcome));
  }
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    LayerTelemetry& lt = t->layers[j];
    lt.local = outcome.stats[j];
    lt.nonfinite_result = outcome.nonfinite[j];
    if (lt.nonfinite_result) {
      ++t->nonfinite_layers;
      RETURN_IF_ERROR(backend_->FillNaN(data + l.offset, l.size()));
    } else if (io[j].gift) {
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(backend_->Inverse(*used[j],
                                        whitened_[g.index[j]]->floats(),
                                        l.d_out(), data + l.offset));
      t->transform_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    }
  }
  t->bytes_euclid = outcome.bytes_euclid;
  t->bytes_gift = outcome.bytes_gift;
  if (step_ctx_.drift || step_ctx_.t.audit_step) {
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(AuditAfter(g, data, t));
    t->audit_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  }
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::AuditBefore(const Group& g,
                                             const float* data) {
  const std::vector<LayerSpec>& layers = g.plan.layers();
  const bool audit = step_ctx_.t.audit_step;
  const bool sums = audit && step_ctx_.drift_agreed;
  const int64_t m = g.plan.communicated_elements();
  if (audit) {
    const size_t bytes = (sums ? 2 : 1) * m * sizeof(float);
    if (audit_->data() == nullptr || audit_->bytes() < bytes) {
      RETURN_IF_ERROR(audit_->Resize(bytes));
    }
  }
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    const int64_t n = l.size();
    if (n == 0) continue;
    const float* x = data + l.offset;
    if (step_ctx_.drift) {
      DriftSums& d = drift_[l.name];
      for (std::unique_ptr<Fp8Buffer>* b : {&d.local, &d.applied}) {
        if (*b == nullptr) *b = backend_->NewBuffer();
        if ((*b)->data() == nullptr || (*b)->bytes() != n * sizeof(float)) {
          RETURN_IF_ERROR((*b)->Resize(n * sizeof(float)));
          RETURN_IF_ERROR((*b)->Zero());
        }
      }
      RETURN_IF_ERROR(backend_->AddInPlace(d.local->floats(), x, n));
    }
    if (!audit) continue;
    // Copies as 0 + x (the backends have no plain copy).
    float* dst = audit_->floats() + g.plan.packed_offset(j);
    RETURN_IF_ERROR(backend_->Zero(dst, n * sizeof(float)));
    RETURN_IF_ERROR(backend_->AddInPlace(dst, x, n));
    if (sums) {
      RETURN_IF_ERROR(backend_->Zero(dst + m, n * sizeof(float)));
      RETURN_IF_ERROR(
          backend_->AddInPlace(dst + m, drift_[l.name].local->floats(), n));
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::AuditAfter(const Group& g, float* data,
                                            StepTelemetry* t) {
  const std::vector<LayerSpec>& layers = g.plan.layers();
  const bool audit = step_ctx_.t.audit_step;
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    if (!step_ctx_.drift || l.size() == 0) continue;
    DriftSums& d = drift_.at(l.name);
    if (t->layers[j].nonfinite_result) {  // restart this layer's sums
      RETURN_IF_ERROR(d.local->Zero());
      RETURN_IF_ERROR(d.applied->Zero());
    } else {
      RETURN_IF_ERROR(
          backend_->AddInPlace(d.applied->floats(), data + l.offset, l.size()));
    }
  }
  if (!audit) return absl::OkStatus();
  const bool sums = step_ctx_.drift_agreed;
  const int64_t m = g.plan.communicated_elements();
  const int64_t total = (sums ? 2 : 1) * m;
  float* avg = audit_->floats();
  if (total > 0) {
    const uint64_t before = comm_->bytes_sent().Total();
    RETURN_IF_ERROR(
        comm_->AllReduce(avg, avg, total, DataType::kFloat32, ReduceOp::kSum));
    t->bytes_audit += comm_->bytes_sent().Total() - before;
    RETURN_IF_ERROR(
        backend_->Divide(avg, total, static_cast<float>(comm_->world_size())));
  }
  RETURN_IF_ERROR(backend_->BeginCompare(2 * layers.size()));
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerSpec& l = layers[j];
    if (l.size() == 0 || t->layers[j].nonfinite_result) continue;
    const int64_t p = g.plan.packed_offset(j);
    RETURN_IF_ERROR(
        backend_->Compare(avg + p, data + l.offset, l.size(), 2 * j));
    if (sums) {
      RETURN_IF_ERROR(backend_->Compare(avg + m + p,
                                        drift_.at(l.name).applied->floats(),
                                        l.size(), 2 * j + 1));
    }
  }
  std::vector<kernels::QuantizeStats> cmp;
  RETURN_IF_ERROR(backend_->EndCompare(&cmp));
  for (size_t j = 0; j < layers.size(); ++j) {
    LayerTelemetry& lt = t->layers[j];
    if (layers[j].size() == 0 || lt.nonfinite_result) continue;
    lt.audited = true;
    lt.audit_rel_l2 = cmp[2 * j].RelL2();
    lt.audit_cosine = cmp[2 * j].Cosine();
    if (sums) {
      lt.drift_audited = true;
      lt.audit_drift = cmp[2 * j + 1].RelL2();
      lt.drift_steps = drift_steps_ + 1;
    }
    // Every rank restarts its sums at the same (agreed) audit step.
    if (step_ctx_.drift) {
      DriftSums& d = drift_.at(layers[j].name);
      RETURN_IF_ERROR(d.local->Zero());
      RETURN_IF_ERROR(d.applied->Zero());
    }
  }
  return absl::OkStatus();
}

namespace {

std::vector<float> CopyOut(Fp8Buffer* b) {
  if (b == nullptr || b->data() == nullptr) return {};
  const float* f = b->floats();
  return std::vector<float>(f, f + b->bytes() / sizeof(float));
}

absl::Status CopyIn(const std::vector<float>& v, Fp8Backend* backend,
                    std::unique_ptr<Fp8Buffer>* b) {
  b->reset();
  if (v.empty()) return absl::OkStatus();
  *b = backend->NewBuffer();
  RETURN_IF_ERROR((*b)->Resize(v.size() * sizeof(float)));
  std::memcpy((*b)->data(), v.data(), v.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AllReduceState> QuantizedAllReduce::ExportState() const {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError("ExportState: a step is in progress");
  }
  if (backend_->memory_kind() != MemoryKind::kHost) {
    return absl::FailedPreconditionError(
        "ExportState: host-memory allreduces only");
  }
  AllReduceState s;
  s.step = step_;
  s.current_epoch = current_epoch_;
  for (const auto& [epoch, plan] : plans_) s.plans.push_back(plan);
  for (const auto& [name, g] : gift_) {
    AllReduceState::GiftLayer l;
    l.name = name;
    l.residual = CopyOut(g.residual.get());
    l.has_factor = g.factor != nullptr;
    if (l.has_factor) l.factor = *g.factor;
    l.owner_version = g.owner_version;
    s.gift_layers.push_back(std::move(l));
  }
  for (const auto& [key, os] : owner_residual_) {
    AllReduceState::OwnerResiduals o;
    o.layers = os.group.layers;
    o.offsets = os.group.offsets;
    o.elements = os.group.elements;
    for (const auto& b : os.pieces) o.pieces.push_back(CopyOut(b.get()));
    s.owner_residuals.push_back(std::move(o));
  }
  return s;
}

absl::Status QuantizedAllReduce::ImportState(const AllReduceState& state) {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError("ImportState: a step is in progress");
  }
  if (backend_->memory_kind() != MemoryKind::kHost) {
    return absl::FailedPreconditionError(
        "ImportState: host-memory allreduces only");
  }
  const BucketPlan& layout = plans_.rbegin()->second;
  std::map<int64_t, BucketPlan> plans;
  for (const BucketPlan& p : state.plans) {
    if (!p.SameLayout(layout)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ImportState: plan of epoch ", p.epoch(), " has another layout"));
    }
    plans.emplace(p.epoch(), p);
  }
  if (!plans.contains(state.current_epoch) || plans.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportState: the current epoch ", state.current_epoch,
                     " must be among the (at most two) plans"));
  }
  std::map<std::string, GiftState> gift;
  for (const AllReduceState::GiftLayer& l : state.gift_layers) {
    const int i = layout.FindLayer(l.name);
    if (i < 0 ||
        (!l.residual.empty() && static_cast<int64_t>(l.residual.size()) !=
                                    layout.layers()[i].size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ImportState: bad GIFT layer state '", l.name, "'"));
    }
    GiftState& g = gift[l.name];
    RETURN_IF_ERROR(CopyIn(l.residual, backend_.get(), &g.residual));
    if (l.has_factor) {
      RETURN_IF_ERROR(l.factor.Validate(layout.layers()[i].d_in()));
      g.factor = std::make_unique<GiftFactor>(l.factor);
    }
    g.owner_version = l.owner_version;
  }
  std::map<uint64_t, OwnerState> owner;
  for (const AllReduceState::OwnerResiduals& o : state.owner_residuals) {
    for (int i : o.layers) {
      if (i < 0 || i >= static_cast<int>(layout.layers().size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("ImportState: owner residuals of layer ", i));
      }
    }
    if (o.offsets.size() != o.layers.size()) {
      return absl::InvalidArgumentError(
          "ImportState: owner residuals need one offset per layer");
    }
    const BucketGroup g{o.layers, o.offsets, o.elements};
    OwnerState& os = owner[g.Key()];
    os.group = g;
    std::vector<std::unique_ptr<Fp8Buffer>>& pieces = os.pieces;
    pieces.resize(o.pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k) {
      RETURN_IF_ERROR(CopyIn(o.pieces[k], backend_.get(), &pieces[k]));
    }
  }
  plans_ = std::move(plans);
  drift_.clear();  // every rank's running sums restart at the import
  drift_steps_ = 0;
  current_epoch_ = state.current_epoch;
  step_ = state.step;
  gift_ = std::move(gift);
  owner_residual_ = std::move(owner);
  groups_.clear();  // checked again against the ranks when next used
  return absl::OkStatus();
}

}  // namespace gift::client
