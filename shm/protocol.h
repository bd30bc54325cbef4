// The two sides of the shared-memory protocol of shm/layout.h, as small
// functions, so that the daemon and the client library cannot disagree on
// it: plan publication, factor slots, sketch windows and telemetry.
//
//   // daemon
//   PublishPlan(block, plan);
//   RETURN_IF_ERROR(PublishFactor(Entry(block, i), region, full, factor));
//   // client
//   PlanView plan;
//   if (ReadPlan(block, &plan)) ...;
//   if (NewestFactorVersion(*Entry(block, i)) > held)
//     RETURN_IF_ERROR(ReadNewestFactor(*Entry(block, i), *region, full, &f));
//
// The daemon never trusts what a rank wrote: a rank can put anything into
// any byte of its control block and data regions, at any time. So the
// daemon's functions below take the layer's sizes from a LayerGeometry the
// daemon kept when it created the block (never from the entry, which the
// rank can overwrite), copy each field they use once into the daemon's own
// memory, check the copy, and loop only over bounds of their own. The
// client's functions trust the daemon's block (CheckControlBlock first).
//
// Thread safety: one writer per field as in layout.h; the functions keep no
// state.
#ifndef GIFT_SHM_PROTOCOL_H_
#define GIFT_SHM_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shm/layout.h"
#include "shm/region.h"

namespace gift::shm {

// ---- control block -----------------------------------------------------

struct LayerDecl {
  std::string name;
  int64_t d_out = 0;
  int64_t d_in = 0;
  int32_t r_cap = 0;  // REQUIRES: 1 <= r_cap <= d_in
  // Sketch oversampling p. REQUIRES: 0 <= oversample <= kMaxOversample.
  int32_t oversample = kDefaultOversample;
};

// A layer's sizes as the daemon created its regions: what the daemon reads
// and writes with (the entry's d_in, r_cap and k_cap are the rank's to
// overwrite).
struct LayerGeometry {
  int64_t d_in = 0;
  int32_t r_cap = 0;
  int32_t k_cap = 0;       // min(d_in, r_cap + oversample)
  int32_t oversample = 0;  // p, in [0, kMaxOversample]
};
// REQUIRES: 1 <= d.r_cap <= d.d_in, 0 <= d.oversample <= kMaxOversample.
LayerGeometry GeometryOf(const LayerDecl& d);
// The entry's copy, for the client (which trusts the daemon's block):
// INVALID_ARGUMENT when the entry is malformed.
absl::StatusOr<LayerGeometry> EntryGeometry(const LayerEntry& entry);

// Daemon: fills a zeroed control block of ControlBlockBytes(n) bytes: magic,
// version, ids, layer names/shapes/caps, empty slots (version −1), windows
// −1. Region descriptors are set by the caller afterwards.
void InitControlBlock(void* block, const std::string& daemon_instance,
                      const std::string& session_id, int32_t rank,
                      int32_t world_size, const std::vector<LayerDecl>& layers);

// Client: INVALID_ARGUMENT "shared memory layout version X, this client
// speaks Y" / bad magic / size too small for n_layers.
absl::Status CheckControlBlock(const void* block, uint64_t bytes);

struct PlanView {
  int64_t plan_epoch = 0;
  int32_t refresh_interval = 0;
  int32_t probe_interval = 0;
  int64_t staleness_limit = 0;
  uint64_t omega_seed = 0;
  int32_t sketch_rows = 0;
  int32_t audit_interval = 0;  // steps between audit steps; 0 = none
  int32_t sketch_stride = 1;   // ControlHeader::sketch_stride
  struct Layer {
    uint8_t path = 0;
    uint8_t transform = 0;
    uint8_t format = 0;
    uint8_t candidate = 0;
    int32_t rank = 0;
    int64_t refresh_seq = 0;
    // The factor version the GIFT path may use (-1: none; newer versions
    // are for probes until the daemon accepts them). Untrusted: a rank that
    // does not hold it keeps the layer Euclidean, on every rank alike.
    int64_t accepted_version = -1;
    int32_t sketch_period = 1;  // LayerEntry::sketch_period
  };
  std::vector<Layer> layers;  // n_layers entries
};

// Daemon. REQUIRES: plan.layers.size() is the number of layers the block
// was made for (the daemon's own count: n_layers is the rank's to overwrite).
void PublishPlan(void* block, const PlanView& plan);
// Client: false when the daemon was writing on every try (keep the old).
bool ReadPlan(const void* block, PlanView* plan);

// ---- factor slots --------------------------------------------------------

struct FactorData {
  int64_t version = -1;
  int32_t kind = 0;  // 0 low-rank, 1 full
  int32_t r = 0;
  double sigma2 = 0;
  double beta = 0;
  int64_t window = -1;
  // Low-rank: tr A per sampled row (FactorSlot::trace_mean; 0: not given)
  // and whether ranks probe the β grid with it. REQUIRES: finite, >= 0;
  // beta_auto only for kind 0 with trace_mean > 0.
  double trace_mean = 0;
  bool beta_auto = false;
  // Low-rank (data region): u d_in × r (row-major), c/c_inv/lambda r (λ
  // unclipped: the eigenvalues of A the floor clips), omega
  // d_in × k_cap (Ω of this version, for the sketch windows that follow).
  // REQUIRES: 1 <= r <= r_cap for kind 0, 0 <= r <= r_cap for kind 1 (a
  // full factor may carry a low-rank part too); omega is required for both
  // kinds (for a full factor the daemon may pass Ω₀).
  std::vector<float> u, c, c_inv, lambda, omega;
  // Full (full region): d_in × d_in each. Ignored for kind 0.
  std::vector<float> t, t_inv;
};

// Daemon: writes f into the slot that does not hold the newest version
// (region, and full_region for kind 1), under the slot's seqlock.
// INVALID_ARGUMENT for sizes that do not fit the geometry's caps, a version
// not above the newest, or kind 1 without a full region.
absl::Status PublishFactor(LayerEntry* entry, const LayerGeometry& geometry,
                           Region* region, Region* full_region,
                           const FactorData& f);
// The same with the entry's own geometry (tests, tools that play the daemon
// on a block they made).
absl::Status PublishFactor(LayerEntry* entry, Region* region,
                           Region* full_region, const FactorData& f);
// Client: the newest published version, −1 when none.
int64_t NewestFactorVersion(const LayerEntry& entry);
// Client: copies the newest factor. NOT_FOUND when none; UNAVAILABLE when
// the daemon rewrote the slot during every try; FAILED_PRECONDITION when a
// full factor is published but full_region is null (map it first).
absl::Status ReadNewestFactor(const LayerEntry& entry, const Region& region,
                              const Region* full_region, FactorData* f);
// Client: Ω₀ (d_in × k_cap floats) of the layer.
absl::Status ReadOmega0(const LayerEntry& entry, const Region& region,
                        std::vector<float>* omega);
// Daemon: writes Ω₀ (d_in × k_cap floats).
absl::Status WriteOmega0(const LayerGeometry& geometry, Region* region,
                         const std::vector<float>& omega);
absl::Status WriteOmega0(const LayerEntry& entry, Region* region,
                         const std::vector<float>& omega);

// ---- sketch windows --------------------------------------------------------

// Client: may window w accumulate into buffer w % 2 (the daemon consumed
// window w − 2 — or the last window closed in that buffer — or w < 2)? If
// so, zeroes that buffer's sketch y, trace and count (and, when `full`, the
// full region's accumulator w % 2) and returns true. The client then
// accumulates into LayerRegionLayout::sketch[w % 2]: y is d_in × k (the
// window's SketchColumns, row-major, row stride k) in the buffer's first
// d_in·k floats, trace a double, count an int64.
// FAILED_PRECONDITION when `full` and full_region is null.
absl::StatusOr<bool> BeginWindow(LayerEntry* entry, Region* region,
                                 Region* full_region, int64_t w, bool full);
// Client: publishes meta (meta.window = w, meta.k the columns sketched) and
// window_closed = w. REQUIRES: the window's writes into the region are
// complete (host stores, or device work synchronised — or recorded with
// Region::SignalWrites, which the daemon's Region::Read waits on).
void CloseWindow(LayerEntry* entry, const SketchMeta& meta);

struct SketchData {
  SketchMeta meta;
  std::vector<float> y;  // d_in × meta.k (row-major, row stride meta.k)
  double trace = 0;      // from the sketch buffer
  int64_t count = 0;     // from the sketch buffer

  std::vector<float> a;  // d_in × d_in when meta.full
};

// The columns of Ω a window of a layer sketches (DESIGN §3: Ω is
// d_in × (r + p)): min(k_cap, rank + oversample) for the rank r of the
// plan the window opened under (at least 1); k_cap when rank <= 0.
// Ω = orth[U | G] keeps U first, so its first k columns are U and p
// columns of G, orthonormal.
int32_t SketchColumns(int32_t k_cap, int32_t oversample, int32_t rank);

// Sketch only when it is used (DESIGN §3): with `step` steps completed and
// refresh interval k, is the window that opens now one a layer of sketch
// period `period` sketches (its index step / k is period − 1 modulo
// period)? And is the next step a sketch step under stride `stride`?
// Values below 1 (a block before its first plan) mean 1: every window,
// every step. Every rank evaluates them on the agreed plan and the same
// step count, so all of a job's ranks sketch the same windows and steps.
inline bool SketchWindowDue(int64_t step, int32_t k, int32_t period) {
  return period <= 1 || k <= 0 || (step / k) % period == period - 1;
}
inline bool SketchStepDue(int64_t step, int32_t stride) {
  return stride <= 1 || step % stride == 0;
}
// Columns begin..end (exclusive) of the rows × cols row-major m, as a
// rows × (end − begin) row-major matrix; empty unless
// 0 <= begin <= end <= cols and m.size() == rows · cols.
std::vector<float> ColumnRange(const std::vector<float>& m, int64_t rows,
                               int64_t cols, int64_t begin, int64_t end);
// The first k columns: ColumnRange(m, rows, cols, 0, k).
std::vector<float> FirstColumns(const std::vector<float>& m, int64_t rows,
                                int64_t cols, int64_t k);
// The rows × a_cols `a` and the rows × b_cols `b` side by side, rows ×
// (a_cols + b_cols) row-major; empty unless the sizes match.
std::vector<float> SideBySide(const std::vector<float>& a, int64_t a_cols,
                              const std::vector<float>& b, int64_t b_cols,
                              int64_t rows);
// How many leading columns of the rows × cols m equal those of the
// rows × other_cols `other` bit for bit (at most min(cols, other_cols); 0
// when a size does not match): a factor's Ω starts with its U (DESIGN §2),
// which a peer receives anyway.
int64_t LeadingColumnsEqual(const std::vector<float>& m, int64_t rows,
                            int64_t cols, const std::vector<float>& other,
                            int64_t other_cols);
// Its inverse with a filler: the rows × k row-major `first`, followed in
// every row by columns k..cols of the rows × cols `rest`; empty unless
// 0 <= k <= cols, first.size() == rows · k and rest.size() == rows · cols.
// A factor's Ω is built r + p wide and kept k_cap wide with Ω₀'s columns
// after it (DESIGN §3): a rank raised later sketches in those.
std::vector<float> ColumnsThenRest(const std::vector<float>& first,
                                   const std::vector<float>& rest, int64_t rows,
                                   int64_t cols, int64_t k);
// The fewest leading columns of the rows × cols m after which every column
// equals `rest`'s bit for bit (cols when the sizes differ): what a peer
// must send of m when the receiver holds `rest` (ColumnsThenRest).
int64_t ColumnsBeforeRest(const std::vector<float>& m,
                          const std::vector<float>& rest, int64_t rows,
                          int64_t cols);

// Largest step and window count (2^62) the daemon accepts from a rank:
// differences and sums of a few such values cannot overflow int64.
inline constexpr int64_t kMaxStep = int64_t{1} << 62;
// Largest row count of one window's sketch (2^40): far above any real
// window, and small enough that thousands of them sum without overflow.
inline constexpr int64_t kMaxSketchCount = int64_t{1} << 40;

// Daemon: copies window w (buffer w % 2) into `out`, once, with the
// daemon's geometry and its own count of consumed windows (`consumed`; the
// entry's window_consumed is the rank's to overwrite). NOT_FOUND when w is
// not closed or already consumed, or its buffer holds another window (for
// the newest closed window that is the client's fault); DATA_LOSS for a
// malformed window: k outside [1, k_cap], full not 0/1, an Ω version below
// −1, steps outside 0 <= start <= end <= kMaxStep; FAILED_PRECONDITION when
// meta.full and full_region is null. The values are not checked:
// CheckSketchData.
absl::Status ReadWindow(const LayerEntry& entry, const LayerGeometry& geometry,
                        const Region& region, const Region* full_region,
                        int64_t consumed, int64_t w, SketchData* out);
// Daemon: DATA_LOSS unless every value of the copy is finite, the trace
// >= 0 and the count in [0, kMaxSketchCount].
absl::Status CheckSketchData(const SketchData& d);
// The same with the entry's own geometry and window_consumed (tests); and
// the last closed window (NOT_FOUND when none is newer than
// window_consumed, DATA_LOSS when its buffer holds another one).
absl::Status ReadWindow(const LayerEntry& entry, const Region& region,
                        const Region* full_region, int64_t w, SketchData* out);
absl::Status ReadClosedWindow(const LayerEntry& entry, const Region& region,
                              const Region* full_region, SketchData* out);
// Daemon: stores window_consumed = w (the daemon's own count, which only
// grows; buffer w % 2 is free again, and so is the other one's older
// window).
void ConsumeWindow(LayerEntry* entry, int64_t w);

// ---- telemetry ---------------------------------------------------------

// Client (one writer).
void WriteTelemetry(LayerEntry* entry, const LayerCounters& counters);
// Daemon: a copy of the counters; false when torn on every try. The copy is
// the rank's word: check it with CountersSince (shm/rank_counters.h).
bool ReadTelemetry(const LayerEntry& entry, LayerCounters* counters);
// The same for the header's per-step totals.
void WriteStepCounters(ControlHeader* header, const StepCounters& totals);
bool ReadStepCounters(const ControlHeader& header, StepCounters* totals);

}  // namespace gift::shm

#endif  // GIFT_SHM_PROTOCOL_H_
