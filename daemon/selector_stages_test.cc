// The decision stages (selector_stages.h) through LayerSelector: the audit
// rule (stage 4: conviction, reference, calibration, bar and back-off),
// gain_hold (stage 2) and the gain guard's probation (stage 3: probes per
// factor version, the accepted version). The other stages' tests are in
// selector_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "daemon/selector.h"
#include "daemon/selector_testing.h"

namespace gift::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(AuditTest, NoAuditsShowNaNAndTheProbeReference) {
  LayerScore s = Decide().scores["l0"];
  EXPECT_TRUE(std::isnan(s.audit_gift_rel_l2));
  EXPECT_TRUE(std::isnan(s.audit_euclid_rel_l2));
  EXPECT_EQ(s.audit_gift_audits, 0);
  EXPECT_EQ(s.audit_euclid_audits, 0);
  EXPECT_NEAR(s.audit_reference_rel_l2, 0.05, 1e-12);
  EXPECT_EQ(s.audit_reference, "probe");
  EXPECT_EQ(s.audit_removals, 0);
  EXPECT_FALSE(s.audit_barred);
}

TEST_F(AuditTest, AppliedErrorAboveTheProbeEuclideanTakesTheLayerOff) {
  // One audit is a single step: not enough.
  SelectionDecision d = Step(0.5, true, 0.081);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_NEAR(d.scores["l0"].audit_gift_rel_l2, 0.081, 1e-12);
  EXPECT_EQ(d.scores["l0"].audit_gift_audits, 1);
  d = Step(0.5, true, 0.081);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.candidates, ElementsAre("l0"));  // still gets factors
  EXPECT_TRUE(d.changed);
  const LayerScore& s = d.scores["l0"];
  EXPECT_THAT(s.reason,
              HasSubstr("candidate, not selected: audit: applied RelL2 0.081 "
                        "> Euclidean 0.05 (probe) · 1.1 over 2 audits "
                        "(removal 1; back after 3 Euclidean audits, a factor "
                        "newer than v1 and gain >= 0.055)"));
  EXPECT_EQ(s.audit_gift_audits, 2);
  EXPECT_EQ(s.audit_reference, "probe");
  EXPECT_EQ(s.audit_removals, 1);
  EXPECT_TRUE(s.audit_barred);
  EXPECT_FALSE(s.held);
}

TEST_F(AuditTest, WithinTheMarginTheLayerStays) {
  for (int i = 0; i < 5; ++i) {
    // 0.055 = 0.05 · 1.1 is the limit; the mean of the window is at it.
    SelectionDecision d = Step(0.5, true, 0.055);
    EXPECT_THAT(d.selected, ElementsAre("l0")) << i;
  }
}

TEST_F(AuditTest, TheAuditedEuclideanIsTheReferenceWhenTheWindowHasIt) {
  // Euclidean audits at 0.035 (the probe says 0.05): GIFT's 0.04 loses
  // (0.035 · 1.1 = 0.0385).
  ASSERT_OK(selector_->SetPolicy([] {
    SelectorPolicy p = Classic();
    p.top_k = 1;
    p.audit_window = 4;
    return p;
  }()));
  settings_["l0"].pin = PinState::kOut;
  Step(0.5, false, 0.035);
  Step(0.5, false, 0.035);
  settings_["l0"].pin = PinState::kAuto;
  EXPECT_THAT(Step().selected, ElementsAre("l0"));
  SelectionDecision d = Step(0.5, true, 0.04);
  EXPECT_EQ(d.scores["l0"].audit_reference, "audit");
  EXPECT_NEAR(d.scores["l0"].audit_reference_rel_l2, 0.035, 1e-12);
  EXPECT_NEAR(d.scores["l0"].audit_euclid_rel_l2, 0.035, 1e-12);
  EXPECT_EQ(d.scores["l0"].audit_euclid_audits, 2);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  d = Step(0.5, true, 0.04);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("applied RelL2 0.04 > Euclidean 0.035 (audited) · 1.1 "
                        "over 2 audits"));
}

TEST_F(AuditTest, TheWindowAveragesTheLastAudits) {
  // audit_window 3: 0.03, 0.03, then 0.2 → mean 0.0867 > 0.055.
  EXPECT_THAT(Step(0.5, true, 0.03).selected, ElementsAre("l0"));
  EXPECT_THAT(Step(0.5, true, 0.03).selected, ElementsAre("l0"));
  SelectionDecision d = Step(0.5, true, 0.2);
  EXPECT_NEAR(d.scores["l0"].audit_gift_rel_l2, 0.26 / 3, 1e-12);
  EXPECT_THAT(d.selected, IsEmpty());
}

TEST_F(AuditTest, OldAuditsAgeOutOfTheWindow) {
  // Two bad audits of an earlier GIFT stretch lie in the window while the
  // layer is pinned out; three good Euclidean ones push them out.
  settings_["l0"].pin = PinState::kIn;
  Step(0.5, true, 0.09);
  SelectionDecision d = Step(0.5, true, 0.09);
  EXPECT_THAT(d.selected, ElementsAre("l0"));  // pins override
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: pinned in; the audit objects: applied "
                        "RelL2 0.09 > Euclidean 0.05 (probe) · 1.1 over 2 "
                        "audits"));
  EXPECT_EQ(d.scores["l0"].audit_removals, 0);
  settings_["l0"].pin = PinState::kOut;
  for (int i = 0; i < 3; ++i) Step(0.5, false, 0.05);
  settings_["l0"].pin = PinState::kAuto;
  d = Step();
  EXPECT_EQ(d.scores["l0"].audit_gift_audits, 0);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
}

TEST_F(AuditTest, ABarredLayerReturnsAfterTheEvidenceAgesOutAndANewFactor) {
  Step(0.5, true, 0.09);
  ASSERT_THAT(Step(0.5, true, 0.09).selected, IsEmpty());
  // The probe still says 0.5, the factor is the same: off.
  SelectionDecision d = Step(0.5, false, 0.05);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("barred by the audit (removal 1: applied RelL2 0.09 > "
                        "Euclidean 0.05 (probe) · 1.1 over 2 audits): back "
                        "after 3 Euclidean audits (1 so far) and a factor "
                        "newer than v1"));
  Step(0.5, false, 0.05);
  d = Step(0.5, false, 0.05);  // three Euclidean audits, factor still v1
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_TRUE(d.scores["l0"].audit_barred);
  // A new factor: the bar lifts, but the gain must reach 0.05 · 1.1.
  d = Step(0.052, false, -1, 2);
  EXPECT_FALSE(d.scores["l0"].audit_barred);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("candidate, not selected: gain 0.052 < 0.055"));
  d = Step(0.06, false, -1, 2);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: gain 0.06 >= 0.055 (back after an audit "
                        "removal)"));
  EXPECT_EQ(d.scores["l0"].audit_removals, 1);
  // Back on the ordinary guard: 0.05 keeps it.
  EXPECT_THAT(Step(0.05, false, -1, 2).selected, ElementsAre("l0"));
}

// The probe keeps saying 0.5 and every GIFT audit says GIFT is worse: each
// removal doubles the wait, so the layer flips O(log n) times, not every
// few audits.
TEST_F(AuditTest, RepeatedRemovalsBackOffSoTheLayerDoesNotOscillate) {
  std::vector<int> removed_at;  // audit number of each removal
  int changes = 0;
  int64_t version = 1;
  for (int audit = 0; audit < 120; ++audit) {
    const bool on_gift = !Decide().selected.empty();
    SelectionDecision d = Step(0.5, on_gift, on_gift ? 0.09 : 0.05, ++version);
    if (d.changed) ++changes;
    if (on_gift && d.selected.empty()) removed_at.push_back(audit);
  }
  // Removals after 2 GIFT audits, then 3, 6, 12, 24, 48 Euclidean ones.
  ASSERT_GE(removed_at.size(), 4u);
  EXPECT_LE(removed_at.size(), 6u);
  for (size_t i = 2; i < removed_at.size(); ++i) {
    EXPECT_GT(removed_at[i] - removed_at[i - 1],
              removed_at[i - 1] - removed_at[i - 2])
        << i;
  }
  EXPECT_LE(changes, 2 * static_cast<int>(removed_at.size()) + 1);
  EXPECT_EQ(Decide().scores["l0"].audit_removals,
            static_cast<int64_t>(removed_at.size()));
}

TEST_F(AuditTest, ReportsOfOneAuditStepInTwoObservationsAreOneAudit) {
  // Ranks 0-1 polled before the step, 2-3 after it: one audit, not two.
  SelectorSample a = WithAudit(Sample(0.2, 1, 0, 0, 1), true, 0.09);
  SelectorSample b = WithAudit(Sample(0.2, 1, 0, 0, 1), true, 0.09);
  ASSERT_OK(Observe("l0", a));
  EXPECT_THAT(Decide().selected, ElementsAre("l0"));
  ASSERT_OK(Observe("l0", b));
  SelectionDecision d = Decide();
  EXPECT_EQ(d.scores["l0"].audit_gift_audits, 1);
  EXPECT_NEAR(d.scores["l0"].audit_gift_rel_l2, 0.09, 1e-12);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  // The next audit step, 100 steps on, is the second.
  ASSERT_OK(Observe("l0", Sample(0.2, 98, 5, 0.5, 1)));
  d = Step(0.5, true, 0.09);
  EXPECT_EQ(d.scores["l0"].audit_gift_audits, 2);
  EXPECT_THAT(d.selected, IsEmpty());
}

// The applied gradient's error is larger than a local round trip's (in the
// demo model, Euclidean audits read 1.15-1.33 times the local figure): the
// probe reference is scaled by what the Euclidean audits measured.
TEST_F(AuditTest, TheLayersOwnEuclideanAuditsCalibrateTheProbeReference) {
  settings_["l0"].pin = PinState::kOut;
  Step(0.5, false, 0.06);  // probe Euclidean 0.05: calibration 1.2
  settings_["l0"].pin = PinState::kAuto;
  Step();
  // Three GIFT audits push the Euclidean one out of the window; the
  // reference is now the probe's 0.05 × 1.2.
  Step(0.5, true, 0.065);
  Step(0.5, true, 0.065);
  SelectionDecision d = Step(0.5, true, 0.065);
  EXPECT_EQ(d.scores["l0"].audit_euclid_audits, 0);
  EXPECT_EQ(d.scores["l0"].audit_reference, "probe");
  EXPECT_NEAR(d.scores["l0"].audit_probe_scale, 1.2, 1e-12);
  EXPECT_NEAR(d.scores["l0"].audit_reference_rel_l2, 0.06, 1e-12);
  EXPECT_THAT(d.selected, ElementsAre("l0"));  // 0.065 < 0.066
  d = Step(0.5, true, 0.08);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("applied RelL2 0.07 > Euclidean 0.06 (probe 0.05 × "
                        "calibration 1.2) · 1.1 over 3 audits"));
}

TEST_F(SelectorTest, OtherLayersRoundTripsCalibrateWithoutAnOwnAudit) {
  SelectorPolicy p = Classic();
  p.top_k = 1;
  Make(p, 3);
  // l1 and l2 (Euclidean, no probes) audit at 1.2 and 1.3 times their local
  // round trip (err² / x² = 0.025² and 0.02²).
  auto euclid = [&](const std::string& name, double local, double audited) {
    SelectorSample s = WithAudit(Sample(0.01, 50), false, audited);
    s.round_trip_x_sq = 4;
    s.round_trip_err_sq = 4 * local * local;
    ASSERT_OK(Observe(name, s));
  };
  ASSERT_OK(Observe("l0", Sample(0.2, 50, 5, 0.5, 1)));
  euclid("l1", 0.025, 0.03);
  euclid("l2", 0.02, 0.026);
  SelectionDecision d = Decide();
  ASSERT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_NEAR(d.scores["l0"].audit_probe_scale, 1.25, 1e-12);
  EXPECT_NEAR(d.scores["l0"].audit_reference_rel_l2, 0.0625, 1e-12);
  EXPECT_EQ(d.scores["l1"].audit_reference, "audit");
  EXPECT_TRUE(std::isnan(d.scores["l1"].audit_probe_scale));
}

TEST_F(SelectorTest, GainHoldKeepsGainingLayersInTheTopK) {
  SelectorPolicy p = Classic();
  p.top_k = 1;
  p.hysteresis = 0.1;
  p.gain_hold = 2;
  Make(p, 2);
  ASSERT_OK(Observe("l0", Sample(0.1, 50, kProbationProbes, 0.5)));
  ASSERT_OK(Observe("l1", Sample(0.05, 50, kProbationProbes, 0.5)));
  SelectionDecision d = Decide();
  ASSERT_THAT(d.selected, ElementsAre("l0"));
  // Selected at the last Decide with a gain above the guard: gaining.
  Feed({0.1, 0.105});
  d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("in top-1 (gaining: kept until a newcomer exceeds "
                        "0.22)"));
  // 1.5 times its score does not displace a gaining layer, 2.3 times does.
  Feed({0.1, 0.15});
  EXPECT_THAT(Decide().candidates, ElementsAre("l0"));
  Feed({0.1, 0.23});
  EXPECT_THAT(Decide().candidates, ElementsAre("l1"));
  // A member that does not gain is displaced at the plain margin.
  Feed({0.105, 0.1}, /*gain=*/0.01);  // l1 leaves GIFT; 0.105 < 0.11
  d = Decide();
  EXPECT_THAT(d.candidates, ElementsAre("l1"));
  EXPECT_THAT(d.selected, IsEmpty());
  Feed({0.12, 0.1}, 0.01);
  EXPECT_THAT(Decide().candidates, ElementsAre("l0"));
}

TEST_F(SelectorTest, GainHoldUnderAThreshold) {
  SelectorPolicy p = Classic();
  p.kind = SelectionKind::kThreshold;
  p.threshold = 0.1;
  p.hysteresis = 0.1;
  p.gain_hold = 2;
  Make(p, 1);
  Feed({0.12});
  EXPECT_TRUE(Decide().scores["l0"].selected);
  Feed({0.12});  // selected at the last Decide: now gaining
  Decide();
  Feed({0.05});  // below 0.09 but above 0.09 / 2
  SelectionDecision d = Decide();
  EXPECT_TRUE(d.scores["l0"].selected);
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("(gaining: stays down to 0.045)"));
  Feed({0.04});
  EXPECT_FALSE(Decide().scores["l0"].candidate);
}

// Probation (stage 3): one layer, top-1, no pace; min_gain 0.05, stay 0.045.
class ProbationTest : public SelectorTest {
 protected:
  void SetUp() override {
    SelectorPolicy p = Classic();
    p.top_k = 1;
    p.window_steps = 50;
    Make(p, 1);
  }
  // `steps` steps, newest published factor `version`, `probes` probes made
  // with `probe_version` gaining `gain`, by one rank (its count of the
  // version's probes grows by `probes`).
  SelectionDecision Observe(int64_t version, int64_t probes,
                            int64_t probe_version, double gain,
                            int64_t steps = 50) {
    SelectorSample s = Sample(0.2, steps, probes, gain, version);
    s.probe_version = probe_version;
    EXPECT_OK(SelectorTest::Observe("l0", s));
    return Decide();
  }
  // `d` keeps l0 off the GIFT path, with no accepted version, saying `why`.
  static void ExpectOff(SelectionDecision& d, const std::string& why) {
    EXPECT_THAT(d.selected, IsEmpty());
    EXPECT_EQ(d.scores["l0"].accepted_version, -1);
    EXPECT_THAT(d.scores["l0"].reason, HasSubstr(why));
  }
};

TEST_F(ProbationTest, GainOfAnOlderVersionDoesNotSelectTheNewOne) {
  // v1's probes gained (and were never judged into the path: they arrive
  // with v2 already published): v2 itself has no probe.
  SelectionDecision d = Observe(2, 5, 1, 0.5);
  ExpectOff(d, "candidate, not selected: no gain measured yet on factor v2");
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 0);
  EXPECT_TRUE(std::isnan(d.scores["l0"].gain));
}

TEST_F(ProbationTest, OneProbeOfTheVersionDoesNotSelect) {
  SelectionDecision d = Observe(2, 1, 2, 0.5);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 1);
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("candidate, not selected: factor v2 on probation (1 "
                        "of 2 probe steps, gain 0.5)"));
  // Four ranks' probes of one more step: the second probe step.
  SelectorSample s = Sample(0.2, 1, 4, 0.5, 2);
  s.version_probes = 2;
  ASSERT_OK(selector_->Observe("l0", s));
  d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 2);
  // Probes whose versions mixed count for no version.
  Make(selector_->policy(), 1);
  Observe(2, 1, 2, 0.5, 1);
  d = Observe(2, 3, kMixedProbeVersion, 0.5, 1);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 1);
  // Many ranks' probes of one step are one probe step.
  Make(selector_->policy(), 1);
  s = Sample(0.2, 1, 4, 0.5, 2);
  s.version_probes = 1;
  ASSERT_OK(selector_->Observe("l0", s));
  d = Decide();
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 1);
  // So are one step's probes in two samples: ranks (or nodes) polled on
  // either side of the step; each says it is the version's first.
  Make(selector_->policy(), 1);
  s = Sample(0.2, 1, 1, 0.5, 2);
  ASSERT_OK(selector_->Observe("l0", s));
  Decide();
  ASSERT_OK(selector_->Observe("l0", s));
  d = Decide();
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 1);
}

TEST_F(ProbationTest, TwoGainingProbesOfTheVersionSelectAndAcceptIt) {
  Observe(2, 1, 2, 0.5, 10);
  SelectionDecision d = Observe(2, 1, 2, 0.3, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 2);
  EXPECT_NEAR(d.scores["l0"].gain, 0.4, 1e-12);
  EXPECT_EQ(d.scores["l0"].accepted_version, 2);
  EXPECT_THAT(
      d.scores["l0"].reason,
      HasSubstr("selected: gain 0.4 >= 0.05 on factor v2 (2 probe steps, "
                "lowest 0.3)"));
  // Two probes that do not gain: not selected.
  Make(selector_->policy(), 1);
  Observe(2, 1, 2, 0.5, 10);
  d = Observe(2, 1, 2, -0.6, 10);  // together: gain -0.05
  EXPECT_THAT(d.selected, IsEmpty());
}

TEST_F(ProbationTest, ANewcomerMustGainOnEveryProbeStep) {
  // A gain that decays as the factor ages: the first probe step gains 0.2,
  // the next two nothing. Summed, 0.067 >= 0.05; one step's 0 is not.
  Observe(2, 1, 2, 0.2, 10);
  Observe(2, 1, 2, 0.0, 10);
  SelectionDecision d = Observe(2, 1, 2, 0.0, 10);
  ExpectOff(d,
            "candidate, not selected: gain 0.0667 but one probe step's 0 < "
            "0.05 on factor v2");
  EXPECT_NEAR(d.scores["l0"].gain, 0.2 / 3, 1e-12);
  EXPECT_EQ(d.scores["l0"].gain_lowest, 0.0);
  // Once those steps leave the window, two gaining probe steps select it.
  d = Observe(2, 1, 2, 0.3, 50);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_EQ(d.scores["l0"].gain_probe_steps, 1);
  d = Observe(2, 1, 2, 0.2, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_NEAR(d.scores["l0"].gain_lowest, 0.2, 1e-12);
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: gain 0.25 >= 0.05 on factor v2 (2 probe "
                        "steps, lowest 0.2)"));
  // A layer already on the path keeps a new version on its summed gain.
  d = Observe(3, 1, 3, 0.2, 10);
  d = Observe(3, 1, 3, 0.0, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
}

TEST_F(ProbationTest, EntryGainIsTheBarOfEveryProbeStepOfANewcomer) {
  SelectorPolicy p = selector_->policy();
  p.entry_gain = 0.15;  // the default
  Make(p, 1);
  Observe(2, 1, 2, 0.3, 10);
  SelectionDecision d = Observe(2, 1, 2, 0.12, 10);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("candidate, not selected: gain 0.21 but one probe "
                        "step's 0.12 < 0.15 on factor v2"));
  d = Observe(2, 1, 2, 0.2, 50);  // the two steps leave the window
  d = Observe(2, 1, 2, 0.16, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: gain 0.18 >= 0.15 on factor v2 (2 probe "
                        "steps, lowest 0.16)"));
  // On the path, min_gain and the hysteresis decide: a version gaining 0.05
  // is kept; one below the stay level (0.045) leaves.
  Observe(3, 1, 3, 0.05, 10);
  d = Observe(3, 1, 3, 0.05, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  Observe(4, 1, 4, 0.04, 10);
  d = Observe(4, 1, 4, 0.04, 10);
  EXPECT_THAT(d.selected, IsEmpty());
  // min_gain above entry_gain is the bar.
  p.min_gain = 0.3;
  Make(p, 1);
  Observe(2, 1, 2, 0.25, 10);
  d = Observe(2, 1, 2, 0.25, 10);
  EXPECT_THAT(d.scores["l0"].reason, HasSubstr("gain 0.25 < 0.3"));
}

TEST_F(ProbationTest, ANewcomerNeedsEntryProbesStepsALayerOnThePathTwo) {
  SelectorPolicy p = selector_->policy();
  p.entry_probes = 3;  // one more than the default
  Make(p, 1);
  // A first factor that gains while young and loses as it ages (the demo's
  // w2 layer): two probe steps are not enough to enter, the third sees it.
  Observe(2, 1, 2, 0.3, 10);
  SelectionDecision d = Observe(2, 1, 2, 0.3, 10);
  EXPECT_THAT(d.selected, IsEmpty());
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("factor v2 on probation (2 of 3 probe steps, gain "
                        "0.3)"));
  d = Observe(2, 1, 2, 0.02, 10);
  ExpectOff(d,
            "candidate, not selected: gain 0.207 but one probe step's 0.02 "
            "< 0.05 on factor v2");
  // A factor that keeps its gain enters on its third probe step.
  Observe(3, 1, 3, 0.3, 50);  // the older steps leave the window
  Observe(3, 1, 3, 0.25, 10);
  d = Observe(3, 1, 3, 0.2, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: gain 0.25 >= 0.05 on factor v3 (3 probe "
                        "steps, lowest 0.2)"));
  // On the path a new version is judged on kProbationProbes steps.
  Observe(4, 1, 4, 0.2, 10);
  d = Observe(4, 1, 4, 0.2, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 4);
}

TEST_F(ProbationTest, ANewFactorOfASelectedLayerIsUsedOnTrialThenKept) {
  ASSERT_EQ(Observe(2, 2, 2, 0.5).scores["l0"].accepted_version, 2);
  // v3 published: the path uses it at once, on probation.
  SelectionDecision d = Observe(3, 0, -1, 0, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  d = Observe(3, 1, 3, 0.3, 10);
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: factor v3 on probation (1 of 2 probe "
                        "steps, gain 0.3), in use"));
  EXPECT_FALSE(d.changed);
  d = Observe(3, 1, 3, 0.3, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  EXPECT_FALSE(d.changed);  // a new accepted version is no plan change
}

TEST_F(ProbationTest, ASelectedLayerWhoseNewFactorDoesNotGainLeaves) {
  ASSERT_EQ(Observe(2, 2, 2, 0.5).scores["l0"].accepted_version, 2);
  Observe(3, 1, 3, 0.01, 10);  // v3 on trial
  SelectionDecision d = Observe(3, 1, 3, 0.01, 10);
  ExpectOff(d,
            "candidate, not selected: gain 0.01 < 0.045 on factor v3 (left "
            "the GIFT path)");
  EXPECT_TRUE(d.changed);
  // It comes back only on a version judged to gain.
  d = Observe(4, 1, 4, 0.5, 10);
  EXPECT_THAT(d.selected, IsEmpty());
  d = Observe(4, 1, 4, 0.5, 10);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 4);
}

// While the plan pace holds the leave of a version judged not to gain, the
// path keeps (or goes back to) the newest version judged to gain: a version
// judged at once, then one used on trial first.
TEST_F(ProbationTest, APacedLeaveKeepsTheVersionJudgedToGain) {
  SelectorPolicy p = selector_->policy();
  p.warmup_steps = 0;
  p.plan_interval_steps = 1000;
  Make(p, 1);
  ASSERT_EQ(Observe(2, 2, 2, 0.5).scores["l0"].accepted_version, 2);
  SelectionDecision d = Observe(3, 2, 3, 0.01);  // leaves, but paced
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_TRUE(d.scores["l0"].held);
  EXPECT_EQ(d.scores["l0"].accepted_version, 2);
  d = Observe(4, 1, 4, 0.01, 10);  // v4 on trial
  EXPECT_EQ(d.scores["l0"].accepted_version, 4);
  d = Observe(4, 1, 4, 0.01, 10);  // judged: leaves, but paced
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_TRUE(d.scores["l0"].held);
  EXPECT_EQ(d.scores["l0"].accepted_version, 2);
  d = Observe(4, 1, 4, 0.01, 10);  // still held: still v2
  EXPECT_EQ(d.scores["l0"].accepted_version, 2);
}

// A leader rebuilt from a follower's plan: the path keeps the plan's
// version until a gain is measured, and a held leave goes back to the
// plan's proven version, as the old leader's would have.
TEST_F(ProbationTest, AResumedLayerContinuesWithThePlansVersions) {
  SelectorPolicy p = selector_->policy();
  p.warmup_steps = 0;
  p.plan_interval_steps = 1000;
  Make(p, 1);
  ASSERT_THAT(Observe(2, 0, -1, 0).candidates, ElementsAre("l0"));  // paced
  ASSERT_OK(selector_->Resume({"l0"}, {{"l0", {3, 2}}}));
  SelectionDecision d = Decide();
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  EXPECT_EQ(d.scores["l0"].proven_version, 2);
  EXPECT_THAT(d.scores["l0"].reason,
              HasSubstr("selected: resumed from the job's last plan, no gain "
                        "measured yet"));
  d = Observe(5, 0, -1, 0);  // v5 published, not judged: still v3
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 3);
  d = Observe(5, 2, 5, 0.01, 10);  // judged not to gain: leaves, but paced
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_TRUE(d.scores["l0"].held);
  EXPECT_EQ(d.scores["l0"].accepted_version, 2);
  // Inconsistent versions: a proven one above the accepted one is none.
  Make(p, 1);
  ASSERT_OK(selector_->Resume({"l0"}, {{"l0", {1, 4}}}));
  d = Decide();
  EXPECT_EQ(d.scores["l0"].accepted_version, 1);
  EXPECT_EQ(d.scores["l0"].proven_version, -1);
}

TEST_F(ProbationTest, PinnedInLayersAcceptTheNewestVersion) {
  settings_["l0"].pin = PinState::kIn;
  SelectionDecision d = Observe(5, 0, -1, 0);
  EXPECT_THAT(d.selected, ElementsAre("l0"));
  EXPECT_EQ(d.scores["l0"].accepted_version, 5);
}

TEST_F(ProbationTest, ABadProbeVersionIsRejected) {
  SelectorSample s = Sample(0.2, 10, 1, 0.5, 2);
  s.probe_version = -3;
  EXPECT_THAT(selector_->Observe("l0", s).message(),
              HasSubstr("probe version -3"));
  EXPECT_THAT(Decide().scores["l0"].gain_probe_steps, 0);
}

}  // namespace
}  // namespace gift::daemon
