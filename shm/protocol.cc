#include "shm/protocol.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shm/seqlock.h"

namespace gift::shm {
namespace {

// Attempts of a reader that picks the newest factor slot and copies it; each
// attempt re-picks, so a writer that laps the reader costs one attempt.
constexpr int kFactorAttempts = 64;

LayerRegionLayout LayoutOf(const LayerEntry& e) {
  return LayerRegionLayout::Compute(e.d_in, e.r_cap, e.k_cap);
}

absl::Status CheckSize(const Region& region, uint64_t need, const char* what) {
  if (region.bytes() < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " region has ", region.bytes(),
                     " bytes, the layout needs ", need));
  }
  return absl::OkStatus();
}

absl::Status CheckLen(size_t got, int64_t want, const char* what) {
  if (int64_t(got) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", got, " elements, expected ", want));
  }
  return absl::OkStatus();
}

void CopyString(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

template <typename T>
absl::Status WriteVec(Region* region, uint64_t offset,
                      const std::vector<T>& v) {
  return region->Write(offset, v.data(), v.size() * sizeof(T));
}
template <typename T>
absl::Status ReadVec(const Region& region, uint64_t offset, size_t n,
                     std::vector<T>* v) {
  v->resize(n);
  return region.Read(offset, v->data(), n * sizeof(T));
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

absl::Status ValidateLowRank(const LayerEntry& e, const Region& region,
                             const FactorData& f) {
  const int32_t min_r = f.kind == 0 ? 1 : 0;  // a full factor may omit U
  if (f.r < min_r || f.r > e.r_cap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor rank ", f.r, " outside [", min_r, ", r_cap=", e.r_cap, "]"));
  }
  RETURN_IF_ERROR(CheckLen(f.u.size(), e.d_in * f.r, "U"));
  RETURN_IF_ERROR(CheckLen(f.c.size(), f.r, "c"));
  RETURN_IF_ERROR(CheckLen(f.c_inv.size(), f.r, "c_inv"));
  RETURN_IF_ERROR(CheckLen(f.lambda.size(), f.r, "lambda"));
  RETURN_IF_ERROR(CheckLen(f.omega.size(), e.d_in * e.k_cap, "omega"));
  return CheckSize(region, LayoutOf(e).bytes, "data");
}

absl::Status ValidateFactor(const LayerEntry& e, const Region& region,
                            const Region* full, const FactorData& f) {
  int64_t newest;
  NewestSlot(e, &newest);
  if (f.version < 0 || f.version <= newest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor version ", f.version, " is not above the newest ", newest));
  }
  if (f.kind != 0 && f.kind != 1) {
    return absl::InvalidArgumentError(absl::StrCat("factor kind ", f.kind));
  }
  RETURN_IF_ERROR(ValidateLowRank(e, region, f));
  if (f.kind == 0) return absl::OkStatus();
  if (full == nullptr) {
    return absl::InvalidArgumentError("a full factor needs the full region");
  }
  RETURN_IF_ERROR(CheckLen(f.t.size(), e.d_in * e.d_in, "T"));
  RETURN_IF_ERROR(CheckLen(f.t_inv.size(), e.d_in * e.d_in, "T_inv"));
  return CheckSize(*full, FullRegionLayout::Compute(e.d_in).bytes, "full");
}

absl::Status WriteFactorData(const LayerEntry& e, int slot, Region* region,
                             Region* full, const FactorData& f) {
  const LayerRegionLayout::Slot l = LayoutOf(e).slot[slot];
  // U is stored compactly (row stride r), so one copy moves it.
  RETURN_IF_ERROR(WriteVec(region, l.u, f.u));
  RETURN_IF_ERROR(WriteVec(region, l.c, f.c));
  RETURN_IF_ERROR(WriteVec(region, l.c_inv, f.c_inv));
  RETURN_IF_ERROR(WriteVec(region, l.lambda, f.lambda));
  RETURN_IF_ERROR(WriteVec(region, l.omega, f.omega));
  if (f.kind == 0) return absl::OkStatus();
  const FullRegionLayout::Slot fl =
      FullRegionLayout::Compute(e.d_in).slot[slot];
  RETURN_IF_ERROR(WriteVec(full, fl.t, f.t));
  return WriteVec(full, fl.t_inv, f.t_inv);
}

// One copy attempt of slot `i` (inside its seqlock read): fields first, then
// the arrays they size. A torn field is caught by range checks here and by
// the sequence check after.
absl::Status CopySlot(const LayerEntry& e, int i, const Region& region,
                      const Region* full, FactorData* f) {
  const FactorSlot& s = e.slots[i];
  f->version = s.version;
  f->kind = s.kind;
  f->r = s.r;
  f->sigma2 = s.sigma2;
  f->beta = s.beta;
  f->window = s.window;
  if ((f->kind != 0 && f->kind != 1) || f->r < 0 || f->r > e.r_cap) {
    return absl::DataLossError(absl::StrCat("factor slot ", i, " holds kind ",
                                            f->kind, " rank ", f->r));
  }
  if (f->kind == 1 && full == nullptr) {
    return absl::FailedPreconditionError(
        "the newest factor is full; map the layer's full region first");
  }
  const LayerRegionLayout::Slot l = LayoutOf(e).slot[i];
  RETURN_IF_ERROR(ReadVec(region, l.u, e.d_in * f->r, &f->u));
  RETURN_IF_ERROR(ReadVec(region, l.c, f->r, &f->c));
  RETURN_IF_ERROR(ReadVec(region, l.c_inv, f->r, &f->c_inv));
  RETURN_IF_ERROR(ReadVec(region, l.lambda, f->r, &f->lambda));
  RETURN_IF_ERROR(ReadVec(region, l.omega, e.d_in * e.k_cap, &f->omega));
  f->t.clear();
  f->t_inv.clear();
  if (f->kind == 0) return absl::OkStatus();
  const FullRegionLayout::Slot fl = FullRegionLayout::Compute(e.d_in).slot[i];
  RETURN_IF_ERROR(ReadVec(*full, fl.t, e.d_in * e.d_in, &f->t));
  return ReadVec(*full, fl.t_inv, e.d_in * e.d_in, &f->t_inv);
}

absl::Status CheckEntry(const LayerEntry& e, uint32_t i) {
  if (std::memchr(e.name, '\0', kNameBytes) == nullptr || e.d_out < 1 ||
      e.d_in < 1 || e.r_cap < 1 || e.r_cap > e.d_in ||
      e.k_cap != std::min<int64_t>(e.d_in, e.r_cap + kOversample)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control block layer ", i, " is malformed (d_out ", e.d_out, ", d_in ",
        e.d_in, ", r_cap ", e.r_cap, ", k_cap ", e.k_cap, ")"));
  }
  return absl::OkStatus();
}

// Copies sketch buffer b: y (keeping the first meta.k columns of each
// d_in × k_cap row), trace and count.
absl::Status ReadSketch(const LayerEntry& e, const Region& region, int b,
                        SketchData* d) {
  LayerRegionLayout l = LayoutOf(e);
  RETURN_IF_ERROR(CheckSize(region, l.bytes, "data"));
  const LayerRegionLayout::Sketch& s = l.sketch[b];
  RETURN_IF_ERROR(ReadVec(region, s.y, e.d_in * e.k_cap, &d->y));
  const int32_t k = d->meta.k;
  if (k < e.k_cap) {
    for (int64_t row = 0; row < e.d_in; ++row) {
      std::copy_n(&d->y[row * e.k_cap], k, &d->y[row * k]);
    }
    d->y.resize(e.d_in * k);
  }
  RETURN_IF_ERROR(region.Read(s.trace, &d->trace, sizeof(double)));
  return region.Read(s.count, &d->count, sizeof(int64_t));
}

}  // namespace

// ---- control block ----

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
    e->d_out = d.d_out;
    e->d_in = d.d_in;
    e->r_cap = d.r_cap;
    e->k_cap = static_cast<int32_t>(
        std::min<int64_t>(d.d_in, int64_t{d.r_cap} + kOversample));
    for (FactorSlot& s : e->slots) {
      s.version = -1;
      s.window = -1;
    }
    e->window_closed.store(-1, std::memory_order_relaxed);
    e->window_consumed.store(-1, std::memory_order_relaxed);
    for (SketchMeta& m : e->sketch_meta) m.window = -1;
    e->tele.factor_version = -1;
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
  uint32_t n = std::min<uint32_t>(h->n_layers, plan.layers.size());
  for (uint32_t i = 0; i < n; ++i) {
    const PlanView::Layer& l = plan.layers[i];
    LayerEntry* e = Entry(block, i);
    e->path = l.path;
    e->transform = l.transform;
    e->format = l.format;
    e->candidate = l.candidate;
    e->rank = l.rank;
    e->refresh_seq = l.refresh_seq;
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
    for (uint32_t i = 0; i < copy.layers.size(); ++i) {
      const LayerEntry* e = Entry(b, i);
      copy.layers[i] = {e->path,      e->transform, e->format,
                        e->candidate, e->rank,      e->refresh_seq};
    }
  });
  if (ok) *plan = std::move(copy);
  return ok;
}

// ---- factor slots ----

absl::Status PublishFactor(LayerEntry* entry, Region* region,
                           Region* full_region, const FactorData& f) {
  if (region == nullptr) return absl::InvalidArgumentError("no data region");
  RETURN_IF_ERROR(ValidateFactor(*entry, *region, full_region, f));
  int64_t newest;
  int target = NewestSlot(*entry, &newest) == 0 ? 1 : 0;
  FactorSlot& s = entry->slots[target];
  // The seqlock covers the arrays too: a reader that copied them while this
  // runs sees the sequence change and throws its copy away.
  SeqlockWriteBegin(&s.lock);
  absl::Status written =
      WriteFactorData(*entry, target, region, full_region, f);
  s.version = written.ok() ? f.version : -1;  // a half-written slot is empty
  s.kind = f.kind;
  s.r = f.r;
  s.sigma2 = f.sigma2;
  s.beta = f.beta;
  s.window = f.window;
  SeqlockWriteEnd(&s.lock);
  return written;
}

int64_t NewestFactorVersion(const LayerEntry& entry) {
  int64_t version;
  NewestSlot(entry, &version);
  return version;
}

absl::Status ReadNewestFactor(const LayerEntry& entry, const Region& region,
                              const Region* full_region, FactorData* f) {
  RETURN_IF_ERROR(CheckSize(region, LayoutOf(entry).bytes, "data"));
  FactorData copy;
  copy.u.reserve(entry.d_in * entry.r_cap);
  copy.omega.reserve(entry.d_in * entry.k_cap);
  for (int attempt = 0; attempt < kFactorAttempts; ++attempt) {
    int64_t version;
    int i = NewestSlot(entry, &version);
    if (i < 0) return absl::NotFoundError("no factor published yet");
    absl::Status copied;
    if (!SeqlockRead(
            &entry.slots[i].lock,
            [&] { copied = CopySlot(entry, i, region, full_region, &copy); },
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
  LayerRegionLayout l = LayoutOf(entry);
  RETURN_IF_ERROR(CheckSize(region, l.bytes, "data"));
  return ReadVec(region, l.omega0, entry.d_in * entry.k_cap, omega);
}

absl::Status WriteOmega0(const LayerEntry& entry, Region* region,
                         const std::vector<float>& omega) {
  LayerRegionLayout l = LayoutOf(entry);
  RETURN_IF_ERROR(CheckSize(*region, l.bytes, "data"));
  RETURN_IF_ERROR(CheckLen(omega.size(), entry.d_in * entry.k_cap, "omega0"));
  return WriteVec(region, l.omega0, omega);
}

// ---- sketch windows ----

absl::StatusOr<bool> BeginWindow(LayerEntry* entry, Region* region,
                                 Region* full_region, int64_t w, bool full) {
  if (w < 0) return absl::InvalidArgumentError("negative window");
  if (full && full_region == nullptr) {
    return absl::FailedPreconditionError("full window without a full region");
  }
  const int b = static_cast<int>(w % 2);
  // The buffer is free once the daemon consumed the last window closed in it
  // (w − 2, or an earlier one when w − 2 was skipped).
  int64_t last = entry->sketch_meta[b].window;
  if (last >= 0 &&
      entry->window_consumed.load(std::memory_order_acquire) < last) {
    return false;
  }
  LayerRegionLayout l = LayoutOf(*entry);
  RETURN_IF_ERROR(CheckSize(*region, l.bytes, "data"));
  const LayerRegionLayout::Sketch& s = l.sketch[b];
  RETURN_IF_ERROR(region->Zero(s.y, s.count + sizeof(int64_t) - s.y));
  if (full) {
    FullRegionLayout fl = FullRegionLayout::Compute(entry->d_in);
    RETURN_IF_ERROR(CheckSize(*full_region, fl.bytes, "full"));
    const FullRegionLayout::Acc& a = fl.acc[b];
    RETURN_IF_ERROR(full_region->Zero(a.a, a.count + sizeof(int64_t) - a.a));
  }
  return true;
}

void CloseWindow(LayerEntry* entry, const SketchMeta& meta) {
  entry->sketch_meta[meta.window % 2] = meta;
  entry->window_closed.store(meta.window, std::memory_order_release);
}

absl::Status ReadWindow(const LayerEntry& entry, const Region& region,
                        const Region* full_region, int64_t w, SketchData* out) {
  int64_t closed = entry.window_closed.load(std::memory_order_acquire);
  int64_t consumed = entry.window_consumed.load(std::memory_order_relaxed);
  // After consumption the client may already reuse the buffer for w + 2.
  if (w < 0 || w > closed || w <= consumed) {
    return absl::NotFoundError(
        absl::StrCat("window ", w, " is not closed and unconsumed (closed ",
                     closed, ", consumed ", consumed, ")"));
  }
  const int b = static_cast<int>(w % 2);
  SketchData d;
  d.meta = entry.sketch_meta[b];  // stable until we consume w
  if (d.meta.window != w) {
    return absl::NotFoundError(absl::StrCat("buffer ", b, " holds window ",
                                            d.meta.window, ", not ", w));
  }
  if (d.meta.k < 1 || d.meta.k > entry.k_cap) {
    return absl::DataLossError(absl::StrCat("sketch of window ", w, " has k ",
                                            d.meta.k, " (k_cap ", entry.k_cap,
                                            ")"));
  }
  RETURN_IF_ERROR(ReadSketch(entry, region, b, &d));
  if (d.meta.full) {
    if (full_region == nullptr) {
      return absl::FailedPreconditionError(
          "window fed the full accumulator; the full region is needed");
    }
    FullRegionLayout fl = FullRegionLayout::Compute(entry.d_in);
    RETURN_IF_ERROR(CheckSize(*full_region, fl.bytes, "full"));
    RETURN_IF_ERROR(
        ReadVec(*full_region, fl.acc[b].a, entry.d_in * entry.d_in, &d.a));
  }
  *out = std::move(d);
  return absl::OkStatus();
}

absl::Status ReadClosedWindow(const LayerEntry& entry, const Region& region,
                              const Region* full_region, SketchData* out) {
  int64_t closed = entry.window_closed.load(std::memory_order_acquire);
  int64_t consumed = entry.window_consumed.load(std::memory_order_relaxed);
  if (closed < 0 || closed <= consumed) {
    return absl::NotFoundError("no closed window to consume");
  }
  absl::Status s = ReadWindow(entry, region, full_region, closed, out);
  // The newest closed window's buffer cannot hold another one: a mismatch
  // there is a client bug, not a race.
  if (absl::IsNotFound(s)) return absl::DataLossError(s.message());
  return s;
}

void ConsumeWindow(LayerEntry* entry, int64_t w) {
  if (w > entry->window_consumed.load(std::memory_order_relaxed)) {
    entry->window_consumed.store(w, std::memory_order_release);
  }
}

// ---- telemetry ----

void WriteTelemetry(LayerEntry* entry, const LayerCounters& counters) {
  SeqlockWriteBegin(&entry->tele_lock);
  entry->tele = counters;
  SeqlockWriteEnd(&entry->tele_lock);
}

bool ReadTelemetry(const LayerEntry& entry, LayerCounters* counters) {
  LayerCounters copy;
  if (!SeqlockRead(&entry.tele_lock, [&] { copy = entry.tele; })) return false;
  *counters = copy;
  return true;
}

void WriteStepCounters(ControlHeader* header, const StepCounters& totals) {
  SeqlockWriteBegin(&header->tele_lock);
  header->totals = totals;
  SeqlockWriteEnd(&header->tele_lock);
}

bool ReadStepCounters(const ControlHeader& header, StepCounters* totals) {
  StepCounters copy;
  if (!SeqlockRead(&header.tele_lock, [&] { copy = header.totals; })) {
    return false;
  }
  *totals = copy;
  return true;
}

}  // namespace gift::shm
