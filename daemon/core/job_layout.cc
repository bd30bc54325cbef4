#include "daemon/core/job_layout.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/factor_builder.h"
#include "daemon/log.h"
#include "proto/wire_format_proto.h"

namespace gift::daemon {

int32_t JobLayout::RankCap(int64_t d_in) const {
  return static_cast<int32_t>(std::min<int64_t>(config_.max_rank, d_in));
}

bool JobLayout::DefaultFull(int64_t d_in) const {
  return config_.transform == "full" && d_in <= config_.full_max_d_in;
}

std::vector<shm::LayerDecl> JobLayout::Decls() const {
  std::vector<shm::LayerDecl> out;
  for (const JobLayer& l : layers_) {
    out.push_back(
        {l.name, l.d_out, l.d_in, l.r_cap, config_.sketch_oversample});
  }
  return out;
}

std::vector<bool> JobLayout::FullLayers() const {
  std::vector<bool> out;
  for (const JobLayer& l : layers_) {
    out.push_back(l.settings.transform() == v1::TRANSFORM_FULL);
  }
  return out;
}

int JobLayout::SelectedCount() const {
  int selected = 0;
  for (const JobLayer& l : layers_) selected += l.selected;
  return selected;
}

absl::Status JobLayout::CheckSameJob(int world_size,
                                     const LayerShapes& layers) const {
  if (world_size != world_size_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "world size %d differs from the job's %d", world_size, world_size_));
  }
  bool same = layers.size() == static_cast<int>(layers_.size());
  for (int i = 0; same && i < layers.size(); ++i) {
    same = layers.Get(i).name() == layers_[i].name &&
           layers.Get(i).d_out() == layers_[i].d_out &&
           layers.Get(i).d_in() == layers_[i].d_in;
  }
  if (!same) {
    return absl::FailedPreconditionError(
        "the rank's layer list differs from the job's (every rank must "
        "declare the same layers, in the same order)");
  }
  return absl::OkStatus();
}

kernels::WireFormat JobLayout::ConfigFormat() const {
  return kernels::ParseWireFormat(config_.format)
      .value_or(kernels::Fp8Format::kE4M3);
}

namespace {

// Adopt's note for a layer whose shape cannot take the job's `format`; ""
// when it can.
std::string FormatNote(const JobLayer& l, kernels::WireFormat format) {
  // The layers are 2-D weights: a 4-bit format needs whole blocks per row.
  absl::Status fits =
      kernels::CheckFormatFitsShape(format, l.d_out, l.d_in, /*two_d=*/true);
  if (fits.ok()) return "";
  return absl::StrFormat("e4m3, not the job's %s: %s",
                         kernels::WireFormatName(format), fits.message());
}

}  // namespace

void JobLayout::TakeFormat(kernels::WireFormat format) {
  if (format == format_) return;
  LOG_INFO("job %s: the leader's format %s replaces %s", Clip(job_id_),
           kernels::WireFormatName(format), kernels::WireFormatName(format_));
  format_ = format;
  for (JobLayer& l : layers_) l.format_note = FormatNote(l, format);
}

absl::Status JobLayout::CheckFormat(int rank, v1::WireFormat asked) const {
  if (asked == v1::WIRE_FORMAT_UNSPECIFIED) return absl::OkStatus();
  absl::StatusOr<kernels::WireFormat> f = FromProto(asked);
  if (!f.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d: %s", rank, f.status().message()));
  }
  if (*f == format_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "rank %d asks format %s; job %s runs %s (every rank of a job must ask "
      "the same format, or none)",
      rank, kernels::WireFormatName(*f), Clip(job_id_),
      kernels::WireFormatName(format_)));
}

absl::Status JobLayout::CheckPlanFormats(const v1::PeerPlan& plan,
                                         const std::string& from) const {
  if (plan.format() != v1::WIRE_FORMAT_UNSPECIFIED) {
    if (absl::Status st = FromProto(plan.format()).status(); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("plan epoch %d from %s: job format: %s",
                          plan.plan_epoch(), from, st.message()));
    }
  }
  for (const v1::PeerLayerPlan& x : plan.layers()) {
    if (x.settings().format() == v1::WIRE_FORMAT_UNSPECIFIED) continue;
    absl::StatusOr<kernels::WireFormat> f = FromProto(x.settings().format());
    absl::Status st = f.status();
    const JobLayer* l = FindOrNull(x.name());
    if (st.ok() && l != nullptr) {
      st = kernels::CheckFormatFitsShape(*f, l->d_out, l->d_in,
                                         /*two_d=*/true);
    }
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "plan epoch %d from %s: layer '%s': %s", plan.plan_epoch(), from,
          Clip(x.name()), st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status JobLayout::Adopt(
    const std::string& job_id, int world_size, const LayerShapes& layers,
    absl::FunctionRef<absl::Status(const JobLayer&)> each) {
  return Adopt(job_id, world_size, layers, ConfigFormat(), each);
}

absl::Status JobLayout::Adopt(
    const std::string& job_id, int world_size, const LayerShapes& layers,
    kernels::WireFormat format,
    absl::FunctionRef<absl::Status(const JobLayer&)> each) {
  job_id_ = job_id;
  ++generation_;
  world_size_ = world_size;
  format_ = format;
  layers_.clear();
  for (const v1::LayerShape& s : layers) {
    JobLayer l;
    l.name = s.name();
    l.d_out = s.d_out();
    l.d_in = s.d_in();
    l.r_cap = RankCap(l.d_in);
    l.k_cap = static_cast<int32_t>(
        std::min<int64_t>(l.d_in, l.r_cap + config_.sketch_oversample));
    l.settings.set_pin(v1::PIN_AUTO);
    // A layer wider than full_max_d_in stays low-rank whatever the default.
    l.settings.set_transform(DefaultFull(l.d_in) ? v1::TRANSFORM_FULL
                                                 : v1::TRANSFORM_LOWRANK);
    l.format_note = FormatNote(l, format);
    if (!l.format_note.empty())
      LOG_INFO("layer %s: %s", Clip(l.name), l.format_note);
    l.settings.set_format(
        ToProto(l.format_note.empty() ? format : kernels::Fp8Format::kE4M3));
    // beta: auto is the default policy of the low-rank layers.
    l.settings.set_beta_auto(config_.beta_auto &&
                             l.settings.transform() != v1::TRANSFORM_FULL);
    l.factors = FactorStore({l.d_in, l.r_cap, l.k_cap});
    l.omega0 = InitialOmega(l.d_in, l.k_cap, config_.omega_seed);
    RETURN_IF_ERROR(each(l));
    layers_.push_back(std::move(l));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobLayer*> JobLayout::Find(const std::string& name) {
  if (JobLayer* l = FindOrNull(name); l != nullptr) return l;
  if (layers_.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown layer '%s': no rank has registered yet", Clip(name)));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown layer '%s' (giftctl layers lists the %d layers)",
                      Clip(name), layers_.size()));
}

JobLayer* JobLayout::FindOrNull(const std::string& name) {
  for (JobLayer& l : layers_) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

const JobLayer* JobLayout::FindOrNull(const std::string& name) const {
  for (const JobLayer& l : layers_) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

std::vector<PlanLayer*> JobLayout::PlanLayers() {
  std::vector<PlanLayer*> out;
  out.reserve(layers_.size());
  for (JobLayer& l : layers_) out.push_back(&l);
  return out;
}

std::vector<const PlanLayer*> JobLayout::PlanLayers() const {
  std::vector<const PlanLayer*> out;
  out.reserve(layers_.size());
  for (const JobLayer& l : layers_) out.push_back(&l);
  return out;
}

metrics::Labels JobLayout::Labels(
    std::initializer_list<std::pair<const std::string, std::string>> extra)
    const {
  metrics::Labels labels(extra);
  labels.emplace("job_id", job_id_);
  labels.emplace("node", config_.node);
  return labels;
}

}  // namespace gift::daemon
