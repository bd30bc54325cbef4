// Sketch windows and telemetry of shm/protocol.h. The client writes both;
// the daemon copies what it reads once and checks the copy against its own
// geometry (protocol.h), so nothing a rank writes sizes a read or bounds a
// loop here.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shm/protocol.h"
#include "shm/protocol_internal.h"
#include "shm/seqlock.h"

namespace gift::shm {
namespace {

using internal::CheckSize;
using internal::LayoutOf;
using internal::ReadVec;

absl::Status CheckMeta(const SketchMeta& m, const LayerGeometry& g, int64_t w) {
  if (m.k < 1 || m.k > g.k_cap || (m.full != 0 && m.full != 1) ||
      m.omega_version < -1 || m.omega_version > kMaxStep || m.start_step < 0 ||
      m.start_step > m.end_step || m.end_step > kMaxStep) {
    return absl::DataLossError(absl::StrCat(
        "window ", w, " is malformed (k ", m.k, " for k_cap ", g.k_cap,
        ", full ", m.full, ", omega version ", m.omega_version, ", steps ",
        m.start_step, "..", m.end_step, ")"));
  }
  return absl::OkStatus();
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x); });
}

// Copies sketch buffer b (y d_in × meta.k, trace, count) and, for a full
// window, the A accumulator b. REQUIRES: d->meta passed CheckMeta.
absl::Status CopyBuffers(const LayerGeometry& g, const Region& region,
                         const Region* full, int b, SketchData* d) {
  const LayerRegionLayout l = LayoutOf(g);
  RETURN_IF_ERROR(CheckSize(region, l.bytes, "data"));
  const LayerRegionLayout::Sketch& s = l.sketch[b];
  RETURN_IF_ERROR(ReadVec(region, s.y, g.d_in * d->meta.k, &d->y));
  RETURN_IF_ERROR(region.Read(s.trace, &d->trace, sizeof(double)));
  RETURN_IF_ERROR(region.Read(s.count, &d->count, sizeof(int64_t)));
  if (!d->meta.full) return absl::OkStatus();
  if (full == nullptr) {
    return absl::FailedPreconditionError(
        "window fed the full accumulator; the full region is needed");
  }
  const FullRegionLayout fl = FullRegionLayout::Compute(g.d_in);
  RETURN_IF_ERROR(CheckSize(*full, fl.bytes, "full"));
  return ReadVec(*full, fl.acc[b].a, g.d_in * g.d_in, &d->a);
}

}  // namespace

int32_t SketchColumns(int32_t k_cap, int32_t oversample, int32_t rank) {
  if (rank <= 0) return k_cap;
  const int64_t k = int64_t{rank} + std::max(0, oversample);
  return static_cast<int32_t>(
      std::max<int64_t>(1, std::min<int64_t>(k_cap, k)));
}

std::vector<float> ColumnRange(const std::vector<float>& m, int64_t rows,
                               int64_t cols, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > cols ||
      static_cast<int64_t>(m.size()) != rows * cols) {
    return {};
  }
  if (begin == 0 && end == cols) return m;
  const int64_t k = end - begin;
  std::vector<float> out(static_cast<size_t>(rows * k));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(m.begin() + i * cols + begin, k, out.begin() + i * k);
  }
  return out;
}

std::vector<float> FirstColumns(const std::vector<float>& m, int64_t rows,
                                int64_t cols, int64_t k) {
  return ColumnRange(m, rows, cols, 0, k);
}

std::vector<float> SideBySide(const std::vector<float>& a, int64_t a_cols,
                              const std::vector<float>& b, int64_t b_cols,
                              int64_t rows) {
  if (rows < 0 || a_cols < 0 || b_cols < 0 ||
      static_cast<int64_t>(a.size()) != rows * a_cols ||
      static_cast<int64_t>(b.size()) != rows * b_cols) {
    return {};
  }
  const int64_t cols = a_cols + b_cols;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(a.begin() + i * a_cols, a_cols, out.begin() + i * cols);
    std::copy_n(b.begin() + i * b_cols, b_cols,
                out.begin() + i * cols + a_cols);
  }
  return out;
}

int64_t LeadingColumnsEqual(const std::vector<float>& m, int64_t rows,
                            int64_t cols, const std::vector<float>& other,
                            int64_t other_cols) {
  if (rows < 0 || cols < 0 || other_cols < 0 ||
      static_cast<int64_t>(m.size()) != rows * cols ||
      static_cast<int64_t>(other.size()) != rows * other_cols) {
    return 0;
  }
  int64_t k = std::min(cols, other_cols);
  for (int64_t i = 0; i < rows && k > 0; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      if (std::memcmp(&m[static_cast<size_t>(i * cols + j)],
                      &other[static_cast<size_t>(i * other_cols + j)],
                      sizeof(float)) != 0) {
        k = j;
        break;
      }
    }
  }
  return k;
}

std::vector<float> ColumnsThenRest(const std::vector<float>& first,
                                   const std::vector<float>& rest, int64_t rows,
                                   int64_t cols, int64_t k) {
  if (k < 0 || k > cols || static_cast<int64_t>(first.size()) != rows * k ||
      static_cast<int64_t>(rest.size()) != rows * cols) {
    return {};
  }
  std::vector<float> out = rest;
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(first.begin() + i * k, k, out.begin() + i * cols);
  }
  return out;
}

int64_t ColumnsBeforeRest(const std::vector<float>& m,
                          const std::vector<float>& rest, int64_t rows,
                          int64_t cols) {
  if (static_cast<int64_t>(m.size()) != rows * cols || m.size() != rest.size())
    return cols;
  int64_t k = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = cols - 1; j >= k; --j) {
      const size_t at = static_cast<size_t>(i * cols + j);
      if (std::memcmp(&m[at], &rest[at], sizeof(float)) != 0) {
        k = j + 1;
        break;
      }
    }
  }
  return k;
}

absl::StatusOr<bool> BeginWindow(LayerEntry* entry, Region* region,
                                 Region* full_region, int64_t w, bool full) {
  if (w < 0) return absl::InvalidArgumentError("negative window");
  if (full && full_region == nullptr) {
    return absl::FailedPreconditionError("full window without a full region");
  }
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(*entry));
  const int b = static_cast<int>(w % 2);
  // The buffer is free once the daemon consumed the last window closed in it
  // (w − 2, or an earlier one when w − 2 was skipped).
  int64_t last = entry->sketch_meta[b].window;
  if (last >= 0 &&
      entry->window_consumed.load(std::memory_order_acquire) < last) {
    return false;
  }
  LayerRegionLayout l = LayoutOf(g);
  RETURN_IF_ERROR(CheckSize(*region, l.bytes, "data"));
  const LayerRegionLayout::Sketch& s = l.sketch[b];
  RETURN_IF_ERROR(region->Zero(s.y, s.count + sizeof(int64_t) - s.y));
  if (full) {
    FullRegionLayout fl = FullRegionLayout::Compute(g.d_in);
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

absl::Status ReadWindow(const LayerEntry& entry, const LayerGeometry& geometry,
                        const Region& region, const Region* full_region,
                        int64_t consumed, int64_t w, SketchData* out) {
  const int64_t closed = entry.window_closed.load(std::memory_order_acquire);
  // After consumption the client may already reuse the buffer for w + 2.
  if (w < 0 || w > closed || w <= consumed) {
    return absl::NotFoundError(
        absl::StrCat("window ", w, " is not closed and unconsumed (closed ",
                     closed, ", consumed ", consumed, ")"));
  }
  const int b = static_cast<int>(w % 2);
  SketchData d;
  d.meta = entry.sketch_meta[b];  // the one copy; never read again
  if (d.meta.window != w) {
    return absl::NotFoundError(absl::StrCat("buffer ", b, " holds window ",
                                            d.meta.window, ", not ", w));
  }
  RETURN_IF_ERROR(CheckMeta(d.meta, geometry, w));
  RETURN_IF_ERROR(CopyBuffers(geometry, region, full_region, b, &d));
  *out = std::move(d);
  return absl::OkStatus();
}

absl::Status CheckSketchData(const SketchData& d) {
  if (!std::isfinite(d.trace) || d.trace < 0 || d.count < 0 ||
      d.count > kMaxSketchCount) {
    return absl::DataLossError(absl::StrCat("window ", d.meta.window,
                                            " has trace ", d.trace,
                                            " and count ", d.count));
  }
  if (!AllFinite(d.y) || !AllFinite(d.a)) {
    return absl::DataLossError(absl::StrCat("window ", d.meta.window,
                                            " has non-finite sketch values"));
  }
  return absl::OkStatus();
}

absl::Status ReadWindow(const LayerEntry& entry, const Region& region,
                        const Region* full_region, int64_t w, SketchData* out) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(entry));
  const int64_t consumed =
      entry.window_consumed.load(std::memory_order_relaxed);
  return ReadWindow(entry, g, region, full_region, consumed, w, out);
}

absl::Status ReadClosedWindow(const LayerEntry& entry, const Region& region,
                              const Region* full_region, SketchData* out) {
  ASSIGN_OR_RETURN(const LayerGeometry g, EntryGeometry(entry));
  const int64_t closed = entry.window_closed.load(std::memory_order_acquire);
  const int64_t consumed =
      entry.window_consumed.load(std::memory_order_relaxed);
  if (closed < 0 || closed <= consumed) {
    return absl::NotFoundError("no closed window to consume");
  }
  absl::Status s =
      ReadWindow(entry, g, region, full_region, consumed, closed, out);
  // The newest closed window's buffer cannot hold another one: a mismatch
  // there is a client bug, not a race.
  if (absl::IsNotFound(s)) return absl::DataLossError(s.message());
  return s;
}

void ConsumeWindow(LayerEntry* entry, int64_t w) {
  entry->window_consumed.store(w, std::memory_order_release);
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
