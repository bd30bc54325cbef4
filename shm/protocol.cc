#include "shm/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shm/protocol_internal.h"
#include "shm/seqlock.h"

namespace gift::shm {

namespace internal {

absl::Status CheckSize(const Region& region, uint64_t need, const char* what) {
  if (region.bytes() < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " region has ", region.bytes(),
                     " bytes, the layout needs ", need));
  }
  return absl::OkStatus();
}

absl::Status CheckLen(size_t got, int64_t want, const char* what) {
  if (static_cast<int64_t>(got) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", got, " elements, expected ", want));
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

using internal::CheckLen;
using internal::CheckSize;
using internal::LayoutOf;
using internal::ReadVec;
using internal::WriteVec;

// Attempts of a reader that picks the newest factor slot and copies it; each
// attempt re-picks, so a writer that laps the reader costs one attempt.
constexpr int kFactorAttempts = 64;

void CopyString(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// ---- factor slots ----

// The slot holding the newest version (−1: none), skipping a slot whose
// writer is busy: the writer only ever rewrites the other one.
int NewestSlot(const LayerEntry& e, int64_t* version) {
  int best = -1;
  int64_t best_version = -1;
  for (int i = 0; i < 2; ++i) {
    int64_t v = -1;
    if (SeqlockRead(
            &e.slots[i].lock, [&] { v = e.slots[i].version; }, 1) &&
        v > best_version) {
      best = i;
      best_version = v;
    }
  }
  *version = best_version;
  return best;
}

absl::Status ValidateLowRank(const LayerGeometry& g, const Region& region,
                             const FactorData& f) {
  const int32_t min_r = f.kind == 0 ? 1 : 0;  // a full factor may omit U
  if (f.r < min_r || f.r > g.r_cap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor rank ", f.r, " outside [", min_r, ", r_cap=", g.r_cap, "]"));
  }
  RETURN_IF_ERROR(CheckLen(f.u.size(), g.d_in * f.r, "U"));
  RETURN_IF_ERROR(CheckLen(f.c.size(), f.r, "c"));
  RETURN_IF_ERROR(CheckLen(f.c_inv.size(), f.r, "c_inv"));
  RETURN_IF_ERROR(CheckLen(f.lambda.size(), f.r, "lambda"));
  RETURN_IF_ERROR(CheckLen(f.omega.size(), g.d_in * g.k_cap, "omega"));
  return CheckSize(region, LayoutOf(g).bytes, "data");
}

absl::Status ValidateFactor(const LayerEntry& e, const LayerGeometry& g,
                            const Region& region, const Region* full,
                            const FactorData& f) {
  int64_t newest;
  NewestSlot(e, &newest);
  if (f.version < 0 || f.version <= newest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor version ", f.version, " is not above the newest ", newest));
  }
  if (f.kind != 0 && f.kind != 1) {
    return absl::InvalidArgumentError(absl::StrCat("factor kind ", f.kind));
  }
  if (!(f.trace_mean >= 0) || !std::isfinite(f.trace_mean) ||
      (f.beta_auto && (f.kind != 0 || !(f.trace_mean > 0)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("factor trace_mean ", f.trace_mean, " with beta_auto ",
                     f.beta_auto, " (needs a low-rank factor and tr A > 0)"));
  }
  RETURN_IF_ERROR(ValidateLowRank(g, region, f));
  if (f.kind == 0) return absl::OkStatus();
  if (full == nullptr) {
    return absl::InvalidArgumentError("a full factor needs the full region");
  }
  RETURN_IF_ERROR(CheckLen(f.t.size(), g.d_in * g.d_in, "T"));
  RETURN_IF_ERROR(CheckLen(f.t_inv.size(), g.d_in * g.d_in, "T_inv"));
  return CheckSize(*full, FullRegionLayout::Compute(g.d_in).bytes, "full");
}

absl::Status WriteFactorData(const LayerGeometry& g, int slot, Region* region,
                             Region* full, const FactorData& f) {
  const LayerRegionLayout::Slot l = LayoutOf(g).slot[slot];
  // U is stored compactly (row stride r), so one copy moves it.
  RETURN_IF_ERROR(WriteVec(region, l.u, f.u));
  RETURN_IF_ERROR(WriteVec(region, l.c, f.c));
  RETURN_IF_ERROR(WriteVec(region, l.c_inv, f.c_inv));
  RETURN_IF_ERROR(WriteVec(region, l.lambda, f.lambda));
  RETURN_IF_ERROR(WriteVec(region, l.omega, f.omega));
  if (f.kind == 0) return absl::OkStatus();
  const FullRegionLayout::Slot fl =
      FullRegionLayout::Compute(g.d_in).slot[slot];
  RETURN_IF_ERROR(WriteVec(full, fl.t, f.t));
  return WriteVec(full, fl.t_inv, f.t_inv);
}

// One copy attempt of slot `i` (inside its seqlock read): fields first, then
// the arrays they size. A torn field is caught by range checks here and by
// the sequence check after.
absl::Status CopySlot(const LayerEntry& e, const LayerGeometry& g, int i,
                      const Region& region, const Region* full, FactorData* f) {
  const FactorSlot& s = e.slots[i];
  f->version = s.version;
  f->kind = s.kind;
  f->r = s.r;
  f->sigma2 = s.sigma2;
  f->beta = s.beta;
  f->window = s.window;
  f->trace_mean = s.trace_mean;
  f->beta_auto = s.beta_auto != 0;
  if ((f->kind != 0 && f->kind != 1) || f->r < 0 || f->r > g.r_cap) {
    return absl::DataLossError(absl::StrCat("factor slot ", i, " holds kind ",
                                            f->kind, " rank ", f->r));
  }
  if (f->kind == 1 && full == nullptr) {
    return absl::FailedPreconditionError(
        "the newest factor is full; map the layer's full region first");
  }
  const LayerRegionLayout::Slot l = LayoutOf(g).slot[i];
  RETURN_IF_ERROR(ReadVec(region, l.u, g.d_in * f->r, &f->u));
  RETURN_IF_ERROR(ReadVec(region, l.c, f->r, &f->c));
  RETURN_IF_ERROR(ReadVec(region, l.c_inv, f->r, &f->c_inv));
  RETURN_IF_ERROR(ReadVec(region, l.lambda, f->r, &f->lambda));
  RETURN_IF_ERROR(ReadVec(region, l.omega, g.d_in * g.k_cap, &f->omega));
  f->t.clear();
  f->t_inv.clear();
  if (f->kind == 0) return absl::OkStatus();
  const FullRegionLayout::Slot fl = FullRegionLayout::Compute(g.d_in).slot[i];
  RETURN_IF_ERROR(ReadVec(*full, fl.t, g.d_in * g.d_in, &f->t));
  return ReadVec(*full, fl.t_inv, g.d_in * g.d_in, &f->t_inv);
}

absl::Status CheckGeometry(const LayerGeometry& g, uint32_t i) {
  if (g.d_in < 1 || g.d_in > kMaxDIn || g.r_cap < 1 || g.r_cap > g.d_in ||
      g.oversample < 0 || g.oversample > kMaxOversample ||
      g.k_cap != std::min<int64_t>(g.d_in, int64_t{g.r_cap} + g.oversample)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control block layer ", i, " is malformed (d_in ", g.d_in, ", r_cap ",
        g.r_cap, ", k_cap ", g.k_cap, ", oversample ", g.oversample, ")"));
  }
  return absl::OkStatus();
}

// Copies first: the checks and the caller see the same values.
LayerGeometry CopyGeometry(const LayerEntry& e) {
  LayerGeometry g;
  g.d_in = e.d_in;
  g.r_cap = e.r_cap;
  g.k_cap = e.k_cap;
  g.oversample = e.oversample;
  return g;
}

absl::Status CheckEntry(const LayerEntry& e, uint32_t i) {
  const int64_t d_out = e.d_out;
  if (std::memchr(e.name, '\0', kNameBytes) == nullptr || d_out < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control block layer ", i, " is malformed (name, d_out ", d_out, ")"));
  }
  return CheckGeometry(CopyGeometry(e), i);
}

}  // namespace

// ---- control block ----

LayerGeometry GeometryOf(const LayerDecl& d) {
  LayerGeometry g;
  g.d_in = d.d_in;
  g.r_cap = d.r_cap;
  g.oversample = d.oversample;
  g.k_cap = static_cast<int32_t>(
      std::min<int64_t>(d.d_in, int64_t{d.r_cap} + d.oversample));
  return g;
}

absl::StatusOr<LayerGeometry> EntryGeometry(const LayerEntry& entry) {
  const LayerGeometry g = CopyGeometry(entry);
  RETURN_IF_ERROR(CheckGeometry(g, 0));
  return g;
}

void InitControlBlock(void* block, const std::string& daemon_instance,
                      const std::string& session_id, int32_t rank,
                      int32_t world_size,
                      const std::vector<LayerDecl>& layers) {
  ControlHeader* h = Header(block);
  h->layout_version = kLayoutVersion;
  h->n_layers = static_cast<uint32_t>(layers.size());
  h->total_bytes = ControlBlockBytes(h->n_layers);
  CopyString(h->daemon_instance, kIdBytes, daemon_instance);
  CopyString(h->session_id, kIdBytes, session_id);
  h->rank = rank;
  h->world_size = world_size;
  for (uint32_t i = 0; i < h->n_layers; ++i) {
    const LayerDecl& d = layers[i];
    LayerEntry* e = Entry(block, i);
    CopyString(e->name, kNameBytes, d.name);
    const LayerGeometry g = GeometryOf(d);
    e->d_out = d.d_out;
    e->d_in = g.d_in;
    e->r_cap = g.r_cap;
    e->k_cap = g.k_cap;
    e->oversample = g.oversample;
    for (FactorSlot& s : e->slots) {
      s.version = -1;
      s.window = -1;
    }
    e->window_closed.store(-1, std::memory_order_relaxed);
    e->window_consumed.store(-1, std::memory_order_relaxed);
    for (SketchMeta& m : e->sketch_meta) m.window = -1;
    e->tele.factor_version = -1;
    e->tele.probe_version = -1;
    e->accepted_version = -1;
  }
  // The magic last: a block with it is complete.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
}

absl::Status CheckControlBlock(const void* block, uint64_t bytes) {
  if (bytes < sizeof(ControlHeader)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control block of ", bytes, " bytes is smaller than its header"));
  }
  const ControlHeader* h = static_cast<const ControlHeader*>(block);
  if (h->magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a GIFT control block (magic 0x", absl::Hex(h->magic), ")"));
  }
  if (h->layout_version != kLayoutVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory layout version ", h->layout_version,
                     ", this client speaks ", kLayoutVersion));
  }
  uint64_t need = ControlBlockBytes(h->n_layers);
  if (bytes < need || h->total_bytes != need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control block of ", bytes, " bytes (header says ", h->total_bytes,
        ") does not hold ", h->n_layers, " layers (", need, " bytes)"));
  }
  for (uint32_t i = 0; i < h->n_layers; ++i) {
    RETURN_IF_ERROR(CheckEntry(*Entry(const_cast<void*>(block), i), i));
  }
  return absl::OkStatus();
}

void PublishPlan(void* block, const PlanView& plan) {
  ControlHeader* h = Header(block);
  SeqlockWriteBegin(&h->plan_lock);
  h->plan_epoch = plan.plan_epoch;
  h->refresh_interval = plan.refresh_interval;
  h->probe_interval = plan.probe_interval;
  h->staleness_limit = plan.staleness_limit;
  h->omega_seed = plan.omega_seed;
  h->sketch_rows = plan.sketch_rows;
  h->audit_interval = plan.audit_interval;
  h->sketch_stride = plan.sketch_stride;
  // The caller's count, never the block's n_layers (the rank's to
  // overwrite).
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const PlanView::Layer& l = plan.layers[i];
    LayerEntry* e = Entry(block, static_cast<uint32_t>(i));
    e->path = l.path;
    e->transform = l.transform;
    e->format = l.format;
    e->candidate = l.candidate;
    e->rank = l.rank;
    e->refresh_seq = l.refresh_seq;
    e->accepted_version = l.accepted_version;
    e->sketch_period = l.sketch_period;
  }
  SeqlockWriteEnd(&h->plan_lock);
}

bool ReadPlan(const void* block, PlanView* plan) {
  void* b = const_cast<void*>(block);  // Entry() takes void*; only read here
  const ControlHeader* h = Header(b);
  PlanView copy;
  copy.layers.resize(h->n_layers);  // allocate outside the read
  bool ok = SeqlockRead(&h->plan_lock, [&] {
    copy.plan_epoch = h->plan_epoch;
    copy.refresh_interval = h->refresh_interval;
    copy.probe_interval = h->probe_interval;
    copy.staleness_limit = h->staleness_limit;
    copy.omega_seed = h->omega_seed;
    copy.sketch_rows = h->sketch_rows;
    copy.audit_interval = h->audit_interval;
    copy.sketch_stride = h->sketch_stride;
    for (uint32_t i = 0; i < copy.layers.size(); ++i) {
      const LayerEntry* e = Entry(b, i);
      copy.layers[i] = {
          e->path, e->transform,   e->format,           e->candidate,
          e->rank, e->refresh_seq, e->accepted_version, e->sketch_period};
    }
  });
  if (ok) *plan = std::move(copy);
  return ok;
}

// ---- factor slots ----

absl::Status PublishFactor(LayerEntry* entry, const LayerGeometry& geometry,
                           Region* region, Region* full_region,
                           const FactorData& f) {
  if (region == nullptr) return absl::InvalidArgumentError("no data region");
  RETURN_IF_ERROR(ValidateFactor(*entry, geometry, *region, full_region, f));
  int64_t newest;
  int target = NewestSlot(*entry, &newest) == 0 ? 1 : 0;
  FactorSlot& s = entry->slots[target];
  // The seqlock covers the arrays too: a reader that copied them while this
  // runs sees the sequence change and throws its copy away.
  SeqlockWriteBegin(&s.lock);
  absl::Status written =
      WriteFactorData(geometry, target, region, full_region, f);
  s.version = written.ok() ? f.version : -1;  // a half-written slot is empty
  s.kind = f.kind;
  s.r = f.r;
  s.sigma2 = f.sigma2;
  s.beta = f.beta;
  s.window = f.window;
  s.trace_mean = f.trace_mean;
  s.beta_auto = f.beta_auto ? 1 : 0;
  SeqlockWriteEnd(&s.lock);
  return written;
}

absl::Status PublishFactor(LayerEntry* entry, Region* region,
                           Region* full_region, const FactorData& f) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(*entry));
  return PublishFactor(entry, g, region, full_region, f);
}

int64_t NewestFactorVersion(const LayerEntry& entry) {
  int64_t version;
  NewestSlot(entry, &version);
  return version;
}

absl::Status ReadNewestFactor(const LayerEntry& entry, const Region& region,
                              const Region* full_region, FactorData* f) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(entry));
  RETURN_IF_ERROR(CheckSize(region, LayoutOf(g).bytes, "data"));
  FactorData copy;
  copy.u.reserve(g.d_in * g.r_cap);
  copy.omega.reserve(g.d_in * g.k_cap);
  for (int attempt = 0; attempt < kFactorAttempts; ++attempt) {
    int64_t version;
    int i = NewestSlot(entry, &version);
    if (i < 0) return absl::NotFoundError("no factor published yet");
    absl::Status copied;
    if (!SeqlockRead(
            &entry.slots[i].lock,
            [&] { copied = CopySlot(entry, g, i, region, full_region, &copy); },
            1)) {
      continue;  // torn: the writer lapped us
    }
    RETURN_IF_ERROR(copied);
    *f = std::move(copy);
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      "the daemon rewrote the factor slots during every read attempt");
}

absl::Status ReadOmega0(const LayerEntry& entry, const Region& region,
                        std::vector<float>* omega) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(entry));
  LayerRegionLayout l = LayoutOf(g);
  RETURN_IF_ERROR(CheckSize(region, l.bytes, "data"));
  return ReadVec(region, l.omega0, g.d_in * g.k_cap, omega);
}

absl::Status WriteOmega0(const LayerGeometry& geometry, Region* region,
                         const std::vector<float>& omega) {
  LayerRegionLayout l = LayoutOf(geometry);
  RETURN_IF_ERROR(CheckSize(*region, l.bytes, "data"));
  RETURN_IF_ERROR(
      CheckLen(omega.size(), geometry.d_in * geometry.k_cap, "omega0"));
  return WriteVec(region, l.omega0, omega);
}

absl::Status WriteOmega0(const LayerEntry& entry, Region* region,
                         const std::vector<float>& omega) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(entry));
  return WriteOmega0(g, region, omega);
}

}  // namespace gift::shm
