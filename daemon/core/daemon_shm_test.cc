// giftd's core against a rank that writes garbage into its shared memory:
// whatever a rank writes, the poll neither hangs nor publishes nonsense
// (vulnerability outside [0, 1], counters that go down); malformed samples
// and windows are dropped and counted in gift_shm_rejected_total, and a rank
// that keeps writing garbage is disconnected.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_matchers.h"
#include "daemon/core/daemon.h"
#include "daemon/core/daemon_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;

// Every metric series of a scrape: "name{labels}" → value.
std::map<std::string, double> Series(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == std::string::npos) continue;
    const std::string value = line.substr(space + 1);
    if (value == "NaN") {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (!absl::SimpleAtod(value, &v)) {
      continue;
    }
    out[line.substr(0, space)] = v;
  }
  return out;
}

// Runs `f` on its own thread. A call that does not return within `limit`
// holds the daemon's mutex for good: the test fails and the process ends
// (nothing could clean up after it).
void ReturnsWithin(absl::Duration limit, const std::string& what,
                   std::function<void()> f) {
  auto done = std::make_shared<absl::Notification>();
  std::thread([f = std::move(f), done] {
    f();
    done->Notify();
  }).detach();
  if (done->WaitForNotificationWithTimeout(limit)) return;
  ADD_FAILURE() << what << " did not return within "
                << absl::FormatDuration(limit) << ": giftd is hung";
  std::fflush(stdout);
  std::_Exit(1);
}

class DaemonShmTest : public OneRankDaemonTest {
 protected:
  DaemonShmTest() : OneRankDaemonTest("stest") {}

  // One poll, which must return.
  void Poll() {
    ReturnsWithin(absl::Seconds(10), "PollOnce",
                  [this] { daemon_->PollOnce(); });
  }
  v1::GetStatusResponse Status() {
    v1::GetStatusResponse out;
    ReturnsWithin(absl::Seconds(10), "GetStatus", [&] {
      auto s = daemon_->GetStatus({});
      EXPECT_OK(s);
      if (s.ok()) out = *s;
    });
    return out;
  }

  // A plausible client: `steps` steps of layer telemetry and totals.
  void WriteValidTelemetry(int64_t steps) {
    for (int i = 0; i < 2; ++i) {
      shm::LayerCounters c{};
      c.steps = steps;
      c.n = 1000 * steps;
      c.upper = 10 * steps;
      c.lower = 20 * steps;
      c.err_sq = 0.5 * steps;
      c.x_sq = 100.0 * steps;
      c.xhat_x = 99.0 * steps;
      c.factor_version = -1;
      shm::WriteTelemetry(rank_.entry(i), c);
    }
    shm::StepCounters t{};
    t.steps = steps;
    t.collective_seconds = 0.01 * steps;
    t.bytes_euclid = 4000 * steps;
    t.bytes_fp32_equivalent = 8000 * steps;
    t.duration_buckets[3] = steps;
    shm::WriteStepCounters(shm::Header(rank_.control->data()), t);
    shm::Header(rank_.control->data())->step.store(steps);
  }

  // Every gift_layer_vulnerability is in [0, 1] and no counter (a _total or
  // a histogram's _count/_sum/_bucket) is negative or below `before`.
  void ExpectSaneMetrics(const std::map<std::string, double>& before) {
    const std::map<std::string, double> now =
        Series(metrics::Serialize(registry_));
    for (const auto& [name, v] : now) {
      if (absl::StartsWith(name, "gift_layer_vulnerability")) {
        EXPECT_TRUE(v >= 0 && v <= 1) << name << " = " << v;
      }
      const bool counter = absl::StrContains(name, "_total") ||
                           absl::StrContains(name, "_count") ||
                           absl::StrContains(name, "_sum") ||
                           absl::StrContains(name, "_bucket");
      if (!counter || absl::StartsWith(name, "process_")) continue;
      EXPECT_TRUE(v >= 0) << name << " = " << v;
      auto was = before.find(name);
      if (was != before.end()) {
        EXPECT_GE(v, was->second) << name << " went down";
      }
    }
  }

  double Rejected(const std::string& reason) {
    const std::map<std::string, double> now =
        Series(metrics::Serialize(registry_));
    double total = 0;
    for (const auto& [name, v] : now) {
      if (absl::StartsWith(name, "gift_shm_rejected_total") &&
          absl::StrContains(name, absl::StrCat("reason=\"", reason, "\""))) {
        total += v;
      }
    }
    return total;
  }
  double RejectedAny() {
    double total = 0;
    for (const auto& [name, v] : Series(metrics::Serialize(registry_))) {
      if (absl::StartsWith(name, "gift_shm_rejected_total")) total += v;
    }
    return total;
  }

  // Fills every 8-byte word of the control block with `word`.
  void FillControlBlock(uint64_t word) {
    char* p = static_cast<char*>(rank_.control->data());
    for (uint64_t at = 0; at + 8 <= rank_.control->bytes(); at += 8) {
      std::memcpy(p + at, &word, 8);
    }
  }
};

// The garbage of issue 13: INT64_MAX hung the poll thread (and with it
// every Control call and SIGTERM); the others published negative
// vulnerability and counters that went down.
TEST_F(DaemonShmTest, GarbageInTheControlBlockNeitherHangsNorPoisons) {
  WriteValidTelemetry(10);
  Poll();
  const std::map<std::string, double> before =
      Series(metrics::Serialize(registry_));
  struct Pattern {
    const char* name;
    std::function<void()> write;
  };
  const Pattern patterns[] = {
      {"INT64_MAX",
       [&] { FillControlBlock(std::numeric_limits<int64_t>::max()); }},
      {"INT64_MIN",
       [&] {
         FillControlBlock(
             static_cast<uint64_t>(std::numeric_limits<int64_t>::min()));
       }},
      {"NaN",
       [&] {
         const double nan = std::numeric_limits<double>::quiet_NaN();
         uint64_t w;
         std::memcpy(&w, &nan, 8);
         FillControlBlock(w);
       }},
      {"0xFF", [&] { FillControlBlock(~uint64_t{0}); }},
      {"random",
       [&] {
         std::mt19937_64 gen(13);
         char* p = static_cast<char*>(rank_.control->data());
         for (uint64_t at = 0; at + 8 <= rank_.control->bytes(); at += 8) {
           const uint64_t w = gen();
           std::memcpy(p + at, &w, 8);
         }
       }},
  };
  for (const Pattern& p : patterns) {
    SCOPED_TRACE(p.name);
    p.write();
    Poll();
    Poll();
    Status();  // it answers
    ExpectSaneMetrics(before);
  }
  EXPECT_GT(RejectedAny(), 0);
}

TEST_F(DaemonShmTest, GarbageInTheDataRegionsIsDroppedAsAWindow) {
  shm::LayerEntry* e = rank_.entry(1);
  ASSERT_OK(shm::BeginWindow(e, rank_.data[1].get(), nullptr, 0, false));
  std::mt19937_64 gen(7);
  std::vector<uint64_t> junk(rank_.data[1]->bytes() / 8);
  for (uint64_t& w : junk) w = gen();
  ASSERT_OK(rank_.data[1]->Write(0, junk.data(), junk.size() * 8));
  shm::SketchMeta meta{};
  meta.window = 0;
  meta.omega_version = -1;
  meta.k = e->k_cap;
  meta.end_step = 50;
  shm::CloseWindow(e, meta);
  Poll();
  EXPECT_EQ(Rejected("sketch_data"), 1);
  // The window is consumed all the same: the rank's next one can go on.
  EXPECT_EQ(e->window_consumed.load(), 0);
}

TEST_F(DaemonShmTest, ADecreasingSampleIsRejectedAndTheNextGoodOneCounts) {
  WriteValidTelemetry(10);
  Poll();
  const std::string steps =
      "gift_steps_total{job_id=\"job\",node=\"test\",rank=\"0\"}";
  EXPECT_EQ(Series(metrics::Serialize(registry_))[steps], 10);
  WriteValidTelemetry(5);  // counters went down
  Poll();
  EXPECT_EQ(Series(metrics::Serialize(registry_))[steps], 10);
  EXPECT_GE(Rejected("step_counters"), 1);
  EXPECT_GE(Rejected("layer_counters"), 1);
  WriteValidTelemetry(12);
  Poll();
  EXPECT_EQ(Series(metrics::Serialize(registry_))[steps], 12);
  EXPECT_EQ(Status().ranks_registered(), 1);
}

// Issue 15: the ranks' audits reach the metrics (one series per layer and
// path, no rank label), the layer status and giftctl; a rank's garbage in
// the audit counters is dropped like any other.
TEST_F(DaemonShmTest, AuditsAreExportedPerLayerAndPath) {
  WriteValidTelemetry(10);
  Poll();
  shm::LayerCounters c{};
  ASSERT_TRUE(shm::ReadTelemetry(*rank_.entry(1), &c));
  c.steps += 100;
  c.audits[1] = 2;  // two audits on the GIFT path
  c.audit_rel_l2_sum[1] = 0.08;
  c.audit_cosine_sum[1] = 1.98;
  c.drift_audits[1] = 1;
  c.audit_drift_sum[1] = 0.003;
  shm::WriteTelemetry(rank_.entry(1), c);
  Poll();
  const std::map<std::string, double> now =
      Series(metrics::Serialize(registry_));
  const std::string labels =
      "{job_id=\"job\",layer=\"fc2\",node=\"test\","
      "path=\"gift\"}";
  EXPECT_DOUBLE_EQ(now.at("gift_layer_audit_rel_l2" + labels), 0.04);
  EXPECT_DOUBLE_EQ(now.at("gift_layer_audit_cosine" + labels), 0.99);
  EXPECT_DOUBLE_EQ(now.at("gift_layer_audit_drift" + labels), 0.003);
  auto layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  const v1::LayerStatus& fc2 = layers->layers(1);
  ASSERT_EQ(fc2.name(), "fc2");
  EXPECT_DOUBLE_EQ(fc2.audit_rel_l2_gift(), 0.04);
  EXPECT_DOUBLE_EQ(fc2.audit_drift_gift(), 0.003);
  EXPECT_TRUE(std::isnan(fc2.audit_rel_l2_euclid()));
  EXPECT_EQ(fc2.audit_path(), "gift");
  EXPECT_EQ(fc2.audits(), 2);
  EXPECT_EQ(layers->layers(0).audit_path(), "");  // fc1: none

  // More audits than steps, or a non-finite sum: dropped, nothing changes.
  const double before = Rejected("layer_counters");
  shm::LayerCounters bad = c;
  bad.steps += 1;
  bad.audits[0] = 5;
  shm::WriteTelemetry(rank_.entry(1), bad);
  Poll();
  EXPECT_EQ(Rejected("layer_counters"), before + 1);
  bad = c;
  bad.steps += 1;
  bad.audits[1] += 1;
  bad.audit_rel_l2_sum[1] = std::numeric_limits<double>::infinity();
  shm::WriteTelemetry(rank_.entry(1), bad);
  Poll();
  EXPECT_EQ(Rejected("layer_counters"), before + 2);
  EXPECT_DOUBLE_EQ(Series(metrics::Serialize(registry_))
                       .at("gift_layer_audit_rel_l2" + labels),
                   0.04);
}

// Windows: a closed window far beyond what was consumed, and a sketch of no
// column or wider than the layer's buffer, are dropped; the sizes the daemon
// reads with are its own, whatever the rank wrote into the entry.
TEST_F(DaemonShmTest, MalformedWindowsAreDropped) {
  shm::LayerEntry* e = rank_.entry(1);
  e->window_closed.store(std::numeric_limits<int64_t>::max());
  Poll();
  EXPECT_EQ(Rejected("window"), 1);
  e->window_closed.store(0);
  e->sketch_meta[0] = {};
  e->sketch_meta[0].window = 0;
  e->sketch_meta[0].omega_version = -1;
  e->sketch_meta[0].k = 0;  // no column
  e->sketch_meta[0].end_step = 50;
  Poll();
  EXPECT_EQ(Rejected("sketch_meta"), 1);
  // Sizes in the entry that would make the daemon read past the region.
  e->d_in = int64_t{1} << 40;
  e->k_cap = std::numeric_limits<int32_t>::max();
  e->window_closed.store(1);
  e->sketch_meta[1] = {};
  e->sketch_meta[1].window = 1;
  e->sketch_meta[1].omega_version = -1;
  e->sketch_meta[1].k = 64;  // k_cap as the daemon created it: 48
  e->sketch_meta[1].end_step = 60;
  Poll();
  EXPECT_EQ(Rejected("sketch_meta"), 2);
  EXPECT_EQ(Status().ranks_registered(), 1);
}

TEST_F(DaemonShmTest, ARankThatKeepsWritingGarbageIsDisconnected) {
  WriteValidTelemetry(10);
  Poll();
  FillControlBlock(std::numeric_limits<int64_t>::min());
  for (int i = 0; i < kMalformedPollsBeforeDisconnect - 1; ++i) Poll();
  EXPECT_EQ(Status().ranks_registered(), 1);  // not yet
  Poll();
  const v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.ranks_registered(), 0);
  EXPECT_EQ(s.ranks_reaped(), 1);
  // Its shared memory went with its session (as a reap's does).
  auto names = shm::ListPosixObjects(config().shm_prefix + "-");
  ASSERT_OK(names);
  EXPECT_THAT(*names, ::testing::IsEmpty());
}

// A seqlock held odd for good (a stuck or broken writer) is malformed too:
// counted, and no longer retried for free every poll.
TEST_F(DaemonShmTest, TelemetryLockedForGoodCountsAsMalformed) {
  shm::Header(rank_.control->data())->tele_lock.store(1);
  rank_.entry(0)->tele_lock.store(3);
  Poll();
  EXPECT_EQ(Rejected("step_counters"), 1);
  EXPECT_EQ(Rejected("layer_counters"), 1);
  for (int i = 1; i < kMalformedPollsBeforeDisconnect; ++i) Poll();
  EXPECT_EQ(Status().ranks_registered(), 0);
}

TEST_F(DaemonShmTest, OneBadSampleAmongGoodOnesDoesNotDisconnect) {
  for (int i = 0; i < 3 * kMalformedPollsBeforeDisconnect; ++i) {
    if (i % 2 == 0) {
      WriteValidTelemetry(10 + i);
    } else {
      shm::Header(rank_.control->data())->step.store(-1);
    }
    Poll();
  }
  EXPECT_EQ(Status().ranks_registered(), 1);
  EXPECT_GE(Rejected("step"), 1);
}

}  // namespace
}  // namespace gift::daemon
