#include "daemon/core/telemetry.h"

#include <string>

#include "common/status_matchers.h"
#include "daemon/core/series.h"
#include "daemon/metrics/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

v1::LayerSample Sample(const std::string& name, int64_t steps) {
  v1::LayerSample s;
  s.set_name(name);
  s.set_steps(steps);
  s.set_n(100);
  s.set_upper(3);
  s.set_lower(2);
  s.set_probes(1);
  s.set_probe_euclid_sum(0.5);
  s.set_probe_gift_sum(0.25);
  s.set_err_sq(1.0);
  s.set_x_sq(4.0);
  s.set_xhat_x(3.5);
  s.set_audits_gift(1);
  s.set_audit_gift_rel_l2_sum(0.1);
  s.set_beta_probes(1);
  for (int b = 0; b < kBetaGrid; ++b) s.add_probe_beta_sum(0.5 + b);
  return s;
}

TEST(TelemetryTest, AddSampleSumsANodesReport) {
  SelectorSample to;
  to.steps = 7;
  double err = 1, xsq = 1, xhx = 1;
  AddSample(Sample("fc1", 5), &to, &err, &xsq, &xhx);
  AddSample(Sample("fc1", 9), &to, &err, &xsq, &xhx);
  EXPECT_EQ(to.steps, 9);  // the max
  EXPECT_EQ(to.n, 200);
  EXPECT_EQ(to.upper, 6);
  EXPECT_EQ(to.lower, 4);
  EXPECT_EQ(to.probes, 2);
  EXPECT_DOUBLE_EQ(to.probe_gift_sum, 0.5);
  EXPECT_EQ(to.audits_gift, 2);
  EXPECT_DOUBLE_EQ(err, 3.0);
  EXPECT_DOUBLE_EQ(xsq, 9.0);
  EXPECT_DOUBLE_EQ(xhx, 8.0);
  EXPECT_EQ(to.beta_probes, 2);
  EXPECT_DOUBLE_EQ(to.probe_beta_sum[1], 3.0);
}

TEST(TelemetryTest, AddSampleIgnoresABetaGridOfAnotherLength) {
  v1::LayerSample s = Sample("fc1", 1);
  s.add_probe_beta_sum(1.0);  // one too many
  SelectorSample to;
  double err = 0, xsq = 0, xhx = 0;
  AddSample(s, &to, &err, &xsq, &xhx);
  EXPECT_EQ(to.beta_probes, 0);
  EXPECT_DOUBLE_EQ(to.probe_beta_sum[0], 0.0);
  EXPECT_EQ(to.n, 100);
}

TEST(TelemetryTest, MergeSampleSumsTwoReports) {
  v1::LayerSample to;
  MergeSample(Sample("fc1", 4), &to);
  MergeSample(Sample("fc1", 2), &to);
  EXPECT_EQ(to.name(), "fc1");
  EXPECT_EQ(to.steps(), 4);
  EXPECT_EQ(to.n(), 200);
  EXPECT_DOUBLE_EQ(to.err_sq(), 2.0);
  EXPECT_EQ(to.audits_gift(), 2);
  ASSERT_EQ(to.probe_beta_sum_size(), kBetaGrid);
  EXPECT_DOUBLE_EQ(to.probe_beta_sum(0), 1.0);
}

TEST(TelemetryTest, CheckReportRefusesNegativeCountsAndBadAuditSums) {
  v1::ReportTelemetryRequest r;
  *r.add_layers() = Sample("fc1", 1);
  EXPECT_OK(CheckReport(r));
  r.mutable_layers(0)->set_upper(-1);
  EXPECT_THAT(CheckReport(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("negative counts for layer fc1")));
  r.mutable_layers(0)->set_upper(0);
  r.mutable_layers(0)->set_audit_euclid_rel_l2_sum(
      std::numeric_limits<double>::infinity());
  EXPECT_THAT(CheckReport(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("must be finite and >= 0")));
}

// A leader's poll without local ranks: the followers' reports are what it
// observes (and what its probe gauges show).
TEST(TelemetryTest, AFollowersReportReachesTheLeadersNextPoll) {
  DaemonConfig c;
  c.node = "n0";
  c.job_id = "job";
  c.peer_address = "n0:1";  // peered, no link: a leader
  metrics::Registry registry;
  DaemonMetrics m(&registry);
  absl::Mutex mu;
  PeerCoordinator peers(c, "inst", &mu);
  JobLayout layout(c);
  SessionTable sessions;
  Planner planner(PlannerOptions{});
  LayerShapes shapes;
  v1::LayerShape* s = shapes.Add();
  s->set_name("fc1");
  s->set_d_out(16);
  s->set_d_in(24);
  ASSERT_OK(layout.Adopt("job", 2, shapes, [&](const JobLayer& l) {
    return planner.selector().AddLayer({l.name, l.d_out, l.d_in});
  }));
  const std::string instance = "inst";
  SeriesCache series(&m, &layout);
  Telemetry t(
      {&c, &instance, &layout, &sessions, &planner, &peers, &m, &series});
  v1::ReportTelemetryRequest r;
  *r.add_layers() = Sample("fc1", 3);
  *r.add_layers() = Sample("not-adopted", 3);  // ignored
  ASSERT_OK(t.AcceptReport(r));
  t.Read();
  const std::string text = metrics::Serialize(registry);
  EXPECT_THAT(text, HasSubstr("gift_layer_probe_rel_l2"));
  EXPECT_THAT(text, HasSubstr("path=\"gift\""));
  EXPECT_THAT(text, Not(HasSubstr("not-adopted")));
  // The layer's round trip from the report's sums.
  EXPECT_GT(layout.layers()[0].rel_l2, 0);
}

}  // namespace
}  // namespace gift::daemon
