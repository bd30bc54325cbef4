#include "shm/protocol.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "shm/seqlock.h"

namespace gift::shm {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<Region> MustCreate(const std::string& tag, uint64_t bytes) {
  absl::StatusOr<std::unique_ptr<Region>> r =
      CreateRegion(RegionKind::kPosix,
                   absl::StrCat("/gift-ptest-", getpid(), "-", tag), bytes, 0);
  EXPECT_OK(r);
  return r.ok() ? std::move(*r) : nullptr;
}

// Exact in float for v < 2^13: every array element says which version (and
// which element) it belongs to, so a torn copy cannot pass CheckFactor.
float Value(int64_t v, int64_t i) {
  return static_cast<float>(v) + static_cast<float>(i % 512) / 512.0f;
}
std::vector<float> Fill(int64_t v, int64_t n, int64_t salt) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Value(v, i + salt);
  return out;
}

// A low-rank factor whose rank also varies with the version.
FactorData MakeFactor(const LayerEntry& e, int64_t v) {
  FactorData f;
  f.version = v;
  f.r = 1 + static_cast<int32_t>(v % e.r_cap);
  f.sigma2 = 0.5 * v;
  f.beta = v;
  f.window = v - 1;
  f.u = Fill(v, e.d_in * f.r, 0);
  f.c = Fill(v, f.r, 1);
  f.c_inv = Fill(v, f.r, 2);
  f.lambda = Fill(v, f.r, 3);
  f.omega = Fill(v, e.d_in * e.k_cap, 4);
  return f;
}

// Empty when f is exactly what MakeFactor(e, f.version) made.
std::string Inconsistency(const LayerEntry& e, const FactorData& f) {
  FactorData want = MakeFactor(e, f.version);
  if (f.r != want.r || f.sigma2 != want.sigma2 || f.beta != want.beta ||
      f.window != want.window || f.kind != 0) {
    return absl::StrCat("fields of version ", f.version);
  }
  if (f.u != want.u) return absl::StrCat("U of version ", f.version);
  if (f.c != want.c || f.c_inv != want.c_inv || f.lambda != want.lambda) {
    return absl::StrCat("coefficients of version ", f.version);
  }
  if (f.omega != want.omega) return absl::StrCat("omega of ", f.version);
  return "";
}

class ProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layers_ = {{"blocks.0.fc1", 64, 40, 8},
               {"blocks.0.fc2", 40, 20, 20},
               {"blocks.1.fc2", 256, 1024, 32}};
    block_ = MustCreate("ctl", ControlBlockBytes(3));
    ASSERT_NE(block_, nullptr);
    InitControlBlock(block_->data(), "daemon-a", "session-b", 3, 8, layers_);
    e_ = Entry(block_->data(), 0);
    data_ = MustCreate(
        "data",
        LayerRegionLayout::Compute(e_->d_in, e_->r_cap, e_->k_cap).bytes);
    full_ = MustCreate("full", FullRegionLayout::Compute(e_->d_in).bytes);
    ASSERT_NE(data_, nullptr);
    ASSERT_NE(full_, nullptr);
  }

  std::vector<LayerDecl> layers_;
  std::unique_ptr<Region> block_, data_, full_;
  LayerEntry* e_ = nullptr;
};

TEST_F(ProtocolTest, InitFillsHeaderAndLayers) {
  ASSERT_OK(CheckControlBlock(block_->data(), block_->bytes()));
  const ControlHeader* h = Header(block_->data());
  EXPECT_EQ(h->n_layers, 3u);
  EXPECT_STREQ(h->daemon_instance, "daemon-a");
  EXPECT_STREQ(h->session_id, "session-b");
  EXPECT_EQ(h->rank, 3);
  EXPECT_EQ(h->world_size, 8);
  EXPECT_STREQ(e_->name, "blocks.0.fc1");
  EXPECT_EQ(e_->k_cap, 24);                        // r_cap + oversampling
  EXPECT_EQ(Entry(block_->data(), 1)->k_cap, 20);  // capped by d_in
  EXPECT_EQ(NewestFactorVersion(*e_), -1);
  EXPECT_EQ(e_->window_closed.load(), -1);
  EXPECT_EQ(e_->window_consumed.load(), -1);
  FactorData f;
  EXPECT_THAT(ReadNewestFactor(*e_, *data_, full_.get(), &f),
              StatusIs(absl::StatusCode::kNotFound));
}

// giftd's sketch_oversample reaches each entry: k_cap = min(d_in, r_cap +
// p) and the window width SketchColumns takes p from the entry.
TEST(ProtocolOversampleTest, EachEntryCarriesItsOversampling) {
  const std::vector<LayerDecl> layers = {
      {"a", 4, 100, 32, 8}, {"b", 4, 36, 32, 8}, {"c", 4, 64, 32, 0}};
  std::unique_ptr<Region> block = MustCreate("ovs", ControlBlockBytes(3));
  ASSERT_NE(block, nullptr);
  InitControlBlock(block->data(), "d", "s", 0, 1, layers);
  ASSERT_OK(CheckControlBlock(block->data(), block->bytes()));
  const LayerEntry* a = Entry(block->data(), 0);
  EXPECT_EQ(a->oversample, 8);
  EXPECT_EQ(a->k_cap, 40);
  EXPECT_EQ(SketchColumns(a->k_cap, a->oversample, 16), 24);
  EXPECT_EQ(Entry(block->data(), 1)->k_cap, 36);  // capped by d_in
  EXPECT_EQ(Entry(block->data(), 2)->k_cap, 32);  // p = 0
  EXPECT_EQ(GeometryOf(layers[0]).k_cap, 40);
}

TEST_F(ProtocolTest, CheckControlBlockExplainsMismatches) {
  void* b = block_->data();
  Header(b)->layout_version = kLayoutVersion + 1;
  absl::Status s = CheckControlBlock(b, block_->bytes());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(s.message(),
            absl::StrCat("shared memory layout version ", kLayoutVersion + 1,
                         ", this client speaks ", kLayoutVersion));
  Header(b)->layout_version = kLayoutVersion;
  EXPECT_THAT(CheckControlBlock(b, block_->bytes() - 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckControlBlock(b, 16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Entry(b, 1)->r_cap = 21;  // > d_in
  EXPECT_THAT(CheckControlBlock(b, block_->bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Entry(b, 1)->r_cap = 20;
  ASSERT_OK(CheckControlBlock(b, block_->bytes()));
  // The oversampling must be in range and agree with k_cap.
  Entry(b, 0)->oversample = 15;  // k_cap 24 is r_cap 8 + 16
  EXPECT_THAT(
      CheckControlBlock(b, block_->bytes()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("oversample 15")));
  Entry(b, 0)->oversample = -1;
  EXPECT_THAT(CheckControlBlock(b, block_->bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Entry(b, 0)->oversample = 16;
  ASSERT_OK(CheckControlBlock(b, block_->bytes()));
  Header(b)->magic = 0;
  s = CheckControlBlock(b, block_->bytes());
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a GIFT control block"));
}

TEST_F(ProtocolTest, PlanRoundTrip) {
  PlanView plan;
  EXPECT_TRUE(ReadPlan(block_->data(), &plan));
  EXPECT_EQ(plan.plan_epoch, 0);
  ASSERT_EQ(plan.layers.size(), 3u);
  EXPECT_EQ(plan.layers[0].accepted_version, -1);  // none accepted yet

  PlanView p{7,
             50,
             10,
             200,
             0x1234567890ULL,
             512,
             /*audit_interval=*/0,
             /*sketch_stride=*/3,
             {}};
  p.layers = {
      {1, 2, 0, 1, 32, 4, 9, /*sketch_period=*/2}, {0, 0, 1, 0, 16, 0}, {}};
  PublishPlan(block_->data(), p);
  ASSERT_TRUE(ReadPlan(block_->data(), &plan));
  EXPECT_EQ(plan.plan_epoch, 7);
  EXPECT_EQ(plan.refresh_interval, 50);
  EXPECT_EQ(plan.probe_interval, 10);
  EXPECT_EQ(plan.staleness_limit, 200);
  EXPECT_EQ(plan.omega_seed, 0x1234567890ULL);
  EXPECT_EQ(plan.sketch_rows, 512);
  EXPECT_EQ(plan.sketch_stride, 3);
  ASSERT_EQ(plan.layers.size(), 3u);
  EXPECT_EQ(plan.layers[0].sketch_period, 2);
  EXPECT_EQ(plan.layers[1].sketch_period, 1);
  EXPECT_EQ(plan.layers[0].path, 1);
  EXPECT_EQ(plan.layers[0].transform, 2);
  EXPECT_EQ(plan.layers[0].candidate, 1);
  EXPECT_EQ(plan.layers[0].rank, 32);
  EXPECT_EQ(plan.layers[0].refresh_seq, 4);
  EXPECT_EQ(plan.layers[0].accepted_version, 9);
  EXPECT_EQ(plan.layers[1].format, 1);
  EXPECT_EQ(plan.layers[1].rank, 16);
  EXPECT_EQ(plan.layers[1].accepted_version, -1);

  // A writer caught mid-update: the reader keeps its old plan.
  SeqlockWriteBegin(&Header(block_->data())->plan_lock);
  PlanView stale = plan;
  stale.plan_epoch = -5;
  EXPECT_FALSE(ReadPlan(block_->data(), &stale));
  EXPECT_EQ(stale.plan_epoch, -5);
  SeqlockWriteEnd(&Header(block_->data())->plan_lock);
  EXPECT_TRUE(ReadPlan(block_->data(), &stale));
  EXPECT_EQ(stale.plan_epoch, 7);
}

TEST_F(ProtocolTest, FactorSlotsAreDoubleBuffered) {
  for (int64_t v : {1, 2, 3}) {
    ASSERT_OK(PublishFactor(e_, data_.get(), full_.get(), MakeFactor(*e_, v)));
    EXPECT_EQ(NewestFactorVersion(*e_), v);
    FactorData f;
    ASSERT_OK(ReadNewestFactor(*e_, *data_, full_.get(), &f));
    EXPECT_EQ(f.version, v);
    EXPECT_EQ(Inconsistency(*e_, f), "");
  }
  // The other slot still holds version 2, untouched by version 3.
  int old_slot = e_->slots[0].version == 2 ? 0 : 1;
  ASSERT_EQ(e_->slots[old_slot].version, 2);
  ASSERT_EQ(e_->slots[1 - old_slot].version, 3);
  FactorData two = MakeFactor(*e_, 2);
  LayerRegionLayout l =
      LayerRegionLayout::Compute(e_->d_in, e_->r_cap, e_->k_cap);
  std::vector<float> u(two.u.size());
  ASSERT_OK(data_->Read(l.slot[old_slot].u, u.data(), u.size() * 4));
  EXPECT_EQ(u, two.u);
  std::vector<float> omega(two.omega.size());
  ASSERT_OK(
      data_->Read(l.slot[old_slot].omega, omega.data(), omega.size() * 4));
  EXPECT_EQ(omega, two.omega);
}

TEST_F(ProtocolTest, PublishFactorRejectsBadInputAndChangesNothing) {
  ASSERT_OK(PublishFactor(e_, data_.get(), full_.get(), MakeFactor(*e_, 5)));
  auto bad = [&](auto mutate) {
    FactorData f = MakeFactor(*e_, 6);
    mutate(f);
    return PublishFactor(e_, data_.get(), full_.get(), f);
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(bad([](FactorData& f) { f.version = 5; }), StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.u.pop_back(); }), StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.c.push_back(1); }), StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.c_inv.clear(); }), StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.lambda.pop_back(); }),
              StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.omega.resize(f.omega.size() / 2); }),
              StatusIs(kInvalid));
  EXPECT_THAT(bad([&](FactorData& f) { f.r = e_->r_cap + 1; }),
              StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.r = 0; }), StatusIs(kInvalid));
  EXPECT_THAT(bad([](FactorData& f) { f.kind = 2; }), StatusIs(kInvalid));
  // A full factor needs T, T⁻¹ and the full region.
  EXPECT_THAT(bad([](FactorData& f) { f.kind = 1; }), StatusIs(kInvalid));
  FactorData full = MakeFactor(*e_, 6);
  full.kind = 1;
  full.t = full.t_inv = Fill(6, e_->d_in * e_->d_in, 9);
  EXPECT_THAT(PublishFactor(e_, data_.get(), nullptr, full),
              StatusIs(kInvalid));
  auto small = MustCreate("small", 1024);
  EXPECT_THAT(PublishFactor(e_, small.get(), full_.get(), MakeFactor(*e_, 6)),
              StatusIs(kInvalid));

  EXPECT_EQ(NewestFactorVersion(*e_), 5);
  FactorData f;
  ASSERT_OK(ReadNewestFactor(*e_, *data_, full_.get(), &f));
  EXPECT_EQ(Inconsistency(*e_, f), "");
  EXPECT_THAT(ReadNewestFactor(*e_, *small, full_.get(), &f),
              StatusIs(kInvalid));
}

TEST_F(ProtocolTest, FullFactorTravelsThroughTheFullRegion) {
  FactorData full = MakeFactor(*e_, 4);
  full.kind = 1;
  full.t = Fill(4, e_->d_in * e_->d_in, 7);
  full.t_inv = Fill(4, e_->d_in * e_->d_in, 8);
  ASSERT_OK(PublishFactor(e_, data_.get(), full_.get(), full));
  FactorData f;
  EXPECT_THAT(ReadNewestFactor(*e_, *data_, nullptr, &f),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(ReadNewestFactor(*e_, *data_, full_.get(), &f));
  EXPECT_EQ(f.kind, 1);
  EXPECT_EQ(f.t, full.t);
  EXPECT_EQ(f.t_inv, full.t_inv);
  EXPECT_EQ(f.u, full.u);
}

// A writer thread publishes as fast as it can while a reader copies the
// newest factor; every copy must be one version's data, whole. The layer is
// large enough that copies take most of each loop, so they overlap often.
TEST_F(ProtocolTest, ConcurrentReaderNeverSeesATornFactor) {
  LayerEntry* e = Entry(block_->data(), 2);
  auto data = MustCreate(
      "torture", LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap).bytes);
  ASSERT_NE(data, nullptr);
  constexpr int64_t kMinReads = 300, kMinVersions = 300, kMaxVersion = 30000;
  std::atomic<int64_t> reads{0}, published{0};
  std::thread writer([&] {
    for (int64_t v = 1; v <= kMaxVersion; ++v) {
      ASSERT_OK(PublishFactor(e, data.get(), nullptr, MakeFactor(*e, v)));
      published.store(v);
      if (v >= kMinVersions && reads.load() >= kMinReads) break;
    }
  });
  int64_t unavailable = 0, last = -1;
  std::string error;
  FactorData f;
  while (error.empty()) {
    bool finished = published.load() >= kMinVersions && reads >= kMinReads;
    absl::Status s = ReadNewestFactor(*e, *data, nullptr, &f);
    if (s.ok()) {
      ++reads;
      error = Inconsistency(*e, f);
      if (f.version < last) error = absl::StrCat("went back to ", f.version);
      last = f.version;
    } else if (s.code() == absl::StatusCode::kUnavailable) {
      ++unavailable;
    } else if (s.code() != absl::StatusCode::kNotFound) {
      error = s.ToString();
    }
    if (finished) break;
  }
  writer.join();
  EXPECT_EQ(error, "") << "after " << reads << " good reads";
  EXPECT_GE(reads.load(), kMinReads);
  RecordProperty("reads", static_cast<int>(reads.load()));
  RecordProperty("versions", static_cast<int>(published.load()));
  RecordProperty("unavailable", static_cast<int>(unavailable));
}

TEST_F(ProtocolTest, Omega0RoundTrip) {
  std::vector<float> omega = Fill(0, e_->d_in * e_->k_cap, 5);
  ASSERT_OK(WriteOmega0(*e_, data_.get(), omega));
  std::vector<float> got;
  ASSERT_OK(ReadOmega0(*e_, *data_, &got));
  EXPECT_EQ(got, omega);
  omega.pop_back();
  EXPECT_THAT(WriteOmega0(*e_, data_.get(), omega),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The client side of one window: begin, accumulate, close.
void RunWindow(LayerEntry* e, Region* data, Region* full, int64_t w,
               bool with_full) {
  absl::StatusOr<bool> began = BeginWindow(e, data, full, w, with_full);
  ASSERT_OK(began);
  ASSERT_TRUE(*began) << "window " << w;
  const int b = static_cast<int>(w % 2);
  LayerRegionLayout l = LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap);
  std::vector<float> y = Fill(w, e->d_in * e->k_cap, 0);
  ASSERT_OK(data->Write(l.sketch[b].y, y.data(), y.size() * 4));
  double trace = 10.0 + w;
  int64_t count = 100 + w;
  ASSERT_OK(data->Write(l.sketch[b].trace, &trace, sizeof(trace)));
  ASSERT_OK(data->Write(l.sketch[b].count, &count, sizeof(count)));
  if (with_full) {
    std::vector<float> a = Fill(w, e->d_in * e->d_in, 1);
    FullRegionLayout fl = FullRegionLayout::Compute(e->d_in);
    ASSERT_OK(full->Write(fl.acc[b].a, a.data(), a.size() * 4));
  }
  CloseWindow(e, {w, -1, e->k_cap, with_full ? 1 : 0, 10 * w, 10 * w + 10});
}

TEST_F(ProtocolTest, WindowsAlternateBuffersAndSkipWhenNotConsumed) {
  SketchData d;
  EXPECT_THAT(ReadClosedWindow(*e_, *data_, full_.get(), &d),
              StatusIs(absl::StatusCode::kNotFound));
  RunWindow(e_, data_.get(), full_.get(), 0, false);
  ASSERT_OK(ReadClosedWindow(*e_, *data_, full_.get(), &d));
  EXPECT_EQ(d.meta.window, 0);
  EXPECT_EQ(d.y, Fill(0, e_->d_in * e_->k_cap, 0));
  EXPECT_EQ(d.trace, 10.0);
  EXPECT_EQ(d.count, 100);
  EXPECT_TRUE(d.a.empty());
  ConsumeWindow(e_, 0);
  EXPECT_THAT(ReadClosedWindow(*e_, *data_, full_.get(), &d),
              StatusIs(absl::StatusCode::kNotFound));

  RunWindow(e_, data_.get(), full_.get(), 1, false);
  RunWindow(e_, data_.get(), full_.get(), 2, false);  // 0 was consumed
  // Window 1 is not consumed: window 3 may not reuse its buffer.
  absl::StatusOr<bool> began =
      BeginWindow(e_, data_.get(), full_.get(), 3, false);
  ASSERT_OK(began);
  EXPECT_FALSE(*began);
  // The daemon reads the newest closed window (2) and consumes it; that
  // frees window 1's buffer too.
  ASSERT_OK(ReadClosedWindow(*e_, *data_, full_.get(), &d));
  EXPECT_EQ(d.meta.window, 2);
  EXPECT_EQ(d.y, Fill(2, e_->d_in * e_->k_cap, 0));
  ConsumeWindow(e_, 2);
  began = BeginWindow(e_, data_.get(), full_.get(), 3, false);
  ASSERT_OK(began);
  EXPECT_TRUE(*began);
  // Beginning zeroed window 3's buffer (it held window 1).
  LayerRegionLayout l =
      LayerRegionLayout::Compute(e_->d_in, e_->r_cap, e_->k_cap);
  std::vector<float> y(e_->d_in * e_->k_cap, 1.0f);
  ASSERT_OK(data_->Read(l.sketch[1].y, y.data(), y.size() * 4));
  EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
  double trace = 1;
  ASSERT_OK(data_->Read(l.sketch[1].trace, &trace, sizeof(trace)));
  EXPECT_EQ(trace, 0.0);
}

TEST_F(ProtocolTest, ReadWindowReadsExactlyOneUnconsumedClosedWindow) {
  SketchData d;
  EXPECT_THAT(ReadWindow(*e_, *data_, nullptr, 0, &d),
              StatusIs(absl::StatusCode::kNotFound));
  RunWindow(e_, data_.get(), full_.get(), 0, false);
  RunWindow(e_, data_.get(), full_.get(), 1, false);
  // The daemon saw this rank one window ahead of another: it reads both.
  ASSERT_OK(ReadWindow(*e_, *data_, nullptr, 0, &d));
  EXPECT_EQ(d.meta.window, 0);
  EXPECT_EQ(d.y, Fill(0, e_->d_in * e_->k_cap, 0));
  ASSERT_OK(ReadWindow(*e_, *data_, nullptr, 1, &d));
  EXPECT_EQ(d.meta.window, 1);
  EXPECT_EQ(d.count, 101);
  EXPECT_THAT(ReadWindow(*e_, *data_, nullptr, 2, &d),
              StatusIs(absl::StatusCode::kNotFound));  // not closed
  ConsumeWindow(e_, 1);
  // Consumed: the client may be reusing the buffers already.
  EXPECT_THAT(ReadWindow(*e_, *data_, nullptr, 0, &d),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ReadWindow(*e_, *data_, nullptr, 1, &d),
              StatusIs(absl::StatusCode::kNotFound));
  RunWindow(e_, data_.get(), full_.get(), 3, false);  // 2 skipped
  EXPECT_THAT(ReadWindow(*e_, *data_, nullptr, 2, &d),
              StatusIs(absl::StatusCode::kNotFound));  // buffer holds 0
  ASSERT_OK(ReadWindow(*e_, *data_, nullptr, 3, &d));
  EXPECT_EQ(d.meta.window, 3);
}

TEST_F(ProtocolTest, SkippedWindowDoesNotBlockItsBuffer) {
  RunWindow(e_, data_.get(), full_.get(), 0, false);
  RunWindow(e_, data_.get(), full_.get(), 1, false);
  EXPECT_FALSE(*BeginWindow(e_, data_.get(), full_.get(), 2, false));
  EXPECT_FALSE(*BeginWindow(e_, data_.get(), full_.get(), 3, false));
  ConsumeWindow(e_, 1);  // the daemon caught up; windows 2 and 3 skipped
  EXPECT_TRUE(*BeginWindow(e_, data_.get(), full_.get(), 4, false));
}

TEST_F(ProtocolTest, FullWindowCarriesTheAccumulator) {
  EXPECT_THAT(BeginWindow(e_, data_.get(), nullptr, 0, true),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  RunWindow(e_, data_.get(), full_.get(), 0, true);
  SketchData d;
  EXPECT_THAT(ReadClosedWindow(*e_, *data_, nullptr, &d),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(ReadClosedWindow(*e_, *data_, full_.get(), &d));
  EXPECT_EQ(d.meta.full, 1);
  EXPECT_EQ(d.a, Fill(0, e_->d_in * e_->d_in, 1));
}

// A sketch wider than the buffer's k_cap columns, or of no column, is
// malformed.
TEST_F(ProtocolTest, SketchOfAnImpossibleWidthIsDataLoss) {
  RunWindow(e_, data_.get(), full_.get(), 0, false);
  SketchData d;
  for (int32_t k : {e_->k_cap + 1, 0, -1, std::numeric_limits<int32_t>::max(),
                    std::numeric_limits<int32_t>::min()}) {
    e_->sketch_meta[0].k = k;
    EXPECT_THAT(ReadClosedWindow(*e_, *data_, full_.get(), &d),
                StatusIs(absl::StatusCode::kDataLoss))
        << k;
  }
}

// A window sketches the first r + p columns of Ω (DESIGN §3), not the
// k_cap = r_cap + p its buffer has room for: the daemon reads d_in × k,
// stored compactly, and nothing of the columns beyond.
TEST_F(ProtocolTest, ANarrowerWindowIsReadCompactly) {
  const int32_t k = SketchColumns(e_->k_cap, e_->oversample, 2);
  ASSERT_EQ(k, 18);  // rank 2 + 16 < k_cap 24
  ASSERT_TRUE(*BeginWindow(e_, data_.get(), nullptr, 0, false));
  const LayerRegionLayout l =
      LayerRegionLayout::Compute(e_->d_in, e_->r_cap, e_->k_cap);
  std::vector<float> y = Fill(0, e_->d_in * e_->k_cap, 0);
  ASSERT_OK(data_->Write(l.sketch[0].y, y.data(), y.size() * 4));
  const double trace = 3;
  const int64_t count = 4;
  ASSERT_OK(data_->Write(l.sketch[0].trace, &trace, sizeof(trace)));
  ASSERT_OK(data_->Write(l.sketch[0].count, &count, sizeof(count)));
  CloseWindow(e_, {0, -1, k, 0, 0, 10});
  SketchData d;
  ASSERT_OK(ReadClosedWindow(*e_, *data_, nullptr, &d));
  EXPECT_EQ(d.meta.k, k);
  y.resize(e_->d_in * k);
  EXPECT_EQ(d.y, y);
}

TEST(ColumnsTest, ColumnsThenRestInvertsFirstColumns) {
  const std::vector<float> m = {1, 2, 3, 4, 5, 6};  // 2 × 3
  const std::vector<float> rest = {7, 8, 9, 10, 11, 12};
  EXPECT_EQ(FirstColumns(m, 2, 3, 2), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ColumnsThenRest({1, 2, 4, 5}, rest, 2, 3, 2),
            (std::vector<float>{1, 2, 9, 4, 5, 12}));
  EXPECT_EQ(ColumnsThenRest({}, rest, 2, 3, 0), rest);
  EXPECT_EQ(ColumnsThenRest(m, rest, 2, 3, 3), m);
  EXPECT_TRUE(ColumnsThenRest({1, 2, 4}, rest, 2, 3, 2).empty());
  EXPECT_TRUE(ColumnsThenRest({1, 2, 4, 5}, {7, 8}, 2, 3, 2).empty());
  EXPECT_TRUE(ColumnsThenRest(m, rest, 2, 3, 4).empty());
  EXPECT_TRUE(ColumnsThenRest({}, rest, 2, 3, -1).empty());
}

TEST(ColumnsTest, ColumnsBeforeRestFindsTheLastColumnThatDiffers) {
  const std::vector<float> rest = {7, 8, 9, 10, 11, 12};  // 2 × 3
  EXPECT_EQ(ColumnsBeforeRest(rest, rest, 2, 3), 0);
  EXPECT_EQ(ColumnsBeforeRest({1, 8, 9, 10, 11, 12}, rest, 2, 3), 1);
  EXPECT_EQ(ColumnsBeforeRest({7, 8, 9, 10, 0, 12}, rest, 2, 3), 2);
  EXPECT_EQ(ColumnsBeforeRest({7, 8, 0, 10, 11, 12}, rest, 2, 3), 3);
  // Bits, not values: −0 is not 0.
  const std::vector<float> zero = {0, 0};
  EXPECT_EQ(ColumnsBeforeRest({0.0f, -0.0f}, zero, 1, 2), 2);
  EXPECT_EQ(ColumnsBeforeRest({1, 2}, rest, 2, 3), 3);  // sizes differ
}

TEST(SketchColumnsTest, RankPlusOversamplingCappedByTheBuffer) {
  EXPECT_EQ(SketchColumns(80, 16, 32), 48);
  EXPECT_EQ(SketchColumns(80, 16, 64), 80);
  EXPECT_EQ(SketchColumns(80, 16, 70), 80);  // never wider than the buffer
  EXPECT_EQ(SketchColumns(20, 16, 4), 20);   // k_cap capped by d_in
  EXPECT_EQ(SketchColumns(80, 16, 0), 80);   // no rank in the plan: all
  EXPECT_EQ(SketchColumns(80, 16, std::numeric_limits<int32_t>::max()), 80);
  EXPECT_EQ(SketchColumns(72, 8, 32), 40);   // sketch_oversample 8
  EXPECT_EQ(SketchColumns(64, 0, 32), 32);   // p = 0: the rank alone
  EXPECT_EQ(SketchColumns(64, -5, 32), 32);  // a negative p counts as 0
}

TEST(ColumnsTest, ColumnRangeAndSideBySideSplitAndJoinRows) {
  const std::vector<float> m{1, 2, 3, 4, 5, 6};  // 2 × 3
  EXPECT_EQ(ColumnRange(m, 2, 3, 1, 3), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(ColumnRange(m, 2, 3, 1, 2), (std::vector<float>{2, 5}));
  EXPECT_EQ(ColumnRange(m, 2, 3, 0, 3), m);
  EXPECT_EQ(ColumnRange(m, 2, 3, 2, 2), std::vector<float>{});
  EXPECT_TRUE(ColumnRange(m, 2, 3, 2, 1).empty());   // begin > end
  EXPECT_TRUE(ColumnRange(m, 2, 3, -1, 1).empty());  // begin < 0
  EXPECT_TRUE(ColumnRange(m, 2, 3, 1, 4).empty());   // end > cols
  EXPECT_TRUE(ColumnRange(m, 3, 3, 0, 1).empty());   // wrong size
  EXPECT_EQ(SideBySide({1, 4}, 1, {2, 3, 5, 6}, 2, 2), m);
  EXPECT_EQ(SideBySide({}, 0, m, 3, 2), m);
  EXPECT_EQ(SideBySide(m, 3, {}, 0, 2), m);
  EXPECT_TRUE(SideBySide({1, 4, 7}, 1, {2, 3, 5, 6}, 2, 2).empty());
  EXPECT_TRUE(SideBySide({1, 4}, 1, {2, 3, 5}, 2, 2).empty());
}

TEST(ColumnsTest, LeadingColumnsEqualStopsAtTheFirstColumnThatDiffers) {
  const std::vector<float> m{1, 2, 3, 4, 5, 6};  // 2 × 3
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {1, 2, 4, 5}, 2), 2);
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, m, 3), 3);
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {1, 9, 4, 5}, 2), 1);  // row 0
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {1, 2, 4, 9}, 2), 1);  // row 1
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {0, 2, 4, 5}, 2), 0);
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {1, 2, 3, 9, 4, 5, 6, 9}, 4), 3);
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {}, 0), 0);
  EXPECT_EQ(LeadingColumnsEqual(m, 2, 3, {1, 2, 4}, 2), 0);  // wrong size
  // Bit for bit: −0 is not 0.
  EXPECT_EQ(LeadingColumnsEqual({0.0f, 1.0f}, 1, 2, {-0.0f, 1.0f}, 2), 0);
}

TEST(FirstColumnsTest, KeepsTheLeadingColumnsOfEachRow) {
  const std::vector<float> m = {1, 2, 3, 4, 5, 6};  // 2 × 3
  EXPECT_EQ(FirstColumns(m, 2, 3, 2), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(FirstColumns(m, 2, 3, 3), m);
  EXPECT_EQ(FirstColumns(m, 2, 3, 0), std::vector<float>{});
  EXPECT_EQ(FirstColumns(m, 2, 3, 4), std::vector<float>{});  // k > cols
  EXPECT_EQ(FirstColumns(m, 3, 3, 2), std::vector<float>{});  // wrong size
}

// Issue 13: the daemon read d_in, r_cap and k_cap from the entry, which the
// rank can overwrite, and re-read them during the copy. With the daemon's
// own geometry, whatever the entry says, it reads the window it created the
// region for; and it copies meta once, so its checks see what it uses.
TEST_F(ProtocolTest, DaemonReadsWithItsOwnGeometryWhateverTheEntrySays) {
  const LayerGeometry g = GeometryOf(layers_[0]);
  EXPECT_EQ(g.d_in, 40);
  EXPECT_EQ(g.r_cap, 8);
  EXPECT_EQ(g.k_cap, 24);
  RunWindow(e_, data_.get(), full_.get(), 0, false);
  e_->d_in = int64_t{1} << 40;
  e_->r_cap = -7;
  e_->k_cap = 1 << 30;
  e_->window_consumed.store(std::numeric_limits<int64_t>::max());
  SketchData d;
  ASSERT_OK(ReadWindow(*e_, g, *data_, full_.get(), /*consumed=*/-1, 0, &d));
  EXPECT_EQ(d.y, Fill(0, 40 * 24, 0));
  EXPECT_EQ(d.count, 100);
  EXPECT_OK(CheckSketchData(d));
  // The entry's sizes are refused where the entry is trusted (tests, the
  // client), instead of read with.
  EXPECT_THAT(ReadClosedWindow(*e_, *data_, full_.get(), &d),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Meta out of range is malformed, not read.
  e_->sketch_meta[0].end_step = -1;
  EXPECT_THAT(ReadWindow(*e_, g, *data_, full_.get(), -1, 0, &d),
              StatusIs(absl::StatusCode::kDataLoss));
  e_->sketch_meta[0].end_step = 10;
  e_->sketch_meta[0].full = 7;
  EXPECT_THAT(ReadWindow(*e_, g, *data_, full_.get(), -1, 0, &d),
              StatusIs(absl::StatusCode::kDataLoss));
  e_->sketch_meta[0].full = 0;
  // Values the rank wrote that no real sketch holds.
  ASSERT_OK(ReadWindow(*e_, g, *data_, full_.get(), -1, 0, &d));
  d.y[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(CheckSketchData(d), StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_OK(ReadWindow(*e_, g, *data_, full_.get(), -1, 0, &d));
  d.count = -1;
  EXPECT_THAT(CheckSketchData(d), StatusIs(absl::StatusCode::kDataLoss));
  d.count = 1;
  d.trace = std::numeric_limits<double>::infinity();
  EXPECT_THAT(CheckSketchData(d), StatusIs(absl::StatusCode::kDataLoss));
  // The daemon's own count of consumed windows, not the entry's.
  EXPECT_THAT(ReadWindow(*e_, g, *data_, full_.get(), /*consumed=*/0, 0, &d),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ProtocolTest, DaemonPublishesWithItsOwnGeometry) {
  const LayerGeometry g = GeometryOf(layers_[0]);
  const FactorData f = MakeFactor(*e_, 1);
  e_->d_in = 3;  // the rank's lie
  e_->k_cap = 2;
  ASSERT_OK(PublishFactor(e_, g, data_.get(), nullptr, f));
  // Sized for the lie: refused against the daemon's geometry.
  FactorData small = MakeFactor(*e_, 2);
  EXPECT_THAT(PublishFactor(e_, g, data_.get(), nullptr, small),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<float> omega0(40 * 24, 0.5f);
  ASSERT_OK(WriteOmega0(g, data_.get(), omega0));
  EXPECT_THAT(WriteOmega0(*e_, data_.get(), omega0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ProtocolTest, TelemetryRoundTrip) {
  LayerCounters c{};
  c.steps = 10;
  c.gift_steps = 7;
  c.n = 1 << 20;
  c.upper = 3;
  c.lower = 4;
  c.err_sq = 0.125;
  c.cosine_sum = 9.5;
  c.factor_version = 12;
  c.bytes_sent = 1 << 22;
  WriteTelemetry(e_, c);
  LayerCounters got{};
  ASSERT_TRUE(ReadTelemetry(*e_, &got));
  EXPECT_EQ(std::memcmp(&got, &c, sizeof(c)), 0);
  SeqlockWriteBegin(&e_->tele_lock);
  EXPECT_FALSE(ReadTelemetry(*e_, &got));
  SeqlockWriteEnd(&e_->tele_lock);
}

TEST_F(ProtocolTest, StepCountersRoundTrip) {
  StepCounters t{};
  t.steps = 42;
  t.collective_seconds = 1.5;
  t.transform_seconds = 0.25;
  t.bytes_euclid = 1000;
  t.bytes_gift = 2000;
  t.bytes_control = 30;
  t.bytes_fp32_equivalent = 12000;
  t.nonfinite_layers = 1;
  for (int i = 0; i < kDurationBuckets; ++i) t.duration_buckets[i] = i * i;
  ControlHeader* h = Header(block_->data());
  WriteStepCounters(h, t);
  StepCounters got{};
  ASSERT_TRUE(ReadStepCounters(*h, &got));
  EXPECT_EQ(std::memcmp(&got, &t, sizeof(t)), 0);
  SeqlockWriteBegin(&h->tele_lock);
  EXPECT_FALSE(ReadStepCounters(*h, &got));
  SeqlockWriteEnd(&h->tele_lock);
}

// Both sides in separate processes: the parent is the daemon, the child a
// rank that maps the regions from their descriptors only.
TEST_F(ProtocolTest, RankInAnotherProcessReadsFactorAndClosesWindow) {
  ASSERT_OK(PublishFactor(e_, data_.get(), full_.get(), MakeFactor(*e_, 9)));
  const RegionDesc ctl = block_->desc(), data = data_->desc();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto block = OpenRegion(ctl);
    auto region = OpenRegion(data);
    if (!block.ok() || !region.ok()) _exit(2);
    if (!CheckControlBlock((*block)->data(), ctl.bytes).ok()) _exit(3);
    LayerEntry* e = Entry((*block)->data(), 0);
    FactorData f;
    if (!ReadNewestFactor(*e, **region, nullptr, &f).ok()) _exit(4);
    if (!Inconsistency(*e, f).empty()) _exit(5);
    RunWindow(e, region->get(), nullptr, 0, false);
    _exit(::testing::Test::HasFailure() ? 6 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  SketchData d;
  ASSERT_OK(ReadClosedWindow(*e_, *data_, nullptr, &d));
  EXPECT_EQ(d.y, Fill(0, e_->d_in * e_->k_cap, 0));
  EXPECT_EQ(d.count, 100);
}

}  // namespace
}  // namespace gift::shm
