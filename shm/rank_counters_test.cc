#include "shm/rank_counters.h"

#include <cmath>
#include <limits>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::shm {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

LayerCounters Layer(int64_t steps) {
  LayerCounters c{};
  c.steps = steps;
  c.gift_steps = steps / 2;
  c.n = 100 * steps;
  c.upper = 3 * steps;
  c.lower = 5 * steps;
  c.probes = steps / 4;
  c.err_sq = 0.25 * steps;
  c.x_sq = 10.0 * steps;
  c.xhat_x = -1.0 * steps;  // may be negative
  c.cosine_sum = 0.5 * steps;
  c.factor_version = 3;
  c.probe_version = c.probes > 0 ? 3 : -1;  // every probe of v3
  c.version_probes = c.probes;
  return c;
}

StepCounters Steps(int64_t steps) {
  StepCounters t{};
  t.steps = steps;
  t.collective_seconds = 0.1 * steps;
  t.bytes_gift = 7 * steps;
  t.duration_buckets[2] = steps;
  return t;
}

TEST(RankCountersTest, DifferencesOfGoodSamples) {
  auto d = CountersSince(Layer(10), Layer(14));
  ASSERT_OK(d);
  EXPECT_EQ(d->steps, 4);
  EXPECT_EQ(d->n, 400);
  EXPECT_EQ(d->upper, 12);
  EXPECT_DOUBLE_EQ(d->x_sq, 40.0);
  EXPECT_DOUBLE_EQ(d->xhat_x, -4.0);
  EXPECT_EQ(d->factor_version, 3);
  auto t = CountersSince(Steps(10), Steps(15));
  ASSERT_OK(t);
  EXPECT_EQ(t->steps, 5);
  EXPECT_EQ(t->bytes_gift, 35);
  EXPECT_EQ(t->duration_buckets[2], 5);
  ASSERT_OK(CountersSince(LayerCounters{}, Layer(0)));
}

// A version's probes are counted from its first, not differenced: a probe
// step that two polls see on different ranks counts once (telemetry.cc).
TEST(RankCountersTest, VersionProbesCountFromTheVersionsFirstProbe) {
  LayerCounters was = Layer(8), now = Layer(16);  // 2, then 4 probes of v3
  auto d = CountersSince(was, now);
  ASSERT_OK(d);
  EXPECT_EQ(d->probes, 2);
  EXPECT_EQ(d->version_probes, 4);
  now.probe_version = 4;  // the newer two probes: one of v4
  now.version_probes = 1;
  d = CountersSince(was, now);
  ASSERT_OK(d);
  EXPECT_EQ(d->version_probes, 1);
}

TEST(RankCountersTest, ProbesSinceTheVersionMovedMayMixVersions) {
  LayerCounters was = Layer(8), now = Layer(16);  // 2 probes each
  was.probe_version = now.probe_version = 4;
  auto d = CountersSince(was, now);
  ASSERT_OK(d);
  EXPECT_EQ(d->probe_version, 4);
  now.probe_version = 5;  // some of the new probes may be of v4
  now.version_probes = 1;
  d = CountersSince(was, now);
  ASSERT_OK(d);
  EXPECT_EQ(d->probe_version, kMixedProbeVersion);
  EXPECT_EQ(d->version_probes, 1);
  was.probes = was.version_probes =
      0;  // no probe before: all of them are of v5
  was.probe_version = -1;
  d = CountersSince(was, now);
  ASSERT_OK(d);
  EXPECT_EQ(d->probe_version, 5);
  now.probe_version = -3;
  EXPECT_THAT(CountersSince(was, now), StatusIs(absl::StatusCode::kDataLoss,
                                                HasSubstr("probe_version")));
}

TEST(RankCountersTest, MalformedOrDecreasingSamplesAreDataLoss) {
  const LayerCounters was = Layer(10);
  auto bad = [&](auto edit, const char* field) {
    LayerCounters now = Layer(12);
    edit(now);
    EXPECT_THAT(CountersSince(was, now),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(field)))
        << field;
  };
  bad([](LayerCounters& c) { c.steps = 5; }, "steps");  // went down
  bad([](LayerCounters& c) { c.n = std::numeric_limits<int64_t>::max(); }, "n");
  bad([](LayerCounters& c) { c.lower = std::numeric_limits<int64_t>::min(); },
      "lower");
  bad([](LayerCounters& c) { c.err_sq = std::nan(""); }, "err_sq");
  bad([](LayerCounters& c) { c.x_sq = 1.0; }, "x_sq");  // went down
  bad([](LayerCounters& c) { c.xhat_x = INFINITY; }, "xhat_x");
  bad([](LayerCounters& c) { c.upper = c.n; }, "upper");  // upper + lower > n
  bad([](LayerCounters& c) { c.gift_steps = 100; }, "gift_steps");
  bad([](LayerCounters& c) { c.probes = 100; }, "probes");
  // Layer(10) made 2 probes of v3, Layer(12) 3.
  bad([](LayerCounters& c) { c.version_probes = 4; }, "version_probes");
  bad([](LayerCounters& c) { c.version_probes = 1; }, "version_probes");
  bad([](LayerCounters& c) { c.version_probes = -1; }, "version_probes");
  bad(
      [](LayerCounters& c) {
        c.probe_version = 4;  // a new version: at most the new probe is of it
        c.version_probes = 2;
      },
      "version_probes");
  bad([](LayerCounters& c) { c.probe_version = -1; }, "version_probes");

  StepCounters now = Steps(12);
  now.duration_buckets[5] = 1;  // more durations than steps
  EXPECT_THAT(CountersSince(Steps(10), now),
              StatusIs(absl::StatusCode::kDataLoss));
  now = Steps(12);
  now.collective_seconds = -1;
  EXPECT_THAT(CountersSince(Steps(10), now),
              StatusIs(absl::StatusCode::kDataLoss));
  now = Steps(12);
  for (int64_t& b : now.duration_buckets) b = int64_t{1} << 61;
  EXPECT_THAT(CountersSince(Steps(10), now),
              StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace gift::shm
