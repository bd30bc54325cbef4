#include "client/quantized_allreduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/agreement.h"
#include "client/chunking.h"
#include "client/probe.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

uint16_t ToBf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool AnyNonFinite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return true;
  }
  return false;
}

// Fingerprint of the options every rank must share.
uint64_t OptionsFingerprint(const QuantizedAllReduceOptions& o) {
  const int64_t v[3] = {static_cast<int64_t>(o.mode), o.piece_bytes,
                        o.error_feedback ? 1 : 0};
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
      ", error_feedback ", o.error_feedback, ")"));
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

QuantizedAllReduce::QuantizedAllReduce(Communicator* comm, BucketPlan plan,
                                       const QuantizedAllReduceOptions& options)
    : comm_(comm),
      options_(options),
      current_epoch_(plan.epoch()),
      round_(comm) {
  plans_.emplace(plan.epoch(), std::move(plan));
}

absl::StatusOr<std::unique_ptr<QuantizedAllReduce>> QuantizedAllReduce::Create(
    Communicator* comm, BucketPlan plan,
    const QuantizedAllReduceOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("QuantizedAllReduce: null communicator");
  }
  if (options.piece_bytes < 4 || options.probe_interval < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("QuantizedAllReduce: piece_bytes must be >= 4 (is ",
                     options.piece_bytes, ") and probe_interval >= 0 (is ",
                     options.probe_interval, ")"));
  }
  if (options.mode == AllReduceMode::kNcclFp8) {
    if (comm->backend_name() != "nccl") {
      return absl::FailedPreconditionError(
          "nccl-fp8 needs the NCCL backend on sm_90");
    }
    return absl::UnimplementedError(
        "nccl-fp8 (global-scale NCCL FP8 sum) is not implemented yet");
  }
  if (comm->memory_kind() != MemoryKind::kHost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "QuantizedAllReduce works on host memory; the ", comm->backend_name(),
        " backend uses device memory (the CUDA pipeline is not built yet)"));
  }
  RETURN_IF_ERROR(CheckPlanAcrossRanks(*comm, plan));
  RETURN_IF_ERROR(CheckOptionsAcrossRanks(*comm, options));
  return std::unique_ptr<QuantizedAllReduce>(
      new QuantizedAllReduce(comm, std::move(plan), options));
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
  while (plans_.size() > 2) plans_.erase(plans_.begin());
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::Run(float* bucket,
                                     const VersionedFactors& factors,
                                     StepTelemetry* telemetry) {
  if (bucket == nullptr && plans_.rbegin()->second.bucket_elements() > 0) {
    // Local misuse: the other ranks will time out in the next collective.
    return absl::InvalidArgumentError("QuantizedAllReduce::Run: null bucket");
  }
  StepTelemetry local;
  StepTelemetry* t = telemetry != nullptr ? telemetry : &local;
  *t = StepTelemetry();
  t->step = step_;
  const uint64_t before = comm_->bytes_sent().Total();
  absl::Status s;
  if (options_.mode == AllReduceMode::kFp8) {
    s = RunFp8(bucket, factors, t);
  } else {
    const BucketPlan& plan = plans_.at(current_epoch_);
    t->plan_epoch = plan.epoch();
    for (const LayerSpec& l : plan.layers()) {
      LayerTelemetry lt;
      lt.name = l.name;
      lt.local.n = l.size();
      t->layers.push_back(std::move(lt));
    }
    s = RunPlain(bucket, plan);
    if (s.ok()) {
      for (size_t i = 0; i < plan.layers().size(); ++i) {
        const LayerSpec& l = plan.layers()[i];
        t->layers[i].nonfinite_result =
            AnyNonFinite(bucket + l.offset, l.size());
        t->nonfinite_layers += t->layers[i].nonfinite_result;
      }
      t->bytes_euclid = comm_->bytes_sent().Total() - before;
    }
  }
  ++step_;
  if (s.ok()) {
    t->bytes_control =
        comm_->bytes_sent().Total() - before - t->bytes_euclid - t->bytes_gift;
  }
  return s;
}

absl::Status QuantizedAllReduce::RunPlain(float* bucket,
                                          const BucketPlan& plan) {
  const float w = static_cast<float>(comm_->world_size());
  const std::vector<LayerSpec>& layers = plan.layers();
  std::vector<uint16_t> bf;
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
      bf.resize(n);
      for (int64_t k = 0; k < n; ++k) bf[k] = ToBf16(x[k]);
      RETURN_IF_ERROR(comm_->AllReduce(bf.data(), bf.data(), n,
                                       DataType::kBFloat16, ReduceOp::kSum));
      for (int64_t k = 0; k < n; ++k) x[k] = FromBf16(bf[k]);
    }
    for (int64_t k = 0; k < n; ++k) x[k] = x[k] / w;
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
  ASSIGN_OR_RETURN(std::vector<int64_t> agreed, AgreeOnVersions(*comm_, held));
  if (agreed[0] == kNoVersion) {
    return absl::FailedPreconditionError(
        "the agreed bucket plan epoch is not held by every rank (a rank is "
        "more than one plan epoch behind the others)");
  }
  const BucketPlan& plan = plans_.at(agreed[0]);
  if (plan.epoch() != current_epoch_) {
    // Every rank switches in this same step, so all of them check.
    RETURN_IF_ERROR(CheckPlanAcrossRanks(*comm_, plan));
    owner_residual_.clear();
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

absl::Status QuantizedAllReduce::PrepareGiftLayer(int i, const BucketPlan& plan,
                                                  const GiftFactor& f,
                                                  const float* grad,
                                                  LayerIo* io) {
  const LayerSpec& l = plan.layers()[i];
  const size_t n = l.size();
  GiftState& st = gift_[l.name];
  const bool ef = options_.error_feedback;
  if (ef) {
    if (st.residual.size() != n) {
      st.residual.assign(n, 0.0f);
      st.factor.reset();
    } else if (st.factor != nullptr && st.factor->version != f.version) {
      RETURN_IF_ERROR(
          transformer_.Reproject(*st.factor, f, st.residual.data(), l.d_out()));
    }
    if (st.factor == nullptr || st.factor->version != f.version) {
      st.factor = std::make_unique<GiftFactor>(f);
    }
  }
  whitened_[i].resize(n);
  RETURN_IF_ERROR(transformer_.Forward(f, grad, l.d_out(),
                                       ef ? st.residual.data() : nullptr,
                                       whitened_[i].data()));
  io->src = io->dst = whitened_[i].data();
  io->worker_residual = ef ? st.residual.data() : nullptr;
  io->owner_feedback = ef;
  io->reset_owner_residual = st.owner_version != f.version;
  st.owner_version = f.version;
  io->gift = true;
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::Probe(const BucketPlan& plan,
                                       const float* bucket,
                                       const VersionedFactors& factors,
                                       const std::vector<int64_t>& versions,
                                       StepTelemetry* t) {
  for (size_t i = 0; i < plan.layers().size(); ++i) {
    const LayerSpec& l = plan.layers()[i];
    const GiftFactor* f = versions[i] != kNoVersion
                              ? factors.Find(l.name, versions[i])
                              : factors.Newest(l.name);
    if (l.shape.size() != 2 || l.size() == 0 || f == nullptr ||
        !f->Validate(l.d_in()).ok()) {
      continue;
    }
    ProbeResult p;
    RETURN_IF_ERROR(ProbeLayer(bucket + l.offset, l, *f, &transformer_, &p));
    t->layers[i].probed = true;
    t->layers[i].probe_euclid_rel_l2 = p.euclid_rel_l2;
    t->layers[i].probe_gift_rel_l2 = p.gift_rel_l2;
  }
  return absl::OkStatus();
}

absl::Status QuantizedAllReduce::RunFp8(float* bucket,
                                        const VersionedFactors& factors,
                                        StepTelemetry* t) {
  std::vector<int64_t> versions;
  ASSIGN_OR_RETURN(const BucketPlan* plan, AgreeOnStep(factors, &versions));
  const std::vector<LayerSpec>& layers = plan->layers();
  t->plan_epoch = plan->epoch();
  t->probe_step =
      options_.probe_interval > 0 && step_ % options_.probe_interval == 0;
  if (t->probe_step) {
    t->layers.resize(layers.size());
    RETURN_IF_ERROR(Probe(*plan, bucket, factors, versions, t));
  }
  t->layers.resize(layers.size());
  whitened_.resize(layers.size());
  std::vector<LayerIo> io(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    t->layers[i].name = l.name;
    io[i].src = io[i].dst = bucket + l.offset;
    if (versions[i] == kNoVersion) {
      if (auto it = gift_.find(l.name); it != gift_.end()) {
        it->second.owner_version = kNoVersion;
      }
      continue;
    }
    RETURN_IF_ERROR(PrepareGiftLayer(i, *plan,
                                     *factors.Find(l.name, versions[i]),
                                     bucket + l.offset, &io[i]));
    t->layers[i].path = LayerPath::kGift;
    t->layers[i].factor_version = versions[i];
  }
  const int w = comm_->world_size(), me = comm_->rank();
  const std::vector<Range> pieces =
      SplitIntoPieces(plan->communicated_elements(), options_.piece_bytes / 4);
  owner_residual_.resize(pieces.size());
  RoundOutcome outcome;
  outcome.Reset(layers.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    const PieceLayout piece =
        LayoutPiece(*plan, pieces[k].begin, pieces[k].end, w);
    std::vector<float>& owner = owner_residual_[k];
    bool feedback = false;
    for (const Segment& s : piece.chunks[me].segments) {
      feedback |= io[s.layer].owner_feedback;
    }
    if (feedback && owner.size() != size_t(piece.chunks[me].packed.size())) {
      owner.assign(piece.chunks[me].packed.size(), 0.0f);
    }
    RETURN_IF_ERROR(round_.Run(*plan, piece, io,
                               feedback ? owner.data() : nullptr, &outcome));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    LayerTelemetry& lt = t->layers[i];
    lt.local = outcome.stats[i];
    lt.nonfinite_result = outcome.nonfinite[i];
    if (lt.nonfinite_result) {
      ++t->nonfinite_layers;
      std::fill(bucket + l.offset, bucket + l.offset + l.size(),
                std::numeric_limits<float>::quiet_NaN());
    } else if (io[i].gift) {
      RETURN_IF_ERROR(transformer_.Inverse(*factors.Find(l.name, versions[i]),
                                           whitened_[i].data(), l.d_out(),
                                           bucket + l.offset));
    }
  }
  t->bytes_euclid = outcome.bytes_euclid;
  t->bytes_gift = outcome.bytes_gift;
  return absl::OkStatus();
}

}  // namespace gift::client
