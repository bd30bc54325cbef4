#include "client/python/native_rank.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/chunking.h"
#include "client/transport_setup.h"
#include "common/status_macros.h"
#include "kernels/wire_format.h"

namespace gift::client::python {
namespace {

// The options checked; returns options.format parsed (nullopt when unset),
// the one parse of it.
absl::StatusOr<std::optional<kernels::WireFormat>> CheckOptions(
    const NativeRankOptions& o) {
  if (o.mode != "fp32" && o.mode != "bf16" && o.mode != "euclid" &&
      o.mode != "gift") {
    return absl::InvalidArgumentError(absl::StrCat(
        "gift: unknown mode '", o.mode, "' (fp32, bf16, euclid, gift)"));
  }
  if ((o.mode == "gift" || o.daemon_store) && o.job_id.empty()) {
    return absl::InvalidArgumentError("gift: job_id must be set");
  }
  if (!o.daemon_store && o.store == nullptr && o.store_dir.empty()) {
    return absl::InvalidArgumentError(
        "gift: a store (the job's c10d store), the daemon store or store_dir "
        "must be set");
  }
  if (o.timeout_seconds <= 0 || o.probe_interval < 0 || o.audit_interval < 0) {
    return absl::InvalidArgumentError(
        "gift: timeout_seconds must be > 0, probe_interval and "
        "audit_interval >= 0");
  }
  std::optional<kernels::WireFormat> format;
  if (!o.format.empty()) {
    absl::StatusOr<kernels::WireFormat> f = kernels::ParseWireFormat(o.format);
    if (!f.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gift: ", f.status().message()));
    }
    format = *f;
  }
  absl::StatusOr<EuclidFeedback> feedback =
      ParseEuclidFeedback(o.error_feedback);
  if (!feedback.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gift: ", feedback.status().message()));
  }
  const bool quantized = o.mode == "euclid" || o.mode == "gift";
  if (!quantized && (!o.format.empty() || *feedback != EuclidFeedback::kAuto)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gift: format and error_feedback are for modes euclid and gift, not ",
        o.mode));
  }
  return format;
}

// Every layer in `format` where its shape can take it; the names of the
// others (they keep E4M3) in *fallbacks. REQUIRES: format valid.
void ApplyFormat(kernels::WireFormat format, std::vector<BucketLayer>* layers,
                 std::vector<std::string>* fallbacks) {
  for (BucketLayer& l : *layers) {
    const bool two_d = l.shape.size() == 2;
    if (kernels::CheckFormatFitsShape(format, l.d_out(), l.d_in(), two_d)
            .ok()) {
      l.format = format;
    } else {
      l.format = kernels::Fp8Format::kE4M3;
      fallbacks->push_back(l.name);
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NativeRank>> NativeRank::Create(
    const NativeRankOptions& options, std::vector<BucketLayer> layers,
    int64_t total_elements) {
  ASSIGN_OR_RETURN(const std::optional<kernels::WireFormat> format,
                   CheckOptions(options));
  std::vector<std::string> fallbacks;
  if (options.mode == "euclid" || options.mode == "gift") {
    ApplyFormat(format.value_or(kernels::Fp8Format::kE4M3), &layers,
                &fallbacks);
  }
  ASSIGN_OR_RETURN(
      EpochPlan base,
      EpochPlan::Create(/*epoch=*/0, total_elements, std::move(layers)));
  std::unique_ptr<NativeRank> s(
      new NativeRank(options, format, std::move(base), std::move(fallbacks)));
  RETURN_IF_ERROR(s->Connect());
  return s;
}

NativeRank::~NativeRank() {
  // The attachment references the allreduce only inside calls; the
  // allreduce references the communicator: tear down in reverse.
  attachment_.reset();
  allreduce_.reset();
  comm_.reset();
}

absl::Status NativeRank::Connect() {
  const NativeRankOptions& o = options_;
  TransportSetupOptions c;
  c.backend = o.backend;
  c.rank = o.rank;
  c.world_size = o.world_size;
  c.device = o.device;
  c.timeout = absl::Seconds(o.timeout_seconds);
  c.daemon_store = o.daemon_store;
  c.agent_socket = o.agent_socket;
  c.job_id = o.job_id;
  c.job_store = job_store_.get();
  c.store_dir = o.store_dir;
  c.key_prefix = absl::StrCat(o.key_prefix, "grad/");
  c.socket_ifname = o.socket_ifname;
  absl::StatusOr<TransportSetup> setup = SetUpTransport(c);
  // The store served the rendezvous only. The job's own store in particular
  // must not outlive the script's destroy_process_group() through us.
  if (setup.ok()) setup->prefixed.reset();
  job_store_.reset();
  RETURN_IF_ERROR(setup.status());
  store_ = std::move(setup->store);
  comm_ = std::move(setup->comm);
  endpoint_ = std::move(setup->endpoint);

  AllReduceEngineOptions a;
  a.probe_interval = o.probe_interval;
  a.audit_interval = o.audit_interval;
  a.audit_drift = o.audit_drift;
  a.euclid_error_feedback = *ParseEuclidFeedback(o.error_feedback);
  a.owner_release_cap = o.owner_release_cap;
  if (o.mode == "fp32") a.mode = AllReduceMode::kFp32;
  if (o.mode == "bf16") a.mode = AllReduceMode::kBf16;
  ASSIGN_OR_RETURN(allreduce_, AllReduceEngine::Create(comm_.get(), base_, a));
  if (o.mode != "gift") return absl::OkStatus();
  ASSIGN_OR_RETURN(attachment_,
                   GiftdConnection::Create(AttachmentOptionsFor(), base_));
  return absl::OkStatus();
}

ConnectionOptions NativeRank::AttachmentOptionsFor() const {
  const NativeRankOptions& o = options_;
  ConnectionOptions t;
  t.agent_socket = o.agent_socket;
  t.job_id = o.job_id;
  t.rank = o.rank;
  t.world_size = o.world_size;
  t.local_rank = o.local_rank;
  t.device_memory = device_memory();
  t.device = o.device;
  // The job's default format, when gift.init asked for one; else giftd's.
  t.format = format_;
  return t;
}

std::vector<LayerWire> NativeRank::WireOf(int64_t epoch) const {
  const EpochPlan* held = allreduce_->plan(epoch);
  return WireOfPlan(held != nullptr ? *held : base_);
}

std::vector<LayerWire> NativeRank::WireOfPlan(const EpochPlan& plan) const {
  std::vector<LayerWire> out(plan.layers().size());
  if (options_.mode == "fp32" || options_.mode == "bf16") {
    const int64_t bytes = options_.mode == "fp32" ? 4 : 2;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = {options_.mode, bytes * plan.layers()[i].size()};
    }
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].format = kernels::WireFormatName(plan.layers()[i].format);
  }
  const PieceLayout piece = LayoutPiece(plan, 0, plan.communicated_elements(),
                                        std::max(1, options_.world_size));
  for (const ChunkLayout& chunk : piece.chunks) {
    for (const Segment& s : chunk.segments) {
      out[s.layer].bytes += s.payload_bytes();
    }
  }
  return out;
}

bool NativeRank::WantsSketch(const std::string& layer) const {
  return attachment_ != nullptr && attachment_->WantsSketch(layer);
}

absl::Status NativeRank::Sketch(const std::string& layer,
                                const float* activations, int64_t rows,
                                void* producer_stream) {
  if (attachment_ == nullptr) return absl::OkStatus();
  return attachment_->Sketch(layer, activations, rows, producer_stream);
}

void* NativeRank::sketch_stream() const {
  return attachment_ != nullptr ? attachment_->sketch_stream() : nullptr;
}

absl::StatusOr<StepResult> NativeRank::Step(float* flat) {
  StepResult r;
  const absl::Time start = absl::Now();
  if (attachment_ != nullptr) {
    RETURN_IF_ERROR(attachment_->BeforeStep(allreduce_.get(), &factors_));
  }
  RETURN_IF_ERROR(allreduce_->Run(flat, factors_, &r.telemetry));
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (attachment_ != nullptr) {
    RETURN_IF_ERROR(
        attachment_->AfterStep(*allreduce_, r.telemetry, r.seconds));
  }
  return r;
}

absl::Status NativeRank::BeginStep() {
  const absl::Time start = absl::Now();
  busy_ = absl::ZeroDuration();
  absl::Status s;
  if (attachment_ != nullptr) {
    s = attachment_->BeforeStep(allreduce_.get(), &factors_);
  }
  // BeginStep opens the step even when the attachment failed: EndStep then
  // closes it and reports the error.
  if (s.ok()) {
    s = allreduce_->BeginStep(factors_);
  } else {
    (void)allreduce_->BeginStep(factors_);
  }
  busy_ += absl::Now() - start;
  return s;
}

absl::Status NativeRank::ReduceBucket(const BucketGroup& group, float* data) {
  const absl::Time start = absl::Now();
  absl::Status s = allreduce_->RunBucket(group, data);
  busy_ += absl::Now() - start;
  return s;
}

absl::StatusOr<StepResult> NativeRank::EndStep() {
  const absl::Time start = absl::Now();
  StepResult r;
  RETURN_IF_ERROR(allreduce_->EndStep(&r.telemetry));
  busy_ += absl::Now() - start;
  r.seconds = absl::ToDoubleSeconds(busy_);
  if (attachment_ != nullptr) {
    RETURN_IF_ERROR(
        attachment_->AfterStep(*allreduce_, r.telemetry, r.seconds));
  }
  return r;
}

ConnectionStats NativeRank::attachment_stats() const {
  return attachment_ != nullptr ? attachment_->stats() : ConnectionStats();
}

absl::Status NativeRank::AddPlan(int64_t epoch,
                                 const std::vector<std::string>& gift_layers) {
  std::vector<BucketLayer> specs = base_.layers();
  for (const std::string& name : gift_layers) {
    const int i = base_.FindLayer(name);
    if (i < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddPlan: unknown layer '", name, "'"));
    }
    specs[i].path = LayerPath::kGift;
  }
  ASSIGN_OR_RETURN(
      EpochPlan plan,
      EpochPlan::Create(epoch, base_.bucket_elements(), std::move(specs)));
  return allreduce_->AddPlan(std::move(plan));
}

absl::Status NativeRank::PutFactor(const std::string& layer,
                                   LayerFactor factor) {
  const int i = base_.FindLayer(layer);
  if (i < 0 || base_.layers()[i].shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutFactor: '", layer, "' is not a 2-D layer"));
  }
  RETURN_IF_ERROR(factor.Validate(base_.layers()[i].d_in()));
  return factors_.Put(layer, std::move(factor));
}

absl::StatusOr<AllReduceState> NativeRank::ExportState() const {
  return allreduce_->ExportState();
}

std::vector<std::pair<std::string, LayerFactor>> NativeRank::ExportFactors()
    const {
  std::vector<std::pair<std::string, LayerFactor>> out;
  for (const BucketLayer& l : base_.layers()) {
    if (l.shape.size() != 2) continue;
    for (int64_t v : factors_.Held(l.name)) {
      out.emplace_back(l.name, *factors_.Find(l.name, v));
    }
  }
  return out;
}

absl::Status NativeRank::ImportState(
    const AllReduceState& state,
    std::vector<std::pair<std::string, LayerFactor>> factors) {
  VersionedFactors held;
  for (auto& [name, f] : factors) {
    const int i = base_.FindLayer(name);
    if (i < 0 || base_.layers()[i].shape.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("ImportState: factor of unknown layer '", name, "'"));
    }
    RETURN_IF_ERROR(f.Validate(base_.layers()[i].d_in()));
    RETURN_IF_ERROR(held.Put(name, std::move(f)));
  }
  ConnectionOptions resumed = AttachmentOptionsFor();
  if (attachment_ != nullptr) {
    // A new registration tells the daemon what the rank now holds.
    ConnectionOptions::Resume& r = resumed.resume;
    r.step = state.step;
    for (const EpochPlan& p : state.plans) {
      r.plan_epoch = std::max(r.plan_epoch, p.epoch());
      if (p.epoch() != state.current_epoch) continue;
      for (const BucketLayer& l : p.layers()) {
        if (l.path == LayerPath::kGift) r.gift_layers.push_back(l.name);
      }
    }
    for (const BucketLayer& l : base_.layers()) {
      if (const LayerFactor* f = held.Newest(l.name); f != nullptr) {
        r.factor_versions[l.name] = f->version;
      }
    }
  }
  RETURN_IF_ERROR(allreduce_->ImportState(state));
  factors_ = std::move(held);
  if (attachment_ != nullptr) {
    attachment_.reset();  // deregisters first: one session per rank
    ASSIGN_OR_RETURN(attachment_, GiftdConnection::Create(resumed, base_));
  }
  return absl::OkStatus();
}

}  // namespace gift::client::python
