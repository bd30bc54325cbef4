#include "daemon/metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace gift::metrics {
namespace {

TEST(RegistryTest, CounterText) {
  Registry registry;
  auto& steps = registry.AddCounter("gift_steps_total", "Steps seen.", {});
  steps.WithLabels({}).Increment();
  steps.WithLabels({}).Increment(2.5);
  EXPECT_EQ(registry.Serialize(),
            "# HELP gift_steps_total Steps seen.\n"
            "# TYPE gift_steps_total counter\n"
            "gift_steps_total 3.5\n");
}

TEST(RegistryTest, CounterIgnoresNegativeAndNaN) {
  Registry registry;
  Counter& c = registry.AddCounter("c_total", "C.", {}).WithLabels({});
  c.Increment(4);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 4);
}

TEST(RegistryTest, GaugeTextChildrenSortedByLabelValues) {
  Registry registry;
  auto& g = registry.AddGauge("gift_score", "Score.", {"node", "rank"});
  g.WithLabels({"n1", "1"}).Set(-0.25);
  g.WithLabels({"n0", "3"}).Set(1e21);
  g.WithLabels({"n0", "1"}).Add(2);
  g.WithLabels({"n0", "1"}).Add(-0.5);
  EXPECT_EQ(registry.Serialize(),
            "# HELP gift_score Score.\n"
            "# TYPE gift_score gauge\n"
            "gift_score{node=\"n0\",rank=\"1\"} 1.5\n"
            "gift_score{node=\"n0\",rank=\"3\"} 1e+21\n"
            "gift_score{node=\"n1\",rank=\"1\"} -0.25\n");
}

TEST(RegistryTest, NonFiniteGaugeValues) {
  Registry registry;
  auto& g = registry.AddGauge("g", "G.", {"k"});
  g.WithLabels({"a"}).Set(INFINITY);
  g.WithLabels({"b"}).Set(-INFINITY);
  g.WithLabels({"c"}).Set(NAN);
  EXPECT_EQ(registry.Serialize(),
            "# HELP g G.\n# TYPE g gauge\n"
            "g{k=\"a\"} +Inf\ng{k=\"b\"} -Inf\ng{k=\"c\"} NaN\n");
}

TEST(RegistryTest, HistogramObserveBuckets) {
  Registry registry;
  Histogram& h =
      registry.AddHistogram("gift_step_seconds", "Step time.", {}, {0.1, 1})
          .WithLabels({});
  h.Observe(0.5);
  h.ObserveBuckets({2, 0, 1}, 2.25);  // two fast, one slow
  h.ObserveBuckets({1, 1}, 9);        // wrong size: ignored
  std::vector<uint64_t> cumulative;
  double sum = 0;
  uint64_t count = 0;
  h.Snapshot(&cumulative, &sum, &count);
  EXPECT_EQ(cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_DOUBLE_EQ(sum, 2.75);
  EXPECT_EQ(count, 4u);
}

TEST(RegistryTest, HistogramText) {
  Registry registry;
  auto& lat =
      registry.AddHistogram("gift_refresh_duration_seconds", "Refresh time.",
                            {"layer"}, {0.001, 0.01, 0.1, 1});
  Histogram& h = lat.WithLabels({"fc2"});
  h.Observe(0.02);
  h.Observe(0.01);  // on a bound: counts in that bucket (le is inclusive)
  h.Observe(5);
  lat.WithLabels({"fc1"});  // a child with no observations
  EXPECT_EQ(
      registry.Serialize(),
      "# HELP gift_refresh_duration_seconds Refresh time.\n"
      "# TYPE gift_refresh_duration_seconds histogram\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc1\",le=\"0.001\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc1\",le=\"0.01\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc1\",le=\"0.1\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc1\",le=\"1\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc1\",le=\"+Inf\"} 0\n"
      "gift_refresh_duration_seconds_sum{layer=\"fc1\"} 0\n"
      "gift_refresh_duration_seconds_count{layer=\"fc1\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc2\",le=\"0.001\"} 0\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc2\",le=\"0.01\"} 1\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc2\",le=\"0.1\"} 2\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc2\",le=\"1\"} 2\n"
      "gift_refresh_duration_seconds_bucket{layer=\"fc2\",le=\"+Inf\"} 3\n"
      "gift_refresh_duration_seconds_sum{layer=\"fc2\"} 5.03\n"
      "gift_refresh_duration_seconds_count{layer=\"fc2\"} 3\n");
}

TEST(RegistryTest, HistogramSnapshotIsCumulative) {
  Histogram h({1, 2});
  for (double v : {0.5, 1.5, 1.5, 3.0, std::nan("")}) h.Observe(v);
  std::vector<uint64_t> cumulative;
  double sum;
  uint64_t count;
  h.Snapshot(&cumulative, &sum, &count);
  EXPECT_EQ(cumulative, (std::vector<uint64_t>{1, 3, 5}));
  EXPECT_EQ(count, 5u);
  EXPECT_TRUE(std::isnan(sum));
}

TEST(RegistryTest, EscapesLabelValuesAndHelp) {
  Registry registry;
  auto& g = registry.AddGauge("g", "Line one\nC:\\path \"q\"", {"path"});
  g.WithLabels({"a\\b\"c\nd"}).Set(1);
  EXPECT_EQ(registry.Serialize(),
            "# HELP g Line one\\nC:\\\\path \"q\"\n"
            "# TYPE g gauge\n"
            "g{path=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(RegistryTest, EmptyFamiliesKeepCreationOrder) {
  Registry registry;
  registry.AddGauge("zeta", "Z.", {"a"});
  registry.AddCounter("alpha_total", "A.", {});
  registry.AddHistogram("mid_seconds", "M.", {}, {1});
  EXPECT_EQ(registry.Serialize(),
            "# HELP zeta Z.\n# TYPE zeta gauge\n"
            "# HELP alpha_total A.\n# TYPE alpha_total counter\n"
            "# HELP mid_seconds M.\n# TYPE mid_seconds histogram\n");
}

TEST(RegistryTest, WithLabelsReturnsStableChild) {
  Registry registry;
  auto& f = registry.AddCounter("c_total", "C.", {"rank"});
  Counter* first = &f.WithLabels({"0"});
  for (int i = 0; i < 100; ++i) f.WithLabels({std::to_string(i + 1)});
  EXPECT_EQ(&f.WithLabels({"0"}), first);
}

TEST(RegistryTest, RemoveDropsChild) {
  Registry registry;
  auto& f = registry.AddGauge("g", "G.", {"rank"});
  f.WithLabels({"0"}).Set(1);
  f.WithLabels({"1"}).Set(2);
  f.Remove({"0"});
  f.Remove({"7"});  // absent: no-op
  EXPECT_EQ(registry.Serialize(),
            "# HELP g G.\n# TYPE g gauge\ng{rank=\"1\"} 2\n");
  EXPECT_EQ(f.WithLabels({"0"}).Value(), 0);  // recreated fresh
}

TEST(RegistryTest, ConcurrentUpdatesAreExact) {
  Registry registry;
  auto& counters = registry.AddCounter("c_total", "C.", {"k"});
  auto& gauges = registry.AddGauge("g", "G.", {});
  auto& hists = registry.AddHistogram("h", "H.", {}, {0.5});
  constexpr int kThreads = 8, kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        // Shared child created concurrently on first use, too.
        counters.WithLabels({"shared"}).Increment();
        gauges.WithLabels({}).Add(t % 2 == 0 ? 2 : -1);
        hists.WithLabels({}).Observe(i % 2);
        if (i % 1000 == 0) registry.Serialize();  // readers race writers
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counters.WithLabels({"shared"}).Value(), kThreads * kIters);
  EXPECT_EQ(gauges.WithLabels({}).Value(), (kThreads / 2) * kIters);
  std::vector<uint64_t> cumulative;
  double sum;
  uint64_t count;
  hists.WithLabels({}).Snapshot(&cumulative, &sum, &count);
  EXPECT_EQ(count, uint64_t{kThreads * kIters});
  EXPECT_EQ(cumulative[0], uint64_t{kThreads * kIters / 2});
  EXPECT_EQ(sum, kThreads * kIters / 2);
}

class RegistryDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  Registry registry_;
};

TEST_F(RegistryDeathTest, BadMetricName) {
  EXPECT_DEATH(registry_.AddGauge("bad-name", "H.", {}),
               "invalid metric name \"bad-name\"");
  EXPECT_DEATH(registry_.AddGauge("", "H.", {}), "invalid metric name");
}

TEST_F(RegistryDeathTest, BadLabelName) {
  EXPECT_DEATH(registry_.AddGauge("g", "H.", {"ok", "no-dash"}),
               "invalid label name \"no-dash\"");
  EXPECT_DEATH(registry_.AddGauge("g", "H.", {"__reserved"}),
               "invalid label name \"__reserved\"");
  EXPECT_DEATH(registry_.AddGauge("g", "H.", {"a", "a"}),
               "duplicate label name \"a\"");
}

TEST_F(RegistryDeathTest, CounterWithoutTotal) {
  EXPECT_DEATH(registry_.AddCounter("gift_steps", "H.", {}),
               "counter \"gift_steps\" must end in _total");
}

TEST_F(RegistryDeathTest, HistogramLeLabelAndBadBounds) {
  EXPECT_DEATH(registry_.AddHistogram("h", "H.", {"le"}, {1}),
               "label name \"le\" is reserved");
  EXPECT_DEATH(registry_.AddHistogram("h", "H.", {}, {1, 1}),
               "not strictly increasing");
  EXPECT_DEATH(registry_.AddHistogram("h", "H.", {}, {1, INFINITY}),
               "not finite");
}

TEST_F(RegistryDeathTest, DuplicateNames) {
  registry_.AddGauge("g", "H.", {});
  EXPECT_DEATH(registry_.AddGauge("g", "H.", {}),
               "duplicate metric name \"g\"");
  registry_.AddHistogram("h", "H.", {}, {1});
  EXPECT_DEATH(registry_.AddGauge("h_count", "H.", {}),
               "duplicate metric name \"h_count\"");
}

TEST_F(RegistryDeathTest, WrongLabelArity) {
  auto& f = registry_.AddGauge("g", "H.", {"a", "b"});
  EXPECT_DEATH(f.WithLabels({"x"}), "1 label values for 2 labels");
}

}  // namespace
}  // namespace gift::metrics
