#include "daemon/selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "daemon/selector_testing.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(SelectorTest, AddLayerRejectsBadInput) {
  Make(Classic(), 1);
  EXPECT_THAT(selector_->AddLayer({"l0", 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(selector_->AddLayer({"", 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(selector_->AddLayer({"x", 0, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(selector_->HasLayer("l0"));
  EXPECT_FALSE(selector_->HasLayer("x"));
}

TEST_F(SelectorTest, ObserveRejectsBadInput) {
  Make(Classic(), 1);
  EXPECT_THAT(selector_->Observe("nope", Sample(0.1)),
              StatusIs(absl::StatusCode::kNotFound));
  SelectorSample s = Sample(0.1);
  s.upper = -1;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.steps = -1;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.upper = s.n;  // more hits than elements
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1, 10, 1, 0.5);
  s.probe_gift_sum = NAN;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.audits_gift = -1;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.audits_euclid = 1;
  s.audit_euclid_rel_l2_sum = INFINITY;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.audit_gift_rel_l2_sum = 0.1;  // a sum without audits
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1, 10, 1, 0.5);
  s.beta_probes = 2;  // more grid probes than probes
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1, 10, 1, 0.5);
  s.beta_probes = 1;
  s.probe_beta_sum = {0.01, NAN, 0.02};
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1, 10, 1, 0.5);
  s.probe_beta_sum = {0.01, 0, 0};  // a sum without grid probes
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1, 10, 1, 0.5, 1);
  s.version_probes = -1;
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s = Sample(0.1);
  s.version_probes = 1;  // a version's probe count without probes
  EXPECT_THAT(selector_->Observe("l0", s),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nothing was recorded.
  EXPECT_EQ(Decide().scores["l0"].vulnerability, 0);
}

TEST_F(SelectorTest, ScoresAreWindowedSums) {
  SelectorPolicy p = Classic();
  p.window_steps = 50;
  Make(p, 1);
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(Observe("l0", Sample(i < 5 ? 0.5 : 0.1, 10)));
  }
  EXPECT_NEAR(Decide().scores["l0"].vulnerability, 0.1, 1e-9);
  // Window 50 with 30-step samples keeps two (60 steps).
  ASSERT_OK(Observe("l0", Sample(0.4, 30)));
  EXPECT_NEAR(Decide().scores["l0"].vulnerability, (0.1 * 2 + 0.4 * 3) / 5,
              1e-9);
  // The gain averages the probes in the window; NaN before any probe.
  EXPECT_TRUE(std::isnan(Decide().scores["l0"].gain));
  ASSERT_OK(Observe("l0", Sample(0.4, 10, 2, 0.3)));
  ASSERT_OK(Observe("l0", Sample(0.4, 10, 2, 0.5)));
  EXPECT_NEAR(Decide().scores["l0"].gain, 0.4, 1e-9);
}

TEST_F(SelectorTest, WindowLengthChangeAppliesToHeldSamples) {
  SelectorPolicy p = Classic();
  p.window_steps = 100;
  Make(p, 1);
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(Observe("l0", Sample(i < 8 ? 0.5 : 0.1, 10)));
  }
  EXPECT_NEAR(Decide().scores["l0"].vulnerability, 0.42, 1e-9);
  p.window_steps = 20;
  ASSERT_OK(selector_->SetPolicy(p));
  EXPECT_NEAR(Decide().scores["l0"].vulnerability, 0.1, 1e-9);
}

TEST_F(SelectorTest, BadPolicyLeavesStateUnchanged) {
  SelectorPolicy p = Classic();
  p.top_k = 2;
  Make(p, 3);
  Feed({0.3, 0.2, 0.1});
  SelectionDecision before = Decide();
  SelectorPolicy bad = p;
  bad.top_k = 0;
  bad.window_steps = 1;
  EXPECT_THAT(selector_->SetPolicy(bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(selector_->policy().top_k, 2);
  EXPECT_EQ(selector_->policy().window_steps, p.window_steps);
  SelectionDecision after = Decide();
  EXPECT_EQ(after.candidates, before.candidates);
  EXPECT_FALSE(after.changed);
}

TEST_F(SelectorTest, TopKPicksTheMostVulnerable) {
  SelectorPolicy p = Classic();
  p.top_k = 2;
  Make(p, 5);
  Feed({0.01, 0.3, 0.02, 0.2, 0});
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l1", "l3"));
  EXPECT_THAT(d.selected, ElementsAre("l1", "l3"));
  EXPECT_TRUE(d.changed);
  EXPECT_THAT(d.scores["l1"].reason, HasSubstr("selected: gain 0.5 >= 0.05"));
  EXPECT_THAT(d.scores["l2"].reason,
              HasSubstr("vulnerability 0.02 not in top-2"));
  EXPECT_FALSE(Decide().changed);
}

TEST_F(SelectorTest, LayersWithoutDataAreNeverAutoCandidates) {
  SelectorPolicy p = Classic();
  p.top_k = 4;
  Make(p, 3);
  ASSERT_OK(Observe("l0", Sample(0.1, 50, 1, 0.5)));
  ASSERT_OK(Observe("l1", Sample(0.0, 50, 1, 0.5)));
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l1"].reason, HasSubstr("no boundary hits"));
  EXPECT_THAT(d.scores["l2"].reason, HasSubstr("no telemetry yet"));
}

TEST_F(SelectorTest, TopKHysteresisPreventsFlapping) {
  SelectorPolicy p = Classic();
  p.top_k = 1;
  p.hysteresis = 0.1;
  Make(p, 2);
  Feed({0.10, 0.09});
  EXPECT_THAT(Decide().candidates, ElementsAre("l0"));
  for (int i = 0; i < 10; ++i) {
    // The two scores swap places by less than the margin.
    Feed(i % 2 ? std::vector<double>{0.10, 0.105}
               : std::vector<double>{0.1, 0.095});
    SelectionDecision d = Decide();
    EXPECT_THAT(d.candidates, ElementsAre("l0")) << i;
    EXPECT_FALSE(d.changed) << i;
  }
  Feed({0.10, 0.12});  // beats the weakest member by more than 10%
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l1"));
  EXPECT_TRUE(d.changed);
}

TEST_F(SelectorTest, TopKShrinkDropsTheWeakest) {
  SelectorPolicy p = Classic();
  p.top_k = 3;
  Make(p, 3);
  Feed({0.1, 0.3, 0.2});
  EXPECT_EQ(Decide().candidates.size(), 3u);
  p.top_k = 1;
  ASSERT_OK(selector_->SetPolicy(p));
  EXPECT_THAT(Decide().candidates, ElementsAre("l1"));
}

TEST_F(SelectorTest, ElbowCutsAtTheLargestRatioDrop) {
  SelectorPolicy p = Classic();
  p.kind = SelectionKind::kElbow;
  Make(p, 6);
  Feed({0.2, 0.02, 0.19, 0.018, 0.17, 0});
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l2", "l4"));
  EXPECT_THAT(d.scores["l1"].reason, HasSubstr("below elbow cut"));
  EXPECT_THAT(d.scores["l4"].reason, HasSubstr("above elbow cut"));
}

TEST_F(SelectorTest, ElbowWithoutAnyDropKeepsAllScoredLayers) {
  SelectorPolicy p = Classic();
  p.kind = SelectionKind::kElbow;
  Make(p, 4);
  Feed({0.1, 0.1, 0.1, 0});
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l1", "l2"));
  EXPECT_THAT(d.scores["l0"].reason, HasSubstr("no elbow cut"));
  Make(p, 1);
  Feed({0.1});
  EXPECT_THAT(Decide().candidates, ElementsAre("l0"));
}

// l2 moves across the point where the largest drop switches from below it
// to above it (0.4/x = x/0.01 at x ≈ 0.063).
TEST_F(SelectorTest, ElbowHysteresisPreventsFlapping) {
  for (double h : {0.0, 0.1}) {
    SelectorPolicy p = Classic();
    p.kind = SelectionKind::kElbow;
    p.hysteresis = h;
    Make(p, 4);
    Feed({0.4, 0.4, 0.07, 0.01});
    EXPECT_THAT(Decide().candidates, ElementsAre("l0", "l1", "l2"));
    Feed({0.4, 0.4, 0.058, 0.01});
    SelectionDecision d = Decide();
    if (h > 0) {
      EXPECT_THAT(d.candidates, ElementsAre("l0", "l1", "l2"));
      EXPECT_FALSE(d.changed);
      EXPECT_THAT(d.scores["l2"].reason, HasSubstr("above elbow cut"));
    } else {
      // Without hysteresis the same move flips the set: the test can fail.
      EXPECT_THAT(d.candidates, ElementsAre("l0", "l1"));
    }
    for (int i = 0; h > 0 && i < 6; ++i) {
      Feed({0.4, 0.4, i % 2 ? 0.07 : 0.058, 0.01});
      EXPECT_FALSE(Decide().changed) << i;
    }
  }
  Feed({0.4, 0.4, 0.03, 0.01});  // now clearly on the low side
  EXPECT_THAT(Decide().candidates, ElementsAre("l0", "l1"));
}

TEST_F(SelectorTest, ThresholdEntersAndLeavesWithHysteresis) {
  SelectorPolicy p = Classic();
  p.kind = SelectionKind::kThreshold;
  p.threshold = 0.05;
  p.hysteresis = 0.1;
  Make(p, 1);
  const std::vector<std::pair<double, bool>> steps = {
      {0.052, false}, {0.056, true},  {0.046, true},
      {0.052, true},  {0.044, false}, {0.054, false}};
  for (const auto& [score, expected] : steps) {
    Feed({score});
    SelectionDecision d = Decide();
    EXPECT_EQ(d.scores["l0"].candidate, expected) << score;
  }
  Feed({0.052});
  EXPECT_THAT(Decide().scores["l0"].reason,
              HasSubstr("below threshold 0.05 (enter at 0.055)"));
}

TEST_F(SelectorTest, PinsOverrideThePolicyAndTheGain) {
  SelectorPolicy p = Classic();
  p.top_k = 1;
  Make(p, 3);
  Feed({0.3, 0.2, 0});
  settings_["l0"].pin = PinState::kOut;
  settings_["l2"].pin = PinState::kIn;
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l1", "l2"));
  EXPECT_THAT(d.selected, ElementsAre("l1", "l2"));
  EXPECT_EQ(d.scores["l0"].reason, "pinned out");
  EXPECT_EQ(d.scores["l2"].reason, "selected: pinned in");
  EXPECT_TRUE(std::isnan(d.scores["l2"].gain) || d.scores["l2"].gain > 0);
}

TEST_F(SelectorTest, PinnedInIsSelectedWithoutGain) {
  Make(Classic(), 1);
  settings_["l0"].pin = PinState::kIn;
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_TRUE(std::isnan(d.scores["l0"].gain));
}

TEST_F(SelectorTest, GainGuardEntersAndLeavesWithHysteresis) {
  SelectorPolicy p = Classic();
  p.min_gain = 0.05;
  p.hysteresis = 0.1;
  Make(p, 1);
  ASSERT_OK(Observe("l0", Sample(0.2, 50)));
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0"));
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("candidate, not selected: no gain measured yet"));
  const std::vector<std::pair<double, bool>> steps = {{0.04, false},
                                                      {0.06, true},
                                                      {0.047, true},
                                                      {0.044, false},
                                                      {0.047, false}};
  for (const auto& [gain, expected] : steps) {
    Feed({0.2}, gain);
    d = Decide();
    EXPECT_EQ(d.scores["l0"].selected, expected) << gain;
    EXPECT_TRUE(d.scores["l0"].candidate);
  }
  EXPECT_EQ(d.scores["l0"].reason,
            "candidate, not selected: gain 0.047 < 0.05; "
            "candidate: vulnerability 0.2 in top-8");
}

TEST_F(SelectorTest, BudgetByLayerCountPinnedFirst) {
  SelectorPolicy p = Classic();
  p.max_layers = 2;
  Make(p, 4);
  Feed({0.4, 0.3, 0.2, 0.1});
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0", "l1"));
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l1", "l2", "l3"));
  EXPECT_THAT(d.scores["l2"].reason, HasSubstr("over budget: max_layers 2"));
  settings_["l3"].pin = PinState::kIn;
  d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0", "l3"));
}

TEST_F(SelectorTest, BudgetByFlopsCountsTheTransform) {
  // 128 × 128: low-rank r=32 costs 4·128·128·32 = 2.1e6, full 2·128³ = 4.2e6.
  SelectorPolicy p = Classic();
  p.max_extra_flops = 5e6;
  Make(p, 3);
  Feed({0.4, 0.3, 0.2});
  EXPECT_THAT(Decide().selected, ElementsAre("l0", "l1"));
  settings_["l0"].full = true;
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l1"].reason, HasSubstr("max_extra_flops 5e+06"));
  settings_["l1"].rank = 8;  // 0.5e6: fits beside the full layer
  EXPECT_THAT(Decide().selected, ElementsAre("l0", "l1"));
}

TEST_F(SelectorTest, EarlyRefreshOncePerFactorVersion) {
  SelectorPolicy p = Classic();
  p.window_steps = 10;
  Make(p, 1);
  auto feed = [&](double gain, int64_t version) {
    ASSERT_OK(Observe("l0", Sample(0.2, 10, kProbationProbes, gain, version)));
  };
  feed(0.4, 1);
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_THAT(d.early_refresh, IsEmpty());
  feed(0.03, 1);  // decayed below half of 0.4 and below min_gain
  d = Decide();
  EXPECT_THAT(d.early_refresh, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l0"].reason, HasSubstr("early refresh"));
  feed(0.02, 1);
  EXPECT_THAT(Decide().early_refresh, IsEmpty());  // once per version
  feed(0.02, 2);  // new factor: its best so far is the low gain
  EXPECT_THAT(Decide().early_refresh, IsEmpty());
  feed(0.3, 2);
  EXPECT_THAT(Decide().selected, ElementsAre("l0"));
  feed(0.01, 2);
  EXPECT_THAT(Decide().early_refresh, ElementsAre("l0"));
}

// The version's summed gain lags a decay by the window; its newest probe
// step does not (the demo's w2 layers: 0.29, 0.26, then 0.02).
TEST_F(SelectorTest, EarlyRefreshOnTheNewestProbeStep) {
  SelectorPolicy p = Classic();
  p.window_steps = 50;
  Make(p, 1);
  auto feed = [&](double gain) {
    EXPECT_OK(Observe("l0", Sample(0.2, 10, 1, gain, 1)));
    return Decide();
  };
  feed(0.3);
  SelectionDecision d = feed(0.3);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  d = feed(0.06);  // below half the best, not below min_gain
  EXPECT_THAT(d.early_refresh, IsEmpty());
  EXPECT_NEAR(d.scores["l0"].gain_latest, 0.06, 1e-12);
  d = feed(0.02);  // summed 0.17, the newest step 0.02 < 0.05
  EXPECT_NEAR(d.scores["l0"].gain, 0.17, 1e-12);
  EXPECT_THAT(d.early_refresh, ElementsAre("l0"));
  EXPECT_THAT(d.selected, ElementsAre("l0"));
}

TEST_F(SelectorTest, NoEarlyRefreshWhileGainHolds) {
  SelectorPolicy p = Classic();
  p.window_steps = 10;
  Make(p, 1);
  ASSERT_OK(Observe("l0", Sample(0.2, 10, kProbationProbes, 0.4, 1)));
  Decide();
  // Below half the best but above the guard's entry level.
  ASSERT_OK(Observe("l0", Sample(0.2, 10, kProbationProbes, 0.1, 1)));
  SelectionDecision d = Decide();
  EXPECT_THAT(d.early_refresh, IsEmpty());
  EXPECT_THAT(d.selected, ElementsAre("l0"));
}

// top-k ranks the 4-bit layers apart (their scores are on another scale):
// top_k among the others, top_k_4bit among them, 0 = all of them.
TEST_F(SelectorTest, TopKRanksTheFourBitLayersApart) {
  SelectorPolicy p = Classic();
  p.top_k = 1;
  Make(p, 5);
  for (int i : {2, 3, 4}) settings_[Name(i)].four_bit = true;
  // FP8 scores below 1e-3, 4-bit ones 0.3-0.6: one scale would take only
  // 4-bit layers.
  Feed({0.0008, 0.0005, 0.3, 0.6, 0.4});
  SelectionDecision d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l2", "l3", "l4"));
  EXPECT_THAT(d.scores["l1"].reason, HasSubstr("not in top-1"));
  EXPECT_THAT(d.scores["l2"].reason,
              HasSubstr("in the 4-bit layers (top_k_4bit 0: all)"));
  p.top_k_4bit = 2;
  ASSERT_OK(selector_->SetPolicy(p));
  Feed({0.0008, 0.0005, 0.3, 0.6, 0.4});
  d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l3", "l4"));
  EXPECT_THAT(d.scores["l2"].reason, HasSubstr("not in 4-bit top-2"));
  // A layer's format changes with its settings: ranked in its new class.
  settings_["l1"].four_bit = true;
  Feed({0.0008, 0.9, 0.3, 0.6, 0.4});
  d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0", "l1", "l3"));
  p.top_k_4bit = -1;
  EXPECT_THAT(selector_->SetPolicy(p).message(),
              HasSubstr("selection.top_k_4bit must be >= 0 (got -1)"));
}

TEST_F(SelectorTest, ChangedOnlyWhenSetsChange) {
  SelectorPolicy p = Classic();
  p.top_k = 2;
  Make(p, 3);
  EXPECT_FALSE(Decide().changed);  // empty → empty
  Feed({0.3, 0.2, 0.1});
  EXPECT_TRUE(Decide().changed);
  Feed({0.31, 0.21, 0.1});
  EXPECT_FALSE(Decide().changed);
  Feed({0.3, 0.2, 0.1}, /*gain=*/0.01);  // same candidates, none selected
  SelectionDecision d = Decide();
  EXPECT_TRUE(d.changed);
  EXPECT_THAT(d.selected, IsEmpty());
}

TEST_F(SelectorTest, ResumedLayersStaySelectedUntilAGainIsMeasured) {
  SelectorPolicy p = Classic();
  p.min_gain = 0.05;
  Make(p, 3);
  EXPECT_THAT(selector_->Resume({"l1", "nope"}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Decide().selected, IsEmpty());  // nothing was resumed
  ASSERT_OK(selector_->Resume({"l1", "l2"}));
  settings_["l2"].pin = PinState::kOut;  // pins still win
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l1"));
  EXPECT_THAT(d.candidates, ElementsAre("l1"));
  EXPECT_EQ(d.scores["l1"].reason,
            "selected: resumed from a checkpoint, no telemetry yet");
  // Telemetry without probes: still selected, now by the policy's cut.
  ASSERT_OK(Observe("l1", Sample(0.2, 50)));
  d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l1"));
  EXPECT_THAT(d.scores["l1"].reason,
              HasSubstr("selected: resumed from a checkpoint, no gain "
                        "measured yet; candidate: vulnerability 0.2"));
  // A measured gain below the guard ends it, and it does not come back.
  Feed({0, 0.2}, 0.01);
  d = Decide();
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.candidates, ElementsAre("l1"));
  ASSERT_OK(Observe("l1", Sample(0.2, 1000)));  // probes age out
  EXPECT_THAT(Decide().selected, IsEmpty());
}

// `ranks` ranks' reports of probe step `step` of factor v1 with grid probes
// whose β = 3 beats the factors in use (probe GIFT RelL2 0.025 against
// 0.020), as one sample.
SelectorSample BetaProbeStep(int64_t step, int ranks = 2) {
  SelectorSample s = Sample(0.1, 10, ranks, 0.5, /*version=*/1);
  s.version_probes = step;
  s.beta_probes = ranks;
  s.probe_beta_sum = {ranks * 0.030, ranks * 0.025, ranks * 0.020};
  return s;
}

// β auto: the window's grid probes are averaged into the score, and
// ChooseBeta moves β only to a grid value that clearly beats the factors in
// use, with enough probes.
TEST_F(SelectorTest, BetaGridProbesAreWindowedAndChooseBetaNeedsAClearWin) {
  Make(Classic(), 1);
  ASSERT_OK(selector_->Observe("l0", BetaProbeStep(1)));
  SelectionDecision d = selector_->Decide({});
  LayerScore sc = d.scores.at("l0");
  EXPECT_EQ(sc.beta_probes, 2);
  EXPECT_EQ(sc.beta_probe_steps, 1);
  EXPECT_NEAR(sc.probe_gift_rel_l2, 0.025, 1e-12);
  EXPECT_NEAR(sc.beta_rel_l2[0], 0.030, 1e-12);
  EXPECT_NEAR(sc.beta_rel_l2[2], 0.020, 1e-12);
  // One or two probe steps are not enough evidence, however many ranks.
  EXPECT_EQ(ChooseBeta(sc, 1.0), 1.0);
  ASSERT_OK(selector_->Observe("l0", BetaProbeStep(2)));
  ASSERT_OK(selector_->Observe("l0", Sample(0.1, 10)));  // no probe
  sc = selector_->Decide({}).scores.at("l0");
  EXPECT_EQ(sc.beta_probe_steps, 2);
  EXPECT_EQ(ChooseBeta(sc, 1.0), 1.0);
  ASSERT_OK(selector_->Observe("l0", BetaProbeStep(3)));
  sc = selector_->Decide({}).scores.at("l0");
  EXPECT_EQ(sc.beta_probes, 6);
  EXPECT_EQ(sc.beta_probe_steps, 3);
  EXPECT_EQ(ChooseBeta(sc, 1.0), 3.0);  // 0.020 < 0.95 · 0.025
  EXPECT_EQ(ChooseBeta(sc, 3.0), 3.0);
  // Within the margin: no move.
  EXPECT_EQ(ChooseBeta(sc, 1.0, /*margin=*/0.5), 1.0);
  // Without grid probes (a fixed-β layer): the current β.
  LayerScore none;
  EXPECT_EQ(ChooseBeta(none, 0.7), 0.7);
}

// A probe step whose ranks are polled on either side of it reaches the
// selector in two samples: it counts once towards kMinBetaProbes.
TEST_F(SelectorTest, ABetaProbeStepPolledOnEitherSideCountsOnce) {
  Make(Classic(), 1);
  for (int64_t step = 1; step <= 2; ++step) {  // rank 0's report, then 1's
    ASSERT_OK(selector_->Observe("l0", BetaProbeStep(step, 1)));
    ASSERT_OK(selector_->Observe("l0", BetaProbeStep(step, 1)));
  }
  LayerScore sc = selector_->Decide({}).scores.at("l0");
  EXPECT_EQ(sc.beta_probes, 4);
  EXPECT_EQ(sc.beta_probe_steps, 2);
  EXPECT_EQ(ChooseBeta(sc, 1.0), 1.0);
  // Rank 0 reports steps 3 and 4 in one sample: two steps.
  ASSERT_OK(selector_->Observe("l0", BetaProbeStep(4, 2)));
  sc = selector_->Decide({}).scores.at("l0");
  EXPECT_EQ(sc.beta_probe_steps, 4);
  EXPECT_EQ(ChooseBeta(sc, 1.0), 3.0);
  // Samples leave the 50-step window: step 1 (its first report gone, its
  // second counted nothing), then step 2 with both reports.
  ASSERT_OK(selector_->Observe("l0", Sample(0.1, 10)));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 3);
  ASSERT_OK(selector_->Observe("l0", Sample(0.1, 10)));
  ASSERT_OK(selector_->Observe("l0", Sample(0.1, 10)));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 2);
}

// The steps counted per version: a version's first sample is one step
// (whatever its count: a rank may have probed the version ahead of the
// others), and so is a sample of mixed versions; a later one adds the steps
// above the version's count so far; a count that fell (a rank attached
// again) adds nothing until it passes the old one; a probe step without
// grid probes (β auto turned on within the version) is not counted.
TEST_F(SelectorTest, BetaProbeStepsAcrossVersions) {
  SelectorPolicy p = Classic();
  p.window_steps = 1000;  // no sample leaves the window
  Make(p, 1);
  ASSERT_OK(selector_->Observe("l0", BetaProbeStep(1)));
  SelectorSample v2 = BetaProbeStep(1);
  v2.probe_version = v2.factor_version = 2;
  ASSERT_OK(selector_->Observe("l0", v2));
  SelectorSample mixed = BetaProbeStep(0);
  mixed.probe_version = kMixedProbeVersion;
  ASSERT_OK(selector_->Observe("l0", mixed));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 3);
  SelectorSample plain = Sample(0.1, 10, 1, 0.5, /*version=*/3);
  plain.version_probes = 5;  // five probe steps of v3 without grid probes
  ASSERT_OK(selector_->Observe("l0", plain));
  SelectorSample v3 = BetaProbeStep(6, 1);
  v3.probe_version = v3.factor_version = 3;
  ASSERT_OK(selector_->Observe("l0", v3));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 4);
  ASSERT_OK(selector_->Observe("l0", v2));  // v2's step 1 again: nothing new
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 4);
  v3.version_probes = 2;  // below 6: the count restarted
  ASSERT_OK(selector_->Observe("l0", v3));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 4);
  v3.version_probes = 7;
  ASSERT_OK(selector_->Observe("l0", v3));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 5);
  SelectorSample v4 = BetaProbeStep(3);  // v4's first sample: one step
  v4.probe_version = v4.factor_version = 4;
  ASSERT_OK(selector_->Observe("l0", v4));
  EXPECT_EQ(selector_->Decide({}).scores.at("l0").beta_probe_steps, 6);
}

}  // namespace
}  // namespace gift::daemon
