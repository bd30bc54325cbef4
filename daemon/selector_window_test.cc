// The selector's windows (selector_window.h) on their own: the step window's
// sums and trimming, the audit window's merging of one audit step's reports,
// and the sample check. LayerSelector's use of them is in selector_test.cc.
#include "daemon/selector_window.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/status_matchers.h"

namespace gift::daemon::internal {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

SelectorSample Steps(int64_t steps, int64_t hits, int64_t probes = 0) {
  SelectorSample s;
  s.steps = steps;
  s.n = 1000 * steps;
  s.upper = hits;
  s.probes = probes;
  s.probe_euclid_sum = 0.1 * probes;
  s.probe_gift_sum = 0.07 * probes;
  return s;
}

TEST(SampleWindowTest, KeepsTheLastWindowStepsAndTheirSums) {
  SampleWindow w;
  w.Add(Steps(10, 100), 20);
  w.Add(Steps(10, 300), 20);
  EXPECT_EQ(w.samples.size(), 2u);
  EXPECT_DOUBLE_EQ(w.Vulnerability(), 400.0 / 20000);
  EXPECT_TRUE(std::isnan(w.Gain()));  // no probe yet
  w.Add(Steps(10, 500, 2), 20);       // the first sample leaves
  EXPECT_EQ(w.samples.size(), 2u);
  EXPECT_EQ(w.sum.steps, 20);
  EXPECT_DOUBLE_EQ(w.Vulnerability(), 800.0 / 20000);
  EXPECT_NEAR(w.Gain(), 0.3, 1e-12);
  EXPECT_NEAR(w.ProbeEuclid(), 0.1, 1e-12);
  EXPECT_NEAR(w.ProbeGift(), 0.07, 1e-12);
  w.Trim(5);  // a shorter window keeps the newest sample
  EXPECT_EQ(w.samples.size(), 1u);
  EXPECT_EQ(w.sum.upper, 500);
}

TEST(AuditWindowTest, MergesOneAuditStepAndKeepsTheLastAudits) {
  AuditWindow a;
  bool fresh = false;
  a.Add({true, 1, 0.2, 100}, 2, &fresh);
  EXPECT_TRUE(fresh);
  a.Add({true, 1, 0.4, 100 + kAuditMergeSteps}, 2, &fresh);  // same step
  EXPECT_FALSE(fresh);
  int n = 0;
  EXPECT_DOUBLE_EQ(a.Mean(true, &n), 0.3);
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(std::isnan(a.Mean(false, &n)));
  EXPECT_EQ(n, 0);
  a.Add({false, 1, 0.1, 200}, 2, &fresh);
  a.Add({true, 2, 0.2, 300}, 2, &fresh);  // the first leaves
  EXPECT_EQ(a.entries.size(), 2u);
  EXPECT_DOUBLE_EQ(a.Mean(true, &n), 0.1);
  EXPECT_EQ(n, 1);
}

TEST(LayerStateTest, EuclideanAuditsCalibrateAgainstTheLocalRoundTrip) {
  SelectorPolicy policy;
  policy.audit_window = 2;
  LayerState st;
  for (int i = 0; i < 3; ++i) {
    SelectorSample s = Steps(100, 10);
    s.audits_euclid = 1;
    s.audit_euclid_rel_l2_sum = 0.2;
    s.round_trip_err_sq = 0.01;  // local RelL2 0.1
    s.round_trip_x_sq = 1;
    st.Add(s, policy);
  }
  ASSERT_EQ(st.calibration.size(), 2u);
  EXPECT_NEAR(st.calibration.back(), 2.0, 1e-12);
  EXPECT_EQ(st.steps_seen, 300);
  policy.audit_window = 1;
  st.Trim(policy);
  EXPECT_EQ(st.calibration.size(), 1u);
  EXPECT_EQ(st.audits.entries.size(), 1u);
}

TEST(ValidateSampleTest, NamesTheLayer) {
  SelectorSample s = Steps(1, 0);
  EXPECT_OK(ValidateSample("fc1", s));
  s.upper = s.n + 1;
  EXPECT_THAT(ValidateSample("fc1", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(ValidateSample("fc1", s).message()),
              HasSubstr("layer fc1 reports"));
  s = Steps(1, 0);
  s.audits_gift = 0;
  s.audit_gift_rel_l2_sum = 0.5;  // a sum without audits
  EXPECT_THAT(ValidateSample("fc1", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::daemon::internal
