#include "daemon/core/planner.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "daemon/selector_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The rules without the plan pace (a decision per sample).
SelectorPolicy Unpaced() {
  SelectorPolicy p;
  p.plan_interval_steps = 0;
  p.gain_hold = 1;
  p.window_steps = 10;
  return p;
}

PlannerOptions Options(bool peered = false) {
  PlannerOptions o;
  o.refresh_interval = 50;
  o.audit_interval = 100;
  o.rank = 32;
  o.selection = Unpaced();
  o.beta = 1.0;
  o.peered = peered;
  return o;
}

// `steps` steps of vulnerability 0.2 with probe steps of factor `version`
// measuring `gain` (enough to judge it for a newcomer: entry_probes).
SelectorSample Sample(double gain, int64_t version = -1) {
  SelectorSample s;
  s.steps = 10;
  s.n = 1000000;
  s.upper = 50000;
  s.lower = 150000;
  const int probes = PolicyDefault<int>(policy_field::kEntryProbes);
  s.probes = probes;
  s.probe_euclid_sum = probes * 0.05;
  s.probe_gift_sum = probes * 0.05 * (1 - gain);
  s.factor_version = s.probe_version = version;
  return s;
}

// Layers fc1, fc2 (auto pin, low-rank) in a Planner's selector.
class PlannerTest : public ::testing::Test {
 protected:
  explicit PlannerTest(bool peered = false) : planner_(Options(peered)) {
    for (const char* name : {"fc1", "fc2"}) {
      PlanLayer l;
      l.name = name;
      l.settings.set_pin(v1::PIN_AUTO);
      l.settings.set_transform(v1::TRANSFORM_LOWRANK);
      layers_.push_back(l);
      EXPECT_OK(planner_.selector().AddLayer({name, 64, 128}));
    }
  }
  std::vector<PlanLayer*> Layers() {
    std::vector<PlanLayer*> out;
    for (PlanLayer& l : layers_) out.push_back(&l);
    return out;
  }
  std::vector<const PlanLayer*> ConstLayers() const {
    std::vector<const PlanLayer*> out;
    for (const PlanLayer& l : layers_) out.push_back(&l);
    return out;
  }
  // Feeds `s` to the selector's `layer` as one rank's probes reach it.
  absl::Status Observe(const std::string& layer, const SelectorSample& s) {
    return planner_.selector().Observe(layer, probes_.Count(layer, s));
  }

  Planner planner_;
  std::vector<PlanLayer> layers_;
  RankProbeCounts probes_;
};

// A follower node's planner and its own layers fc1, fc2, which apply the
// leader's plans (`world`: its world size until a plan sets it).
struct Follower {
  explicit Follower(bool peered = false, int world_size = 0)
      : planner(Options(peered)), layers(2), world(world_size) {
    layers[0].name = "fc1";
    layers[1].name = "fc2";
  }
  void Apply(const v1::PeerPlan& p) {
    planner.ApplyPlan(p, &world, {&layers[0], &layers[1]});
  }
  v1::PeerPlan Plan() const {
    return planner.BuildPlan("job", world, {&layers[0], &layers[1]});
  }

  Planner planner;
  std::vector<PlanLayer> layers;
  int world;
};

v1::PeerPlan Plan(int64_t epoch, int64_t term = 0) {
  v1::PeerPlan p;
  p.set_job_id("job");
  p.set_plan_epoch(epoch);
  p.set_term(term);
  return p;
}

TEST_F(PlannerTest, EpochsOnlyIncrease) {
  EXPECT_EQ(planner_.epoch(), 1);
  EXPECT_EQ(planner_.NextEpoch(), 2);
  EXPECT_EQ(planner_.epoch(), 2);
  // A re-attaching rank at epoch 5: continue above it, the node needs it.
  EXPECT_TRUE(planner_.ContinueAbove(5));
  EXPECT_EQ(planner_.epoch(), 6);
  // One below: nothing to raise.
  EXPECT_FALSE(planner_.ContinueAbove(3));
  EXPECT_EQ(planner_.epoch(), 6);
  EXPECT_TRUE(planner_.ContinueAbove(6));
  EXPECT_EQ(planner_.epoch(), 7);
  // A joiner at the current epoch still needs a new one; a reporter not.
  EXPECT_FALSE(planner_.JoinerHolds(6));
  EXPECT_TRUE(planner_.JoinerHolds(7));
  EXPECT_EQ(planner_.NextEpoch(), 8);
  EXPECT_FALSE(planner_.ReporterHolds(8));
  EXPECT_EQ(planner_.epoch(), 8);
  EXPECT_TRUE(planner_.ReporterHolds(12));
  EXPECT_EQ(planner_.NextEpoch(), 13);
  planner_.RaiseEpoch(4);
  EXPECT_EQ(planner_.epoch(), 13);
}

TEST_F(PlannerTest, FollowerHoldsTheNewestRankEpoch) {
  planner_.set_epoch(0);  // a follower before the leader's first plan
  EXPECT_EQ(planner_.HeldEpoch(), 0);
  planner_.NoteRankEpoch(9);
  planner_.NoteRankEpoch(4);
  EXPECT_EQ(planner_.epoch(), 0);
  EXPECT_EQ(planner_.HeldEpoch(), 9);
  // Elected: above the ranks' floor.
  ASSERT_OK(planner_.TakeLead(Layers()));
  EXPECT_EQ(planner_.epoch(), 9);
}

TEST_F(PlannerTest, IgnoresAPlanNotNewerThanTheHeldOneWithinATerm) {
  EXPECT_FALSE(planner_.have_plan());
  EXPECT_TRUE(planner_.HoldLeaderPlan(Plan(5, 1)));
  EXPECT_TRUE(planner_.have_plan());
  EXPECT_EQ(planner_.last_plan().plan_epoch(), 5);
  EXPECT_FALSE(planner_.HoldLeaderPlan(Plan(4, 1)));  // late
  EXPECT_FALSE(planner_.HoldLeaderPlan(Plan(5, 1)));  // repeated
  EXPECT_EQ(planner_.last_plan().plan_epoch(), 5);
  EXPECT_TRUE(planner_.HoldLeaderPlan(Plan(6, 1)));
  EXPECT_EQ(planner_.last_plan().plan_epoch(), 6);
}

TEST_F(PlannerTest, TakesANewerTermsPlanThatRepeatsAnEpoch) {
  ASSERT_TRUE(planner_.HoldLeaderPlan(Plan(6, 1)));
  // The new leader's first plan may repeat the deposed one's epoch.
  EXPECT_TRUE(planner_.HoldLeaderPlan(Plan(6, 2)));
  EXPECT_EQ(planner_.last_plan().term(), 2);
  EXPECT_FALSE(planner_.HoldLeaderPlan(Plan(6, 2)));
  // Elected later: above the plan in use.
  ASSERT_OK(planner_.TakeLead(Layers()));
  EXPECT_EQ(planner_.epoch(), 6);
}

TEST_F(PlannerTest, ApplyingALeaderPlanCopiesKRankAuditAndLayers) {
  v1::PeerPlan p = Plan(7);
  p.set_refresh_interval(20);
  p.set_audit_interval(0);  // set: audits off
  p.set_rank(8);
  p.set_world_size(4);
  v1::PeerLayerPlan* x = p.add_layers();
  x->set_name("fc2");
  x->set_candidate(true);
  x->set_selected(true);
  x->mutable_settings()->set_pin(v1::PIN_IN);
  x->mutable_settings()->set_beta(3.0);
  x->set_refresh_seq(4);
  p.add_layers()->set_name("unknown");  // ignored
  int world = 0;
  planner_.ApplyPlan(p, &world, Layers());
  EXPECT_EQ(planner_.epoch(), 7);
  EXPECT_EQ(planner_.refresh_interval(), 20);
  EXPECT_EQ(planner_.audit_interval(), 0);
  EXPECT_EQ(planner_.rank(), 8);
  EXPECT_EQ(world, 4);
  EXPECT_FALSE(layers_[0].candidate);
  EXPECT_TRUE(layers_[1].candidate);
  EXPECT_TRUE(layers_[1].selected);
  EXPECT_EQ(layers_[1].settings.pin(), v1::PIN_IN);
  EXPECT_EQ(layers_[1].settings.beta(), 3.0);
  EXPECT_EQ(layers_[1].refresh_seq, 4);

  // Missing or invalid fields keep what is held; the world size stays.
  v1::PeerPlan q = Plan(8);
  q.set_audit_interval(-1);
  q.set_world_size(2);
  planner_.ApplyPlan(q, &world, Layers());
  EXPECT_EQ(planner_.epoch(), 8);
  EXPECT_EQ(planner_.refresh_interval(), 20);
  EXPECT_EQ(planner_.audit_interval(), 0);
  EXPECT_EQ(planner_.rank(), 8);
  EXPECT_EQ(world, 4);

  // The held plan, again (a follower's layers arrived).
  ASSERT_TRUE(planner_.HoldLeaderPlan(p));
  layers_[1].refresh_seq = 0;
  planner_.ApplyHeldPlan(&world, Layers());
  EXPECT_EQ(planner_.epoch(), 7);
  EXPECT_EQ(layers_[1].refresh_seq, 4);
}

// A layer without a format in the plan (an older leader's) keeps its own;
// one with a format takes it.
TEST_F(PlannerTest, ApplyingAPlanKeepsALayersFormatTheLeaderLeftUnset) {
  layers_[0].settings.set_format(v1::WIRE_FORMAT_NVFP4);
  layers_[1].settings.set_format(v1::WIRE_FORMAT_NVFP4);
  v1::PeerPlan p = Plan(3);
  v1::PeerLayerPlan* fc1 = p.add_layers();
  fc1->set_name("fc1");
  fc1->mutable_settings()->set_pin(v1::PIN_OUT);
  v1::PeerLayerPlan* fc2 = p.add_layers();
  fc2->set_name("fc2");
  fc2->mutable_settings()->set_format(v1::WIRE_FORMAT_E5M2);
  int world = 0;
  planner_.ApplyPlan(p, &world, Layers());
  EXPECT_EQ(layers_[0].settings.pin(), v1::PIN_OUT);
  EXPECT_EQ(layers_[0].settings.format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(layers_[1].settings.format(), v1::WIRE_FORMAT_E5M2);
}

TEST_F(PlannerTest, BuildingAPlanReflectsTheState) {
  planner_.NextEpoch();
  planner_.set_refresh_interval(25);
  planner_.set_audit_interval(10);
  planner_.SetRank(16, Layers());
  layers_[0].candidate = true;
  layers_[0].settings.set_rank(4);
  layers_[1].selected = true;
  layers_[1].candidate = true;
  v1::PeerPlan p = planner_.BuildPlan("job", 3, ConstLayers());
  EXPECT_EQ(p.job_id(), "job");
  EXPECT_EQ(p.plan_epoch(), 2);
  EXPECT_EQ(p.refresh_interval(), 25);
  EXPECT_EQ(p.audit_interval(), 10);
  EXPECT_EQ(p.rank(), 16);
  EXPECT_EQ(p.world_size(), 3);
  ASSERT_EQ(p.layers_size(), 2);
  EXPECT_EQ(p.layers(0).name(), "fc1");
  EXPECT_TRUE(p.layers(0).candidate());
  EXPECT_FALSE(p.layers(0).selected());
  EXPECT_EQ(p.layers(0).settings().rank(), 4);  // as held
  EXPECT_EQ(p.layers(1).refresh_seq(), 1);      // SetRank refreshed it
  EXPECT_TRUE(p.layers(1).selected());
  EXPECT_EQ(planner_.RankOf(layers_[0].settings), 4);
  EXPECT_EQ(planner_.RankOf(layers_[1].settings), 16);

  // A follower applying it holds the same plan.
  Follower follower;
  follower.Apply(p);
  EXPECT_EQ(follower.Plan().SerializeAsString(), p.SerializeAsString());
}

TEST_F(PlannerTest, SelectorSettingsFollowPinsTransformAndRank) {
  layers_[0].settings.set_pin(v1::PIN_IN);
  layers_[1].settings.set_pin(v1::PIN_OUT);
  layers_[1].settings.set_transform(v1::TRANSFORM_FULL);
  layers_[1].settings.set_rank(8);
  auto s = planner_.SelectorSettingsByLayer(ConstLayers());
  EXPECT_EQ(s["fc1"].pin, PinState::kIn);
  EXPECT_FALSE(s["fc1"].full);
  EXPECT_EQ(s["fc1"].rank, 32);
  EXPECT_EQ(s["fc2"].pin, PinState::kOut);
  EXPECT_TRUE(s["fc2"].full);
  EXPECT_EQ(s["fc2"].rank, 8);
}

TEST_F(PlannerTest, TheSelectorsDecisionSetsCandidateAndSelected) {
  layers_[0].settings.set_pin(v1::PIN_IN);
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_TRUE(s.changed);
  EXPECT_THAT(s.moves, ElementsAre("fc1 selected"));
  EXPECT_TRUE(layers_[0].candidate);
  EXPECT_TRUE(layers_[0].selected);
  EXPECT_FALSE(layers_[1].candidate);
  EXPECT_THAT(layers_[0].score.reason, HasSubstr("pin"));
  EXPECT_EQ(planner_.epoch(), 1);  // the caller's NextEpoch
  // The same decision again: no change.
  s = planner_.ApplySelection(Layers());
  EXPECT_FALSE(s.changed);
  EXPECT_THAT(s.moves, IsEmpty());
  // A layer the policy takes.
  ASSERT_OK(Observe("fc2", Sample(0.4, 1)));
  s = planner_.ApplySelection(Layers());
  EXPECT_TRUE(s.changed);
  EXPECT_THAT(s.moves, ElementsAre("fc2 selected"));
  EXPECT_TRUE(layers_[1].selected);
}

// Probation: the accepted version goes into the layer without a new epoch
// (PeeredPlannerTest: with one, so that followers get it).
TEST_F(PlannerTest, AnAcceptedVersionIsPublishedWithoutANewEpoch) {
  ASSERT_OK(Observe("fc1", Sample(0.4, 1)));
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_TRUE(s.changed);
  EXPECT_TRUE(s.accepted_changed);
  EXPECT_EQ(layers_[0].accepted_version, 1);
  EXPECT_EQ(layers_[1].accepted_version, -1);
  ASSERT_OK(Observe("fc1", Sample(0.4, 2)));
  s = planner_.ApplySelection(Layers());
  EXPECT_FALSE(s.changed);
  EXPECT_TRUE(s.accepted_changed);
  EXPECT_EQ(layers_[0].accepted_version, 2);
  EXPECT_EQ(
      planner_.BuildPlan("job", 2, ConstLayers()).layers(0).accepted_version(),
      2);
  s = planner_.ApplySelection(Layers());
  EXPECT_FALSE(s.accepted_changed);
}

TEST_F(PlannerTest, EarlyRefreshBumpsRefreshSeq) {
  ASSERT_OK(Observe("fc1", Sample(0.4, 1)));
  Planner::Selection s = planner_.ApplySelection(Layers());
  ASSERT_TRUE(layers_[0].selected);
  EXPECT_EQ(layers_[0].refresh_seq, 0);
  // The gain decayed below half of 0.4 and below min_gain.
  ASSERT_OK(Observe("fc1", Sample(0.03, 1)));
  s = planner_.ApplySelection(Layers());
  EXPECT_TRUE(s.changed);
  EXPECT_THAT(s.moves, Contains("fc1 early refresh (gain decayed)"));
  EXPECT_EQ(layers_[0].refresh_seq, 1);
  EXPECT_EQ(layers_[1].refresh_seq, 0);
  // Once per factor version.
  ASSERT_OK(Observe("fc1", Sample(0.02, 1)));
  s = planner_.ApplySelection(Layers());
  EXPECT_EQ(layers_[0].refresh_seq, 1);
}

// Sketch only when it is used: a layer on the GIFT path whose new factor
// keeps its subspace is sketched in every 2nd, then 3rd window (K 50,
// staleness 200: at most 3); an early refresh sketches every window again.
// The plan carries the period and the stride (auto: 50 / 16 = 3) to the
// followers.
TEST_F(PlannerTest, SteadyFactorsOfGiftLayersLengthenTheSketchPeriod) {
  ASSERT_OK(Observe("fc1", Sample(0.4, 1)));
  ASSERT_OK(Observe("fc2", Sample(0.0, 1)));
  layers_[1].settings.set_pin(v1::PIN_IN);  // a candidate without a factor
  planner_.ApplySelection(Layers());
  ASSERT_TRUE(layers_[0].selected);
  ASSERT_EQ(layers_[0].accepted_version, 1);
  EXPECT_EQ(layers_[0].sketch.period(), 1);
  for (int64_t v : {2, 3, 4}) {
    layers_[0].sketch.NoteFactor(v, 0.99);
    ASSERT_OK(Observe("fc1", Sample(0.4, v)));
    Planner::Selection s = planner_.ApplySelection(Layers());
    EXPECT_EQ(s.changed, v < 4) << v;
  }
  EXPECT_EQ(layers_[0].sketch.period(), 3);
  EXPECT_EQ(layers_[1].sketch.period(), 1);
  v1::PeerPlan p = planner_.BuildPlan("job", 2, ConstLayers());
  EXPECT_EQ(p.sketch_stride(), 3);
  EXPECT_EQ(p.layers(0).sketch_period(), 3);
  EXPECT_EQ(p.layers(1).sketch_period(), 1);
  Follower follower;
  follower.Apply(p);
  EXPECT_EQ(follower.layers[0].sketch.period(), 3);
  EXPECT_EQ(follower.planner.sketch_stride(), 3);
  // An older leader's plan has neither: every window, every step.
  p.clear_sketch_stride();
  p.mutable_layers(0)->clear_sketch_period();
  follower.Apply(p);
  EXPECT_EQ(follower.layers[0].sketch.period(), 1);
  EXPECT_EQ(follower.planner.sketch_stride(), 1);
  // The gain decayed: an early refresh (and off the GIFT path), every
  // window again.
  ASSERT_OK(Observe("fc1", Sample(0.03, 4)));
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_THAT(s.moves, Contains("fc1 early refresh (gain decayed)"));
  EXPECT_THAT(s.moves, Contains(HasSubstr("fc1 candidate: its factors are "
                                          "probed before the GIFT path takes "
                                          "one: sketched every window")));
  EXPECT_EQ(layers_[0].sketch.period(), 1);
}

// Grid probes whose β = 3 clearly beats the factors in use (probe GIFT
// RelL2 0.025 against 0.020).
// One probe step each (one rank's): the 10-step window holds several.
SelectorSample BetaSample() {
  SelectorSample s = Sample(0.5, 1);
  s.steps = 1;
  s.n = 100000;
  s.upper = 5000;
  s.lower = 15000;
  s.probes = 1;
  s.probe_euclid_sum = 0.05;
  s.probe_gift_sum = 0.025;
  s.beta_probes = 1;
  s.probe_beta_sum = {0.030, 0.025, 0.020};
  return s;
}

TEST_F(PlannerTest, BetaAutoMovesBetaOnlyWithEnoughGridProbes) {
  layers_[0].settings.set_beta_auto(true);
  layers_[1].settings.set_beta_auto(true);
  layers_[1].settings.set_transform(v1::TRANSFORM_FULL);  // never β auto
  for (int i = 0; i < kMinBetaProbes - 1; ++i) {
    ASSERT_OK(Observe("fc1", BetaSample()));
    ASSERT_OK(Observe("fc2", BetaSample()));
    Planner::Selection s = planner_.ApplySelection(Layers());
    EXPECT_THAT(s.beta_changes, IsEmpty());
    EXPECT_EQ(layers_[0].settings.beta(), 0);  // the default β
  }
  ASSERT_OK(Observe("fc1", BetaSample()));
  ASSERT_OK(Observe("fc2", BetaSample()));
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_EQ(layers_[0].settings.beta(), 3.0);
  EXPECT_EQ(layers_[1].settings.beta(), 0);
  ASSERT_EQ(s.beta_changes.size(), 1u);
  EXPECT_THAT(s.beta_changes[0], HasSubstr("fc1 beta 1 -> 3 for its next"));
  // Without peers the ranks learn it from the factor: no plan change.
  EXPECT_FALSE(s.changed);
  EXPECT_THAT(s.moves, IsEmpty());
  // At β 3 already: no move.
  ASSERT_OK(Observe("fc1", BetaSample()));
  s = planner_.ApplySelection(Layers());
  EXPECT_THAT(s.beta_changes, IsEmpty());
  EXPECT_EQ(layers_[0].settings.beta(), 3.0);
}

class PeeredPlannerTest : public PlannerTest {
 protected:
  PeeredPlannerTest() : PlannerTest(/*peered=*/true) {}
};

TEST_F(PeeredPlannerTest, BetaAutoChangesThePlanWithPeers) {
  layers_[0].settings.set_beta_auto(true);
  for (int i = 0; i < kMinBetaProbes - 1; ++i) {
    ASSERT_OK(Observe("fc1", BetaSample()));
    planner_.ApplySelection(Layers());
  }
  ASSERT_OK(Observe("fc1", BetaSample()));
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_EQ(layers_[0].settings.beta(), 3.0);
  EXPECT_TRUE(s.changed);  // the other nodes' owners need it
  ASSERT_EQ(s.beta_changes.size(), 1u);
  EXPECT_THAT(s.moves, ElementsAre(s.beta_changes[0]));
}

TEST_F(PeeredPlannerTest, AnAcceptedVersionChangesThePlanWithPeers) {
  ASSERT_OK(Observe("fc1", Sample(0.4, 1)));
  planner_.ApplySelection(Layers());
  ASSERT_OK(Observe("fc1", Sample(0.4, 2)));
  Planner::Selection s = planner_.ApplySelection(Layers());
  EXPECT_TRUE(s.changed);  // the other nodes publish the leader's
  EXPECT_THAT(s.moves, ElementsAre("fc1 accepts factor v2"));
  // A follower takes it from the plan; a plan without one means none.
  v1::PeerPlan p = planner_.BuildPlan("job", 2, ConstLayers());
  Follower follower(/*peered=*/true, /*world_size=*/2);
  follower.Apply(p);
  EXPECT_EQ(follower.layers[0].accepted_version, 2);
  p.mutable_layers(0)->clear_accepted_version();
  follower.Apply(p);
  EXPECT_EQ(follower.layers[0].accepted_version, -1);
}

TEST_F(PlannerTest, AJoiningFollowersNewerPlanIsTakenOver) {
  planner_.NextEpoch();  // 2
  v1::PeerPlan old = Plan(1);
  old.add_layers()->set_name("fc1");
  old.mutable_layers(0)->set_selected(true);
  int world = 2;
  ASSERT_OK(planner_.TakeOverFollowerPlan(old, &world, Layers()));
  EXPECT_FALSE(layers_[0].selected);  // older: not taken
  v1::PeerPlan p = Plan(2);
  p.set_rank(4);
  p.add_layers()->set_name("fc1");
  p.mutable_layers(0)->set_candidate(true);
  p.mutable_layers(0)->set_selected(true);
  p.mutable_layers(0)->set_accepted_version(3);
  p.mutable_layers(0)->set_proven_version(2);
  ASSERT_OK(planner_.TakeOverFollowerPlan(p, &world, Layers()));
  EXPECT_TRUE(layers_[0].selected);
  EXPECT_EQ(planner_.rank(), 4);
  EXPECT_EQ(world, 2);
  // The selection is resumed: fc1 stays selected without telemetry, on the
  // plan's factor version, and the next plan carries both versions on.
  planner_.ApplySelection(Layers());
  EXPECT_TRUE(layers_[0].selected);
  EXPECT_EQ(layers_[0].accepted_version, 3);
  EXPECT_EQ(layers_[0].proven_version, 2);
  const v1::PeerPlan next = planner_.BuildPlan("job", 2, ConstLayers());
  EXPECT_EQ(next.layers(0).accepted_version(), 3);
  EXPECT_EQ(next.layers(0).proven_version(), 2);
  // A follower takes the proven version from the plan; none without it.
  Follower follower(/*peered=*/true, /*world_size=*/2);
  follower.Apply(next);
  EXPECT_EQ(follower.layers[0].proven_version, 2);
  v1::PeerPlan older = next;
  older.mutable_layers(0)->clear_proven_version();
  follower.Apply(older);
  EXPECT_EQ(follower.layers[0].proven_version, -1);
}

}  // namespace
}  // namespace gift::daemon
