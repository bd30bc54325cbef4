// The shared-memory layout between giftd and one local rank (DESIGN §5).
//
// Per registered rank the daemon creates:
//  * a control block in POSIX shared memory (host memory, always): a
//    ControlHeader followed by one LayerEntry per GIFT-candidate layer the
//    rank declared at Register (2-D weights, in the rank's order);
//  * per layer a data region (RegionDesc in its LayerEntry): two factor
//    slots, the initial test matrix Ω₀ and two sketch buffers — host POSIX
//    shm for CPU ranks, device memory exported by CUDA IPC for GPU ranks;
//  * per layer, only once its transform is `full`, a second data region
//    with two A accumulators and two dense (T, T⁻¹) slots.
// Offsets inside the data regions are computed by LayerRegionLayout /
// FullRegionLayout from (d_in, r_cap, k_cap), identically on both sides.
//
// Who writes what (every other field is read-only to the other side):
//  * daemon: everything at creation; the plan fields under
//    ControlHeader::plan_lock; factor slots under FactorSlot::lock;
//    LayerEntry::window_consumed; full_region when it is (re)created.
//  * client: heartbeat/step/epoch fields of the header; the sketch buffers
//    of the open window and SketchMeta, then window_closed (release); the
//    telemetry counters under LayerEntry::tele_lock.
//
// Protocols:
//  * Seqlock (shm/seqlock.h): a writer makes `seq` odd, writes, makes it
//    even; a reader copies, and retries when seq was odd or changed. Readers
//    never block the writer; nobody waits on the other process.
//  * Factor slots, double buffered: the daemon always writes the slot that
//    does not hold the newest version, so a reader copying the newest one is
//    never torn; the client copies a slot into its own memory.
//  * Sketch windows, double buffered: window w accumulates into sketch
//    buffer w % 2. At the window's end the client fills sketch_meta[w % 2],
//    then stores window_closed = w (release). The daemon reads the buffer
//    and stores window_consumed = w. The client starts window w + 2 in the
//    same buffer only if window_consumed >= w (more exactly: >= the last
//    window closed in that buffer, sketch_meta[w % 2].window, which is
//    older than w when w itself was skipped); otherwise it skips sketching
//    for that window (rows = 0) rather than wait. The daemon reads only the
//    newest closed window; consuming it frees both buffers.
//
// Every field is fixed-size and address-free (lock-free std::atomic of 32
// and 64 bits); the layout version changes whenever any struct changes, and
// Register refuses a rank whose kLayoutVersion differs.
#ifndef GIFT_SHM_LAYOUT_H_
#define GIFT_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/beta_grid.h"

namespace gift::shm {

inline constexpr uint64_t kMagic = 0x3130'4D48'5354'4947ULL;  // "GIFTSHM01"
// Bump on any change (2: audit counters and interval; 3: β auto; 4: the plan's
// format is a kernels::WireFormat code, 0..3, no longer 0/1 FP8 only; 5: probe
// and accepted factor versions; 6: each layer's sketch oversampling p; 7: the
// plan's sketch stride and each layer's sketch period; 8: the peer plan's
// window owners, so a daemon of 7 that would send its windows to
// members[i % size] is refused; 9: a peer factor sends only Ω's columns
// before Ω₀'s, PeerFactor.omega_cols, which a daemon of 8 would refuse; 10:
// nor those that are U's, PeerFactor.omega_u_cols, which a daemon of 9 would
// refuse on a length check; 11: LayerCounters::version_probes).
inline constexpr uint32_t kLayoutVersion = 11;

// Sketch oversampling p (DESIGN §2): a window sketches k = r + p columns.
// giftd's sketch_oversample sets it (this default), at most kMaxOversample.
inline constexpr int kDefaultOversample = 16;
inline constexpr int kMaxOversample = 1024;
// Largest d_in of a layer (2^24): a full region's d_in × d_in floats and
// every offset of LayerRegionLayout then stay far inside 64 bits. The
// daemon's own limit (max_layer_d_in) is lower.
inline constexpr int64_t kMaxDIn = int64_t{1} << 24;
inline constexpr int kNameBytes = 128;
inline constexpr int kIdBytes = 48;
// cudaIpcMemHandle_t / cudaIpcEventHandle_t are 64 bytes.
inline constexpr int kIpcHandleBytes = 64;

using SeqWord = std::atomic<uint64_t>;
static_assert(SeqWord::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

enum class RegionKind : uint32_t { kNone = 0, kPosix = 1, kCudaIpc = 2 };

// Where a data region lives and how the other process maps it.
struct RegionDesc {
  uint32_t kind;        // RegionKind
  uint32_t generation;  // bumped whenever the region is re-created
  uint64_t bytes;
  int32_t device;  // kCudaIpc: the CUDA device
  uint32_t reserved;
  char name[kNameBytes];             // POSIX shm name ("/gift-...")
  uint8_t ipc_mem[kIpcHandleBytes];  // kCudaIpc: cudaIpcMemHandle_t
  // kCudaIpc: interprocess event the client records on its stream after
  // the sketch writes of a window; the daemon's stream waits on it.
  uint8_t ipc_event[kIpcHandleBytes];
};

// Bounds (seconds) of the client's collective-duration histogram.
inline constexpr int kDurationBuckets = 16;
inline constexpr double DurationBound(int i) {  // 50 µs · 2^i
  double b = 50e-6;
  for (int k = 0; k < i; ++k) b *= 2;
  return b;
}

struct StepCounters {
  int64_t steps;
  double collective_seconds;
  double transform_seconds;
  int64_t bytes_euclid;
  int64_t bytes_gift;
  int64_t bytes_control;
  int64_t bytes_fp32_equivalent;
  int64_t nonfinite_layers;
  int64_t audit_steps;   // steps that were audit steps
  int64_t bytes_audit;   // payload bytes of the audits' FP32 allreduces
  double audit_seconds;  // wall time of the audits and their running sums
  // Steps whose allreduce took <= DurationBound(i) (per bucket, not
  // cumulative; the last bucket also takes everything above).
  int64_t duration_buckets[kDurationBuckets];
};

// Plan of the rank's job as the daemon publishes it (header fields below,
// under plan_lock, plus the per-layer plan fields of LayerEntry).
struct ControlHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t n_layers;
  uint64_t total_bytes;  // the whole control block
  char daemon_instance[kIdBytes];
  char session_id[kIdBytes];
  int32_t rank;
  int32_t world_size;

  // ---- client → daemon
  std::atomic<int64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the last beat
  std::atomic<int64_t> step;          // steps completed by the rank
  std::atomic<int64_t> epoch_in_use;  // plan epoch agreed in the last step
  // Step at which epoch_in_use was first used (for "same agreed step").
  std::atomic<int64_t> epoch_since_step;
  std::atomic<int64_t> detached;  // 1 once the client deregistered
  // Per-step totals (cumulative), under tele_lock: wall time of the
  // gradient allreduce and of the GIFT transforms in it, payload bytes by
  // path, and the bytes an FP32 ring allreduce would have sent.
  SeqWord tele_lock;
  StepCounters totals;

  // ---- daemon → client, under plan_lock
  SeqWord plan_lock;
  int64_t plan_epoch;        // >= 1; 0 until the first plan
  int32_t refresh_interval;  // K, steps per sketch window
  int32_t probe_interval;    // M, steps between probe steps
  int64_t staleness_limit;   // steps a factor may age before Euclidean
  uint64_t omega_seed;       // Ω₀ seed of the job
  int32_t sketch_rows;       // rows sampled per layer and step
  int32_t audit_interval;    // steps between audit steps; 0 = none
  // A window's sketch steps: the steps whose completed-step count before
  // them is a multiple of it (>= 1; 1 = every step).
  int32_t sketch_stride;
  // ---- daemon → client, not under plan_lock
  // Advanced by the daemon at every poll of this block (wraps; only
  // compared): a rank that sees it move since its last beat knows the
  // daemon is alive and still serves its session, and skips the Heartbeat
  // RPC (DESIGN §5: the block carries the heartbeats both ways). Was
  // a zero `reserved` word: an older daemon never moves it (its ranks beat
  // over RPC every time), an older client never reads it.
  std::atomic<int32_t> daemon_beat;
};

struct FactorSlot {
  SeqWord lock;
  int64_t version;  // -1: empty
  int32_t kind;     // 0 low-rank (data region), 1 full (full region)
  int32_t r;        // columns used (<= r_cap)
  double sigma2;
  double beta;
  int64_t window;  // the sketch window it was computed from
  // Low-rank: tr A (per sampled row) the floor was formed from; with the
  // unclipped λ in the data region it lets a client rebuild c, c_inv for
  // another β (0: not given).
  double trace_mean;
  int32_t beta_auto;  // 1: probe the β grid with this factor
  int32_t reserved;
};

// What the client wrote into a sketch buffer (filled before window_closed).
struct SketchMeta {
  int64_t window;
  int64_t omega_version;  // factor version whose Ω was used; -1: Ω₀
  int32_t k;              // columns sketched: 1 <= k <= k_cap
  int32_t full;           // 1: the full region's A accumulator was fed too
  int64_t start_step;
  int64_t end_step;  // exclusive
};

// Cumulative since registration; the daemon differences snapshots.
struct LayerCounters {
  int64_t steps;       // steps reported
  int64_t gift_steps;  // steps on the GIFT path
  int64_t n;           // quantized elements (worker side)
  int64_t upper;
  int64_t lower;
  int64_t nonfinite;  // non-finite inputs
  double err_sq;      // Σ(x̂ − x)²
  double x_sq;        // Σx²
  double xhat_x;      // Σx̂x
  double rel_l2_sum;  // Σ per-step local RelL2
  double cosine_sum;  // Σ per-step local cosine
  int64_t probes;
  double probe_euclid_sum;  // Σ probe RelL2, Euclidean path
  double probe_gift_sum;    // Σ probe RelL2, GIFT path
  int64_t factor_version;   // last version used (-1: none)
  int64_t bytes_sent;       // payload bytes of this layer
  // Audit steps, by the path the layer took on them ([0] Euclidean, [1]
  // GIFT): how many, Σ audited RelL2 and cosine of the applied gradient
  // against the FP32 average; how many had a drift figure, Σ of it.
  int64_t audits[2];
  double audit_rel_l2_sum[2];
  double audit_cosine_sum[2];
  int64_t drift_audits[2];
  double audit_drift_sum[2];
  // β auto (kBetaGrid): probe steps that probed the grid, and per grid value
  // Σ the GIFT-path round-trip RelL2 with the factor rebuilt for that β.
  int64_t beta_probes;
  double probe_beta_sum[kBetaGrid];
  // The factor version the last probe used (-1: none yet). In a difference
  // (rank_counters.h): kMixedProbeVersion when the probes in it may have
  // used more than one version.
  int64_t probe_version;
  // Probes this rank made with probe_version, from its first probe of it (0:
  // none yet). Not differenced: the daemon counts a version's probe steps by
  // it, so a step whose probes reach the daemon in two polls (ranks or nodes
  // polled on either side of it) counts once.
  int64_t version_probes;
};

// LayerCounters::probe_version of a difference whose probes mixed versions.
inline constexpr int64_t kMixedProbeVersion = -2;

struct LayerEntry {
  char name[kNameBytes];
  int64_t d_out;
  int64_t d_in;
  int32_t r_cap;       // factor slot columns
  int32_t k_cap;       // Ω columns = min(d_in, r_cap + oversample)
  int32_t oversample;  // p: a window sketches min(k_cap, r + p) columns
  int32_t reserved;

  // ---- daemon → client, under ControlHeader::plan_lock
  uint8_t path;       // client::LayerPath
  uint8_t transform;  // client::GiftTransform
  uint8_t format;     // kernels::WireFormat::code(), 0..3
  uint8_t candidate;  // 1: the daemon wants sketches (and probes) of it
  int32_t rank;       // r of the next factor
  // Windows per sketched window (>= 1): the layer is sketched in the
  // windows w (the completed-step count at their start / K) with
  // w % sketch_period == sketch_period - 1; 1 = every window.
  int32_t sketch_period;
  int32_t reserved_plan;
  // Bumped by the daemon to ask for an early window close (TriggerRefresh,
  // decaying gain): ranks close the layer's open window in the first step
  // whose agreed plan epoch carries a higher value than the window's.
  int64_t refresh_seq;
  // The factor version the GIFT path may use (-1: none): probation.
  int64_t accepted_version;

  RegionDesc region;       // LayerRegionLayout
  RegionDesc full_region;  // FullRegionLayout; kind kNone until needed
  FactorSlot slots[2];

  // ---- sketch windows
  std::atomic<int64_t> window_closed;    // client; -1: none yet
  std::atomic<int64_t> window_consumed;  // daemon; -1: none yet
  SketchMeta sketch_meta[2];

  // ---- telemetry, client, under tele_lock
  SeqWord tele_lock;
  LayerCounters tele;
};

static_assert(std::is_standard_layout_v<ControlHeader>);
static_assert(std::is_standard_layout_v<LayerEntry>);

// Bytes of a control block with n layers (header + entries, 64-aligned).
constexpr uint64_t ControlBlockBytes(uint32_t n_layers) {
  uint64_t header = (sizeof(ControlHeader) + 63) / 64 * 64;
  uint64_t entry = (sizeof(LayerEntry) + 63) / 64 * 64;
  return header + entry * n_layers;
}
constexpr uint64_t LayerEntryOffset(uint32_t i) {
  return (sizeof(ControlHeader) + 63) / 64 * 64 +
         (sizeof(LayerEntry) + 63) / 64 * 64 * uint64_t{i};
}

// Byte offsets inside a layer's data region (every array 256-byte aligned,
// floats unless noted). A POSIX region comes zeroed (ftruncate), a CUDA IPC
// one is zeroed at creation.
struct LayerRegionLayout {
  struct Slot {
    // Room for d_in × r_cap; a factor of rank r stores U compactly,
    // d_in × r row-major (row stride r).
    uint64_t u;
    uint64_t c;       // r_cap: T = I + U diag(c) Uᵀ
    uint64_t c_inv;   // r_cap
    uint64_t lambda;  // r_cap: the top-r eigenvalues of A, unclipped (>= 0)
    uint64_t omega;   // d_in × k_cap: Ω for the next windows
  };
  struct Sketch {
    // Room for d_in × k_cap; a window that sketched k columns
    // (SketchMeta::k, protocol.h SketchColumns) stores Y compactly,
    // d_in × k row-major (row stride k).
    uint64_t y;
    uint64_t trace;  // double
    uint64_t count;  // int64
  };
  Slot slot[2];
  uint64_t omega0;  // d_in × k_cap: Ω₀
  Sketch sketch[2];
  uint64_t bytes;

  static LayerRegionLayout Compute(int64_t d_in, int32_t r_cap, int32_t k_cap);
};

// Byte offsets inside a layer's full region (the `full` transform).
struct FullRegionLayout {
  struct Acc {
    uint64_t a;      // d_in × d_in: Σ aᵀa
    uint64_t trace;  // double
    uint64_t count;  // int64
  };
  struct Slot {
    uint64_t t;      // d_in × d_in
    uint64_t t_inv;  // d_in × d_in
  };
  Acc acc[2];
  Slot slot[2];
  uint64_t bytes;

  static FullRegionLayout Compute(int64_t d_in);
};

inline ControlHeader* Header(void* block) {
  return static_cast<ControlHeader*>(block);
}
inline LayerEntry* Entry(void* block, uint32_t i) {
  return reinterpret_cast<LayerEntry*>(static_cast<char*>(block) +
                                       LayerEntryOffset(i));
}

}  // namespace gift::shm

#endif  // GIFT_SHM_LAYOUT_H_
