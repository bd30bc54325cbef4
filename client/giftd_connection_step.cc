// GiftdConnection's per-step work on the training thread: plans, factors,
// staleness, sketches, windows and telemetry.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/giftd_connection_impl.h"
#include "common/status_macros.h"
#include "kernels/sketch.h"
#include "kernels/wire_format.h"

namespace gift::client {

const shm::PlanView* GiftdConnection::Impl::AgreedPlan(int64_t epoch) const {
  auto it = plans.find(epoch);
  return it == plans.end() ? nullptr : &it->second;
}

absl::Status GiftdConnection::Impl::ApplyPlan(AllReduceEngine* allreduce,
                                              VersionedFactors* factors) {
  shm::PlanView plan;
  if (!shm::ReadPlan(mapping->block(), &plan) || plan.plan_epoch <= 0) {
    return absl::OkStatus();
  }
  if (plan.layers.size() != layers.size()) {
    return absl::InternalError("plan has a different number of layers");
  }
  // Probation: the factor versions the daemon accepted for the GIFT path,
  // read every step (no new epoch brings them); the per-step agreement
  // makes every rank use the same one, or none.
  for (size_t j = 0; j < layers.size(); ++j) {
    factors->SetAccepted(base.layers()[layers[j].plan_index].name,
                         plan.layers[j].accepted_version);
  }
  staleness_limit = plan.staleness_limit;
  // The daemon's audit interval (giftctl set-audit-interval) overrides the
  // rank's own; the per-step agreement makes a change safe at any step.
  if (plan.audit_interval >= 0 &&
      plan.audit_interval != allreduce->audit_interval()) {
    RETURN_IF_ERROR(allreduce->set_audit_interval(plan.audit_interval));
  }
  // So does its probe interval (giftd's selection judges factors on the
  // probes); probes are local, so a rank may take it at any step. A value
  // below 1, which no giftd publishes, leaves the rank's own.
  if (plan.probe_interval > 0 &&
      plan.probe_interval != allreduce->probe_interval()) {
    RETURN_IF_ERROR(allreduce->set_probe_interval(plan.probe_interval));
  }
  RETURN_IF_ERROR(MapFullRegions(plan));
  if (plan.plan_epoch <= newest_epoch) return absl::OkStatus();
  absl::StatusOr<std::vector<BucketLayer>> specs = PlanLayers(plan);
  if (!specs.ok()) {
    // Not this epoch: the rank keeps its plans (the others cannot agree on
    // an epoch it lacks) and the connection, and says why.
    Note(absl::StrFormat("plan epoch %d refused (%s): keeping epoch %d",
                         plan.plan_epoch, specs.status().message(),
                         newest_epoch));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(EpochPlan next,
                   EpochPlan::Create(plan.plan_epoch, base.bucket_elements(),
                                     *std::move(specs)));
  RETURN_IF_ERROR(allreduce->AddPlan(std::move(next)));
  newest_epoch = plan.plan_epoch;
  plans[plan.plan_epoch] = plan;
  // The engine may stay on an old epoch while newer ones arrive (the ranks
  // took them at different steps): keep its plan, which StepWindows reads.
  KeepNewestPlans(plans, 4, allreduce->current_epoch());
  ++stats.plans_applied;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BucketLayer>> GiftdConnection::Impl::PlanLayers(
    const shm::PlanView& plan) const {
  std::vector<BucketLayer> specs = base.layers();
  for (size_t j = 0; j < layers.size(); ++j) {
    BucketLayer& l = specs[layers[j].plan_index];
    const shm::PlanView::Layer& p = plan.layers[j];
    const kernels::WireFormat f = kernels::WireFormat::FromCode(p.format);
    if (!f.valid()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %s: format code %d is none of 0..%d", l.name,
                          p.format, kernels::WireFormat::kMxfp4Code));
    }
    // Declared layers are 2-D.
    if (absl::Status fits = kernels::CheckFormatFitsShape(
            f, l.shape[0], l.shape[1], /*two_d=*/true);
        !fits.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l.name, ": ", fits.message()));
    }
    // A 4-bit format fixes its blocks (0 = the format's); FP8 after a 4-bit
    // base takes per-layer scales, else the base's granularity stays.
    if (f.is_fp4() || l.format.is_fp4()) l.block_size = 0;
    l.path = p.path ? LayerPath::kGift : LayerPath::kEuclid;
    l.transform = p.transform ? GiftTransform::kFull : GiftTransform::kLowRank;
    l.format = f;
  }
  return specs;
}

absl::Status GiftdConnection::Impl::MapFullRegions(const shm::PlanView& plan) {
  for (size_t j = 0; j < layers.size(); ++j) {
    const shm::LayerEntry* e = shm::Entry(mapping->block(), j);
    if (!plan.layers[j].transform ||
        e->full_region.kind == static_cast<uint32_t>(shm::RegionKind::kNone) ||
        e->full_region.generation == mapping->full_generation[j]) {
      continue;
    }
    shm::RegionDesc desc = e->full_region;
    desc.device = options.device;  // giftd's number for the GPU may differ
    ASSIGN_OR_RETURN(std::unique_ptr<shm::Region> region,
                     shm::OpenRegion(desc));
    if (mapping->full[j] != nullptr) QuiesceDeviceCopies();
    mapping->full[j] = std::move(region);
    mapping->full_generation[j] = e->full_region.generation;
  }
  return absl::OkStatus();
}

absl::Status GiftdConnection::Impl::TakeFactors(VersionedFactors* factors) {
  for (size_t j = 0; j < layers.size(); ++j) {
    LayerState& s = layers[j];
    const shm::LayerEntry& e = *shm::Entry(mapping->block(), j);
    const int64_t v = shm::NewestFactorVersion(e);
    if (v <= s.instance_newest) continue;
    shm::FactorData f;
    absl::Status st =
        shm::ReadNewestFactor(e, *mapping->data[j], mapping->full[j].get(), &f);
    if (absl::IsUnavailable(st) || absl::IsFailedPrecondition(st)) {
      continue;  // the daemon is writing it, or the full region is not mapped
    }
    RETURN_IF_ERROR(st);
    LayerFactor g;
    g.version = f.version;
    g.d_in = s.d_in;
    if (f.kind == 1) {
      g.kind = GiftTransform::kFull;
      g.t = std::move(f.t);
      g.t_inv = std::move(f.t_inv);
    } else {
      g.kind = GiftTransform::kLowRank;
      g.r = f.r;
      g.u = std::move(f.u);
      g.c = std::move(f.c);
      g.c_inv = std::move(f.c_inv);
      if (f.beta_auto) {
        g.lambda = std::move(f.lambda);
        g.trace_mean = f.trace_mean;
        g.beta_auto = true;
      }
      if (!f.omega.empty()) {
        s.omega = std::move(f.omega);
        s.omega_version = f.version;
      }
    }
    RETURN_IF_ERROR(
        factors->Put(base.layers()[s.plan_index].name, std::move(g)));
    s.instance_newest = f.version;
    s.newest_received = std::max(s.newest_received, f.version);
    s.window_end[f.version] = f.window;
    while (s.window_end.size() > 4) s.window_end.erase(s.window_end.begin());
    ++stats.factors_received;
  }
  return absl::OkStatus();
}

void GiftdConnection::Impl::DropStale(VersionedFactors* factors) {
  // Noted only where the agreed plan has the layer on the GIFT path (or no
  // plan is agreed): a stale factor of a candidate, or of a layer giftd no
  // longer sketches, served probes only and is dropped quietly.
  const shm::PlanView* agreed = AgreedPlan(stats.current_epoch);
  for (size_t j = 0; j < layers.size(); ++j) {
    const LayerState& s = layers[j];
    const std::string& name = base.layers()[s.plan_index].name;
    // The version by value, not a LayerFactor pointer: Drop frees the factor.
    const std::vector<int64_t> held = factors->Held(name);
    if (held.empty()) continue;
    const int64_t version = held.back();
    auto it = s.window_end.find(version);
    const int64_t end = it == s.window_end.end() ? 0 : it->second;
    if (step - end > staleness_limit) {
      factors->Drop(name);
      ++stats.stale_drops;
      if (agreed != nullptr && j < agreed->layers.size() &&
          agreed->layers[j].path == 0) {
        continue;
      }
      Note(absl::StrFormat(
               "factor v%d of %s is %d steps old (limit %d): Euclidean until a "
               "new one arrives",
               version, name, step - end, staleness_limit),
           /*rank0_only=*/true);  // every rank drops it at the same step
    }
  }
}

absl::Status GiftdConnection::BeforeStep(AllReduceEngine* allreduce,
                                         VersionedFactors* factors) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (m.resume_gate_pending && m.mapping == nullptr) {
    // Restored from a checkpoint, not attached yet: the versions the
    // restored state used (the same on every rank) until a plan says.
    for (const auto& s : m.layers) {
      const std::string& name = m.base.layers()[s.plan_index].name;
      factors->SetAccepted(name, allreduce->GiftVersionInUse(name));
    }
  }
  m.resume_gate_pending = false;
  if (m.mapping != nullptr) {
    absl::Status st = m.ApplyPlan(allreduce, factors);
    if (st.ok()) st = m.TakeFactors(factors);
    if (!st.ok()) m.Detach(std::string(st.message()));
  }
  m.DropStale(factors);
  return absl::OkStatus();
}

bool GiftdConnection::WantsSketch(const std::string& layer) const {
  absl::MutexLock lock(&impl_->mu);
  auto it = impl_->by_name.find(layer);
  if (it == impl_->by_name.end() || impl_->mapping == nullptr) return false;
  const Impl::LayerState& s = impl_->layers[it->second];
  return s.open && s.usable &&
         shm::SketchStepDue(impl_->step, impl_->sketch_stride);
}

absl::Status GiftdConnection::Sketch(const std::string& layer,
                                     const float* activations, int64_t rows,
                                     void* producer_stream) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  auto it = m.by_name.find(layer);
  if (it == m.by_name.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sketch: '", layer, "' is not a declared 2-D layer"));
  }
  if (rows < 0 || (rows > 0 && activations == nullptr)) {
    return absl::InvalidArgumentError("Sketch: bad rows or null activations");
  }
  Impl::LayerState& s = m.layers[it->second];
  if (m.mapping == nullptr || !s.open || !s.usable || rows == 0 ||
      !shm::SketchStepDue(m.step, m.sketch_stride)) {
    return absl::OkStatus();
  }
  const shm::PlanView* plan = m.AgreedPlan(m.stats.current_epoch);
  const int64_t want = plan != nullptr ? plan->sketch_rows : 512;
  const int64_t n = std::min<int64_t>(rows, std::max<int64_t>(1, want));
  const int64_t stride = rows / n, d = s.d_in;
  if (m.sketcher != nullptr) {
    return m.sketcher->Add(it->second, activations, n, stride, producer_stream);
  }
  const int64_t k = s.k();
  m.rows_scratch.resize(n * d);
  CopyRowsToHost(activations, d, stride, n, m.rows_scratch.data());
  m.sketch_scratch.resize(kernels::SketchWorkspaceFloats(n, k));
  RETURN_IF_ERROR(kernels::SketchAccumulate(
      m.rows_scratch.data(), n, d, s.window_omega.data(), k,
      {s.y.data(), &s.trace, &s.count}, m.sketch_scratch.data()));
  if (s.full) {
    RETURN_IF_ERROR(kernels::SecondMomentAccumulate(
        m.rows_scratch.data(), n, d, {s.a.data(), &s.a_trace, &s.a_count}));
  }
  return absl::OkStatus();
}

std::vector<int64_t> GiftdConnection::Impl::LayerBytes(
    const StepTelemetry& t) const {
  const std::vector<BucketLayer>& all = base.layers();
  std::vector<kernels::WireFormat> formats;
  for (const BucketLayer& l : all) formats.push_back(l.format);
  if (const shm::PlanView* p = AgreedPlan(t.plan_epoch); p != nullptr) {
    for (size_t j = 0; j < layers.size() && j < p->layers.size(); ++j) {
      const kernels::WireFormat f =
          kernels::WireFormat::FromCode(p->layers[j].format);
      if (f.valid()) formats[layers[j].plan_index] = f;
    }
  }
  double total = 0;
  std::vector<double> wire(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    wire[i] =
        static_cast<double>(kernels::WireCodeBytes(formats[i], all[i].size()));
    total += wire[i];
  }
  const double sent = static_cast<double>(t.bytes_euclid + t.bytes_gift);
  std::vector<int64_t> out(all.size(), 0);
  for (size_t i = 0; i < all.size() && total > 0; ++i) {
    out[i] = static_cast<int64_t>(sent * wire[i] / total);
  }
  return out;
}

void GiftdConnection::Impl::WriteTelemetry(const StepTelemetry& t,
                                           double seconds) {
  const std::vector<int64_t> bytes = LayerBytes(t);
  for (const LayerTelemetry& lt : t.layers) {
    auto it = by_name.find(lt.name);
    if (it == by_name.end()) continue;
    shm::LayerCounters& c = layers[it->second].counters;
    c.bytes_sent += bytes[layers[it->second].plan_index];
    const kernels::QuantizeStats& q = lt.local;
    ++c.steps;
    c.gift_steps += lt.path == LayerPath::kGift;
    c.n += q.n;
    c.upper += q.upper;
    c.lower += q.lower;
    c.nonfinite += q.nonfinite;
    c.err_sq += q.err_sq;
    c.x_sq += q.x_sq;
    c.xhat_x += q.xhat_x;
    if (q.x_sq > 0) {
      c.rel_l2_sum += q.RelL2();
      c.cosine_sum += q.Cosine();
    }
    if (lt.probed) {
      ++c.probes;
      c.probe_euclid_sum += lt.probe_euclid_rel_l2;
      c.probe_gift_sum += lt.probe_gift_rel_l2;
      c.version_probes =
          c.probe_version == lt.probe_version ? c.version_probes + 1 : 1;
      c.probe_version = lt.probe_version;
      if (lt.beta_probed) {
        ++c.beta_probes;
        for (int b = 0; b < kBetaGrid; ++b) {
          c.probe_beta_sum[b] += lt.probe_beta_rel_l2[b];
        }
      }
    }
    if (lt.audited) {
      const int p = lt.path == LayerPath::kGift ? 1 : 0;
      ++c.audits[p];
      c.audit_rel_l2_sum[p] += lt.audit_rel_l2;
      c.audit_cosine_sum[p] += lt.audit_cosine;
      if (lt.drift_audited) {
        ++c.drift_audits[p];
        c.audit_drift_sum[p] += lt.audit_drift;
      }
    }
    c.factor_version = lt.factor_version;
    shm::WriteTelemetry(shm::Entry(mapping->block(), it->second), c);
  }
  ++totals.steps;
  totals.collective_seconds += seconds;
  totals.transform_seconds += t.transform_seconds;
  totals.bytes_euclid += static_cast<int64_t>(t.bytes_euclid);
  totals.bytes_gift += static_cast<int64_t>(t.bytes_gift);
  totals.bytes_control += static_cast<int64_t>(t.bytes_control);
  const int w = options.world_size;
  // A ring allreduce in FP32 sends 2 (W − 1) / W of the payload per rank.
  totals.bytes_fp32_equivalent +=
      w > 1 ? 2 * (w - 1) * base.communicated_elements() * 4 / w : 0;
  totals.nonfinite_layers += t.nonfinite_layers;
  totals.audit_steps += t.audit_step;
  totals.bytes_audit += static_cast<int64_t>(t.bytes_audit);
  totals.audit_seconds += t.audit_seconds;
  int b = 0;
  while (b + 1 < shm::kDurationBuckets && seconds > shm::DurationBound(b)) ++b;
  ++totals.duration_buckets[b];
  shm::ControlHeader* h = shm::Header(mapping->block());
  shm::WriteStepCounters(h, totals);
  h->step.store(step, std::memory_order_release);
  h->epoch_in_use.store(stats.current_epoch);
  h->epoch_since_step.store(stats.last_epoch_switch_step);
}

absl::Status GiftdConnection::AfterStep(const AllReduceEngine& allreduce,
                                        const StepTelemetry& telemetry,
                                        double collective_seconds) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  m.step = telemetry.step + 1;
  if (telemetry.dropped_epoch != 0) {
    m.Note(absl::StrFormat(
        "the ranks held different plans under epoch %d (giftd restarted "
        "while it was published): dropped it, staying on epoch %d",
        telemetry.dropped_epoch, allreduce.current_epoch()));
  }
  const int64_t epoch = allreduce.current_epoch();
  if (epoch != m.stats.current_epoch) {
    m.stats.current_epoch = epoch;
    m.stats.last_epoch_switch_step = telemetry.step;
  }
  const shm::PlanView* agreed = m.AgreedPlan(epoch);
  m.stats.current_refresh_interval =
      agreed != nullptr ? agreed->refresh_interval : 0;
  if (m.mapping == nullptr) return absl::OkStatus();
  m.WriteTelemetry(telemetry, collective_seconds);
  if (agreed != nullptr) {
    absl::Status st = m.StepWindows(*agreed);
    if (!st.ok()) m.Detach(std::string(st.message()));
  }
  return absl::OkStatus();
}

absl::Status GiftdConnection::Impl::StepWindows(const shm::PlanView& agreed) {
  const int32_t k = std::max(1, agreed.refresh_interval);
  sketch_stride = std::max(1, agreed.sketch_stride);
  for (size_t j = 0; j < layers.size(); ++j) {
    LayerState& s = layers[j];
    const shm::PlanView::Layer& p = agreed.layers[j];
    if (s.open &&
        (!p.candidate || step % k == 0 || p.refresh_seq > s.refresh_seq)) {
      RETURN_IF_ERROR(CloseWindow(static_cast<int>(j)));
    }
    // Only the windows giftd refreshes from are sketched: a GIFT-path
    // layer whose factor holds may be refreshed every sketch_period-th one.
    if (!s.open && p.candidate &&
        shm::SketchWindowDue(step, k, p.sketch_period)) {
      RETURN_IF_ERROR(OpenWindow(static_cast<int>(j), agreed));
    }
  }
  return absl::OkStatus();
}

absl::Status GiftdConnection::Impl::OpenWindow(int j,
                                               const shm::PlanView& agreed) {
  LayerState& s = layers[j];
  shm::LayerEntry* e = shm::Entry(mapping->block(), j);
  s.full = agreed.layers[j].transform != 0 && mapping->full[j] != nullptr;
  s.window = e->window_closed.load() + 1;
  ASSIGN_OR_RETURN(s.usable,
                   shm::BeginWindow(e, mapping->data[j].get(),
                                    mapping->full[j].get(), s.window, s.full));
  stats.windows_skipped += !s.usable;
  s.open = true;
  s.start_step = step;
  s.refresh_seq = agreed.layers[j].refresh_seq;
  s.window_omega_version = s.omega_version;
  // Ω is d_in × (r + p) (DESIGN §3): the first k of the k_cap columns the
  // daemon keeps, for the rank of the agreed plan (every rank of the job
  // opens this window under the same plan, so their k agree).
  s.window_omega = shm::FirstColumns(
      s.omega_version >= 0 ? s.omega : mapping->omega0[j], e->d_in, e->k_cap,
      shm::SketchColumns(e->k_cap, e->oversample, agreed.layers[j].rank));
  if (sketcher != nullptr) {
    if (!s.usable) return absl::OkStatus();
    return sketcher->Open(j, e->d_in, s.window_omega, s.full,
                          std::max<int64_t>(1, agreed.sketch_rows));
  }
  s.y.assign(s.window_omega.size(), 0.0f);  // d_in × k, as Ω
  s.a.assign(s.full ? static_cast<size_t>(e->d_in * e->d_in) : 0, 0.0f);
  s.trace = s.a_trace = 0;
  s.count = s.a_count = 0;
  return absl::OkStatus();
}

absl::Status GiftdConnection::Impl::CloseWindow(int j) {
  LayerState& s = layers[j];
  s.open = false;
  if (!s.usable) return absl::OkStatus();
  shm::LayerEntry* e = shm::Entry(mapping->block(), j);
  const int b = static_cast<int>(s.window % 2);
  RETURN_IF_ERROR(sketcher != nullptr ? CopyDeviceWindow(j, b)
                                      : WriteHostWindow(j, b));
  shm::SketchMeta meta{};
  meta.window = s.window;
  meta.omega_version = s.window_omega_version;
  meta.k = static_cast<int32_t>(s.k());
  meta.full = s.full ? 1 : 0;
  meta.start_step = s.start_step;
  meta.end_step = step;
  // After the copies are queued and, on a CUDA IPC region, the event giftd
  // waits on is recorded behind them.
  shm::CloseWindow(e, meta);
  ++stats.windows_closed;
  return absl::OkStatus();
}

absl::Status GiftdConnection::Impl::CopyDeviceWindow(int j, int b) {
  const LayerState& s = layers[j];
  const shm::LayerEntry* e = shm::Entry(mapping->block(), j);
  const auto layout =
      shm::LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap);
  const auto fl = shm::FullRegionLayout::Compute(e->d_in);
  return sketcher->Close(j, mapping->data[j].get(), layout.sketch[b],
                         s.full ? mapping->full[j].get() : nullptr,
                         s.full ? &fl.acc[b] : nullptr);
}

void GiftdConnection::Impl::QuiesceDeviceCopies() {
  if (sketcher == nullptr) return;
  absl::Status st = sketcher->Quiesce();
  if (!st.ok()) Note(absl::StrCat("device sketch copies: ", st.message()));
}

absl::Status GiftdConnection::Impl::WriteHostWindow(int j, int b) {
  LayerState& s = layers[j];
  shm::LayerEntry* e = shm::Entry(mapping->block(), j);
  const auto layout =
      shm::LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap);
  shm::Region* data = mapping->data[j].get();
  RETURN_IF_ERROR(
      data->Write(layout.sketch[b].y, s.y.data(), s.y.size() * sizeof(float)));
  RETURN_IF_ERROR(
      data->Write(layout.sketch[b].trace, &s.trace, sizeof(double)));
  RETURN_IF_ERROR(
      data->Write(layout.sketch[b].count, &s.count, sizeof(int64_t)));
  if (s.full) {
    const auto fl = shm::FullRegionLayout::Compute(e->d_in);
    shm::Region* full = mapping->full[j].get();
    RETURN_IF_ERROR(
        full->Write(fl.acc[b].a, s.a.data(), s.a.size() * sizeof(float)));
    RETURN_IF_ERROR(full->Write(fl.acc[b].trace, &s.a_trace, sizeof(double)));
    RETURN_IF_ERROR(full->Write(fl.acc[b].count, &s.a_count, sizeof(int64_t)));
  }
  return absl::OkStatus();
}

}  // namespace gift::client
