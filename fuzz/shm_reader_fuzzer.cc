// libFuzzer target: what giftd reads from the shared memory a rank writes
// (shm/protocol.h, shm/rank_counters.h). Once, the target plays the daemon
// and lays out a real session in POSIX shared memory — a control block with
// two layers (one low-rank, one with a full region), Ω₀, a plan, a factor
// in each layer's slots — and plays the rank once: telemetry written and
// sketch window 0 closed. Each input then starts from that snapshot and
// overwrites it as a rank could (any byte of the control block and of the
// data regions: chosen protocol fields with boundary values, or raw bytes),
// and the daemon-side readers run on it with the daemon's own geometry and
// window count, in the order of daemon/core/telemetry.cc and
// factor_pipeline.cc:
//   ReadTelemetry + CountersSince, ReadStepCounters + CountersSince,
//   ReadWindow + CheckSketchData, ConsumeWindow, PublishFactor, PublishPlan;
// then the client-side checks (CheckControlBlock, EntryGeometry) and, only
// on a block they accept, the client readers.
// What it checks beyond "no crash, no sanitizer report": an accepted window
// has exactly the daemon's sizes and passes CheckSketchData only when every
// value is finite and the count in range.
//
// Input format: a FuzzedDataProvider stream of operations (below); any
// bytes are a valid input.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "shm/layout.h"
#include "shm/protocol.h"
#include "shm/rank_counters.h"
#include "shm/region.h"

namespace {

using namespace gift::shm;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_shm_reader: invariant violated: %s\n", what);
    std::abort();
  }
}
void Must(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_shm_reader: setup failed: %s: %s\n", what,
                 s.ToString().c_str());
    std::abort();
  }
}

constexpr int kLayers = 2;
// Layer 0: low-rank only; layer 1: with a full region.
const LayerDecl kDecls[kLayers] = {{"fc1", 4, 8, 4}, {"fc2", 3, 6, 2}};

struct Session {
  std::unique_ptr<Region> control;
  std::unique_ptr<Region> data[kLayers];
  std::unique_ptr<Region> full;  // layer 1's
  LayerGeometry geometry[kLayers];
  // The regions' bytes after setup; every input starts from them.
  std::vector<char> pristine[kLayers + 2];

  Region* region(int i) {
    return i == 0         ? control.get()
           : i <= kLayers ? data[i - 1].get()
                          : full.get();
  }
  void Snapshot() {
    for (int i = 0; i < kLayers + 2; ++i) {
      const char* p = static_cast<const char*>(region(i)->data());
      pristine[i].assign(p, p + region(i)->bytes());
    }
  }
  void Restore() {
    for (int i = 0; i < kLayers + 2; ++i) {
      std::memcpy(region(i)->data(), pristine[i].data(), pristine[i].size());
    }
  }
  void* block() { return control->data(); }
  LayerEntry* entry(int i) { return Entry(block(), i); }
};

std::unique_ptr<Region> Create(const std::string& name, uint64_t bytes) {
  auto r = CreateRegion(RegionKind::kPosix, name, bytes, 0);
  Must(r.status(), "CreateRegion");
  // The mapping stays; the name goes now, so nothing is left in /dev/shm
  // when a crash ends the process.
  Must(UnlinkPosix(name), "UnlinkPosix");
  return *std::move(r);
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 7 + 1);
  return v;
}

FactorData Factor(const LayerGeometry& g, int64_t version, int kind) {
  FactorData f;
  f.version = version;
  f.kind = kind;
  f.r = g.r_cap;
  f.sigma2 = 1;
  f.beta = 1;
  f.window = 0;
  f.u = Ramp(g.d_in * f.r, 0.01f);
  f.c = Ramp(f.r, 0.5f);
  f.c_inv = Ramp(f.r, 2.0f);
  f.lambda = Ramp(f.r, 1.0f);
  f.omega = Ramp(g.d_in * g.k_cap, 0.1f);
  if (kind == 1) {
    f.t = Ramp(g.d_in * g.d_in, 0.1f);
    f.t_inv = Ramp(g.d_in * g.d_in, 0.2f);
  }
  return f;
}

PlanView Plan(int64_t epoch) {
  PlanView p;
  p.plan_epoch = epoch;
  p.refresh_interval = 50;
  p.probe_interval = 10;
  p.staleness_limit = 200;
  p.omega_seed = 7;
  p.sketch_rows = 64;
  p.layers.resize(kLayers);
  for (int i = 0; i < kLayers; ++i) {
    p.layers[i].path = 1;
    p.layers[i].candidate = 1;
    p.layers[i].rank = kDecls[i].r_cap;
    p.layers[i].refresh_seq = epoch;
  }
  return p;
}

Session* Setup() {
  auto* s = new Session;
  const std::string prefix = "/gift-fuzz" + std::to_string(::getpid());
  std::vector<LayerDecl> decls(kDecls, kDecls + kLayers);
  s->control = Create(prefix + "-c", ControlBlockBytes(kLayers));
  InitControlBlock(s->block(), "fuzz-daemon", "fuzz-session", 0, 1, decls);
  for (int i = 0; i < kLayers; ++i) {
    const LayerGeometry g = GeometryOf(kDecls[i]);
    s->geometry[i] = g;
    s->data[i] =
        Create(prefix + "-L" + std::to_string(i),
               LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap).bytes);
    s->entry(i)->region = s->data[i]->desc();
    Must(WriteOmega0(g, s->data[i].get(), Ramp(g.d_in * g.k_cap, 0.1f)),
         "WriteOmega0");
  }
  s->full = Create(prefix + "-F1",
                   FullRegionLayout::Compute(s->geometry[1].d_in).bytes);
  s->entry(1)->full_region = s->full->desc();
  PublishPlan(s->block(), Plan(1));
  Must(PublishFactor(s->entry(0), s->geometry[0], s->data[0].get(), nullptr,
                     Factor(s->geometry[0], 1, 0)),
       "PublishFactor 0");
  Must(PublishFactor(s->entry(1), s->geometry[1], s->data[1].get(),
                     s->full.get(), Factor(s->geometry[1], 1, 1)),
       "PublishFactor 1");

  // The rank's side: telemetry of one step and window 0 closed.
  StepCounters totals{};
  totals.steps = 1;
  totals.collective_seconds = 0.01;
  totals.bytes_euclid = 100;
  totals.bytes_fp32_equivalent = 400;
  totals.duration_buckets[3] = 1;
  WriteStepCounters(Header(s->block()), totals);
  Header(s->block())->step.store(1);
  for (int i = 0; i < kLayers; ++i) {
    LayerEntry* e = s->entry(i);
    const LayerGeometry& g = s->geometry[i];
    LayerCounters c{};
    c.steps = 1;
    c.n = 100;
    c.upper = 1;
    c.err_sq = 0.01;
    c.x_sq = 1;
    c.xhat_x = 0.99;
    c.factor_version = 1;
    WriteTelemetry(e, c);
    const bool full = i == 1;
    auto began = BeginWindow(e, s->data[i].get(),
                             full ? s->full.get() : nullptr, 0, full);
    Must(began.status(), "BeginWindow");
    const LayerRegionLayout l =
        LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap);
    const std::vector<float> y = Ramp(g.d_in * g.k_cap, 1.0f);
    const double trace = 3;
    const int64_t count = 10;
    Must(s->data[i]->Write(l.sketch[0].y, y.data(), y.size() * 4), "y");
    Must(s->data[i]->Write(l.sketch[0].trace, &trace, 8), "trace");
    Must(s->data[i]->Write(l.sketch[0].count, &count, 8), "count");
    if (full) {
      const FullRegionLayout fl = FullRegionLayout::Compute(g.d_in);
      const std::vector<float> a = Ramp(g.d_in * g.d_in, 1.0f);
      Must(s->full->Write(fl.acc[0].a, a.data(), a.size() * 4), "a");
    }
    SketchMeta meta{};
    meta.window = 0;
    meta.omega_version = -1;
    // Layer 0's window narrower than its buffer (a rank below r_cap).
    meta.k = i == 0 ? std::max(1, g.k_cap / 2) : g.k_cap;
    meta.full = full ? 1 : 0;
    meta.start_step = 0;
    meta.end_step = 1;
    CloseWindow(e, meta);
  }
  s->Snapshot();
  return s;
}

// A field a rank can write: region (0 control block, 1.. data regions, last
// the full region), offset, size in bytes.
struct Field {
  int region;
  uint64_t offset;
  int size;
};

std::vector<Field> Fields(Session& s) {
  std::vector<Field> f;
  auto header = [&](size_t off, int size) { f.push_back({0, off, size}); };
  header(offsetof(ControlHeader, magic), 8);
  header(offsetof(ControlHeader, layout_version), 4);
  header(offsetof(ControlHeader, n_layers), 4);
  header(offsetof(ControlHeader, total_bytes), 8);
  header(offsetof(ControlHeader, step), 8);
  header(offsetof(ControlHeader, detached), 8);
  header(offsetof(ControlHeader, tele_lock), 8);
  header(offsetof(ControlHeader, totals) + offsetof(StepCounters, steps), 8);
  header(offsetof(ControlHeader, totals) +
             offsetof(StepCounters, collective_seconds),
         8);
  header(offsetof(ControlHeader, totals) + offsetof(StepCounters, bytes_euclid),
         8);
  header(offsetof(ControlHeader, totals) +
             offsetof(StepCounters, bytes_fp32_equivalent),
         8);
  header(offsetof(ControlHeader, totals) +
             offsetof(StepCounters, duration_buckets),
         8);
  header(offsetof(ControlHeader, plan_lock), 8);
  for (int i = 0; i < kLayers; ++i) {
    const uint64_t e = LayerEntryOffset(i);
    auto entry = [&](size_t off, int size) { f.push_back({0, e + off, size}); };
    entry(offsetof(LayerEntry, d_out), 8);
    entry(offsetof(LayerEntry, d_in), 8);
    entry(offsetof(LayerEntry, r_cap), 4);
    entry(offsetof(LayerEntry, k_cap), 4);
    entry(offsetof(LayerEntry, name) + kNameBytes - 1, 1);
    for (int j = 0; j < 2; ++j) {
      const size_t slot = offsetof(LayerEntry, slots) + j * sizeof(FactorSlot);
      entry(slot + offsetof(FactorSlot, lock), 8);
      entry(slot + offsetof(FactorSlot, version), 8);
      entry(slot + offsetof(FactorSlot, kind), 4);
      entry(slot + offsetof(FactorSlot, r), 4);
      const size_t meta =
          offsetof(LayerEntry, sketch_meta) + j * sizeof(SketchMeta);
      entry(meta + offsetof(SketchMeta, window), 8);
      entry(meta + offsetof(SketchMeta, omega_version), 8);
      entry(meta + offsetof(SketchMeta, k), 4);
      entry(meta + offsetof(SketchMeta, full), 4);
      entry(meta + offsetof(SketchMeta, start_step), 8);
      entry(meta + offsetof(SketchMeta, end_step), 8);
    }
    entry(offsetof(LayerEntry, window_closed), 8);
    entry(offsetof(LayerEntry, window_consumed), 8);
    entry(offsetof(LayerEntry, tele_lock), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, steps), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, gift_steps), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, n), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, upper), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, err_sq), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, probes), 8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, probe_version),
          8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, version_probes),
          8);
    entry(offsetof(LayerEntry, tele) + offsetof(LayerCounters, factor_version),
          8);
    entry(offsetof(LayerEntry, full_region) + offsetof(RegionDesc, bytes), 8);
    const LayerGeometry& g = s.geometry[i];
    const LayerRegionLayout l =
        LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap);
    for (int b = 0; b < 2; ++b) {
      f.push_back({1 + i, l.sketch[b].y, 4});
      f.push_back({1 + i, l.sketch[b].trace, 8});
      f.push_back({1 + i, l.sketch[b].count, 8});
    }
  }
  const FullRegionLayout fl = FullRegionLayout::Compute(s.geometry[1].d_in);
  for (int b = 0; b < 2; ++b) f.push_back({kLayers + 1, fl.acc[b].a, 4});
  return f;
}

// Values at the edges of what the checks allow.
int64_t Interesting(FuzzedDataProvider& in) {
  static constexpr int64_t kValues[] = {-1,
                                        0,
                                        1,
                                        2,
                                        3,
                                        7,
                                        8,
                                        16,
                                        17,
                                        24,
                                        255,
                                        4096,
                                        kMaxDIn,
                                        kMaxDIn + 1,
                                        kMaxSketchCount,
                                        kMaxSketchCount + 1,
                                        kMaxStep - 1,
                                        kMaxStep,
                                        kMaxStep + 1,
                                        std::numeric_limits<int32_t>::max(),
                                        std::numeric_limits<int32_t>::min(),
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min(),
                                        0x7ff0000000000000,  // +inf as a double
                                        0x7ff8000000000000,  // NaN
                                        0x7f800000,          // +inf as a float
                                        static_cast<int64_t>(kMagic)};
  return kValues[in.ConsumeIntegralInRange<size_t>(
      0, sizeof(kValues) / sizeof(kValues[0]) - 1)];
}

void Mutate(Session& s, const std::vector<Field>& fields,
            FuzzedDataProvider& in) {
  for (int ops = 0; ops < 64 && in.remaining_bytes() > 0; ++ops) {
    switch (in.ConsumeIntegralInRange(0, 2)) {
      case 0:
      case 1: {  // a protocol field
        const Field& f =
            fields[in.ConsumeIntegralInRange<size_t>(0, fields.size() - 1)];
        const int64_t v =
            in.ConsumeBool() ? Interesting(in) : in.ConsumeIntegral<int64_t>();
        Region* r = s.region(f.region);
        if (f.offset + f.size <= r->bytes()) {
          std::memcpy(static_cast<char*>(r->data()) + f.offset, &v, f.size);
        }
        break;
      }
      default: {  // raw bytes anywhere
        Region* r = s.region(in.ConsumeIntegralInRange(0, kLayers + 1));
        const uint64_t off =
            in.ConsumeIntegralInRange<uint64_t>(0, r->bytes() - 1);
        const size_t n = in.ConsumeIntegralInRange<size_t>(1, 64);
        const std::string bytes = in.ConsumeBytesAsString(n);
        const size_t fit = std::min<uint64_t>(bytes.size(), r->bytes() - off);
        std::memcpy(static_cast<char*>(r->data()) + off, bytes.data(), fit);
        break;
      }
    }
  }
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

// The daemon's poll of one session (daemon/core/telemetry.cc,
// factor_pipeline.cc), on what the rank left.
void DaemonReads(Session& s, const int64_t consumed_in[kLayers]) {
  StepCounters totals;
  if (ReadStepCounters(*Header(s.block()), &totals)) {
    (void)CountersSince(StepCounters{}, totals);
    (void)CountersSince(totals, totals);
  }
  for (int i = 0; i < kLayers; ++i) {
    LayerEntry* e = s.entry(i);
    const LayerGeometry& g = s.geometry[i];
    Region* full = i == 1 ? s.full.get() : nullptr;
    LayerCounters now;
    if (ReadTelemetry(*e, &now)) {
      LayerCounters zero{};
      zero.factor_version = -1;
      absl::StatusOr<LayerCounters> d = CountersSince(zero, now);
      if (d.ok()) (void)CountersSince(now, now);
    }
    // The daemon's own count of consumed windows, and the windows it would
    // read after its guard (FactorPipeline::TakeWindows) — and two it would
    // not, which ReadWindow must refuse by itself.
    const int64_t consumed = consumed_in[i];
    const int64_t closed = e->window_closed.load(std::memory_order_acquire);
    const bool guarded =
        closed >= consumed && closed <= consumed + 2 && closed <= kMaxStep;
    std::vector<int64_t> windows = {closed, consumed, consumed + 1, -1};
    if (closed > std::numeric_limits<int64_t>::min()) {
      windows.push_back(closed - 1);
    }
    for (const int64_t w : windows) {
      SketchData data;
      absl::Status st = ReadWindow(*e, g, *s.data[i], full, consumed, w, &data);
      if (!st.ok()) continue;
      Check(w >= 0 && w > consumed && w <= closed,
            "ReadWindow returned a window that is not closed and unconsumed");
      Check(data.meta.window == w, "ReadWindow returned another window");
      Check(data.meta.k >= 1 && data.meta.k <= g.k_cap,
            "accepted window has k outside 1..k_cap");
      Check(static_cast<int64_t>(data.y.size()) == g.d_in * data.meta.k,
            "accepted window has a y of the wrong size");
      Check(data.a.size() ==
                (data.meta.full ? static_cast<size_t>(g.d_in * g.d_in) : 0),
            "accepted window has an A of the wrong size");
      if (CheckSketchData(data).ok()) {
        Check(AllFinite(data.y) && AllFinite(data.a) &&
                  std::isfinite(data.trace) && data.trace >= 0 &&
                  data.count >= 0 && data.count <= kMaxSketchCount,
              "CheckSketchData accepted non-finite or out-of-range values");
      }
    }
    if (guarded && closed > consumed) ConsumeWindow(e, closed);
    // The daemon publishes a newer factor whatever the slots say.
    (void)PublishFactor(
        e, g, s.data[i].get(), full,
        Factor(g, std::numeric_limits<int64_t>::max() / 2, i == 1 ? 1 : 0));
  }
  PublishPlan(s.block(), Plan(2));
}

// The rank's own readers, on a block the client's checks accept.
void ClientReads(Session& s) {
  if (!CheckControlBlock(s.block(), s.control->bytes()).ok()) return;
  PlanView plan;
  (void)ReadPlan(s.block(), &plan);
  const uint32_t n = Header(s.block())->n_layers;
  for (uint32_t i = 0; i < n && i < kLayers; ++i) {
    LayerEntry* e = s.entry(i);
    absl::StatusOr<LayerGeometry> g = EntryGeometry(*e);
    Check(g.ok(), "CheckControlBlock accepted an entry EntryGeometry refuses");
    Check(g->d_in >= 1 && g->d_in <= kMaxDIn && g->r_cap >= 1 &&
              g->r_cap <= g->d_in && g->k_cap >= 1 && g->k_cap <= g->d_in,
          "EntryGeometry accepted a malformed geometry");
    Region* full = i == 1 ? s.full.get() : nullptr;
    (void)NewestFactorVersion(*e);
    FactorData f;
    (void)ReadNewestFactor(*e, *s.data[i], full, &f);
    std::vector<float> omega;
    (void)ReadOmega0(*e, *s.data[i], &omega);
    SketchData d;
    (void)ReadClosedWindow(*e, *s.data[i], full, &d);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Session* session = Setup();
  static const std::vector<Field> fields = Fields(*session);
  Session& s = *session;
  s.Restore();
  FuzzedDataProvider in(data, size);
  int64_t consumed[kLayers];
  for (int64_t& c : consumed) {
    c = in.ConsumeBool() ? -1
                         : in.ConsumeIntegralInRange<int64_t>(-1, kMaxStep);
  }
  Mutate(s, fields, in);
  DaemonReads(s, consumed);
  ClientReads(s);
  return 0;
}
