#include "daemon/peer/window_owners.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

// A GPT-like job: 4 layers per block (attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj), the GIFT path on every block's mlp.c_proj, as in
// multihost_bench.
v1::PeerPlan Plan(int blocks, const std::vector<std::string>& nodes) {
  v1::PeerPlan plan;
  for (int b = 0; b < blocks; ++b) {
    for (const char* kind :
         {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
      v1::PeerLayerPlan* l = plan.add_layers();
      l->set_name("h." + std::to_string(b) + "." + kind);
      l->set_selected(std::string(kind) == "mlp.c_proj");
    }
  }
  for (const std::string& n : nodes) {
    v1::Member* m = plan.add_members();
    m->set_node(n);
    m->set_address(n + ":1");
    m->set_instance(n + "-1");
  }
  return plan;
}

std::map<std::string, int> Load(const v1::PeerPlan& plan) {
  std::map<std::string, int> load;
  for (const v1::PeerLayerPlan& l : plan.layers()) {
    if (!l.owner().empty()) ++load[l.owner()];
  }
  return load;
}

// Layers whose owner differs between two OwnersOf.
int Moved(const std::vector<std::string>& a,
          const std::vector<std::string>& b) {
  int moved = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) moved += a[i] != b[i];
  return moved;
}

// `leaver` owns none of the layers in `after`, and every layer it did not
// own in `before` kept its owner.
void ExpectOnlyTheLeaversLayersMoved(const std::vector<std::string>& before,
                                     const std::vector<std::string>& after,
                                     const std::string& leaver) {
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_NE(after[i], leaver) << "layer " << i;
    if (before[i] != leaver) {
      EXPECT_EQ(after[i], before[i]) << "layer " << i;
    }
  }
}

void SetMembers(v1::PeerPlan& plan, const std::vector<std::string>& nodes) {
  v1::PeerPlan fresh = Plan(0, nodes);
  *plan.mutable_members() = fresh.members();
}

TEST(WindowOwnersTest, SpreadsTheSketchedLayersWhereIndexModuloPutsThemOnOne) {
  const std::vector<std::string> nodes = {"n0", "n1", "n2", "n3"};
  v1::PeerPlan plan = Plan(8, nodes);
  // The old rule: every mlp.c_proj (index 4b + 3) on members[3].
  for (int b = 0; b < 8; ++b) {
    const int i = 4 * b + 3;
    EXPECT_EQ(OwnerIn(plan.members(), {}, i, v1::Member()).node(), "n3");
  }
  WindowOwners owners;
  owners.Assign(plan);
  EXPECT_EQ(Load(plan), (std::map<std::string, int>{
                            {"n0", 2}, {"n1", 2}, {"n2", 2}, {"n3", 2}}));
  const std::vector<std::string> named = OwnersOf(plan);
  for (int i = 0; i < plan.layers_size(); ++i) {
    const bool sketched = Sketched(plan.layers(i));
    EXPECT_EQ(named[i].empty(), !sketched) << plan.layers(i).name();
    const v1::Member m = OwnerIn(plan.members(), named, i, v1::Member());
    // A named owner is that member; the others keep members[i % size].
    EXPECT_EQ(m.node(), sketched ? named[i] : nodes[i % 4]);
  }
}

TEST(WindowOwnersTest, OwnersStayAcrossPlansAndNewLayersGoToTheIdlest) {
  v1::PeerPlan plan = Plan(4, {"n0", "n1", "n2", "n3"});
  WindowOwners owners;
  owners.Assign(plan);
  const std::vector<std::string> before = OwnersOf(plan);
  // The next epoch: a candidate more (block 0's c_fc); the GIFT layers keep
  // their owners, the candidate goes to a member with one layer (all have
  // one), the one i % n names.
  plan.mutable_layers(2)->set_candidate(true);
  owners.Assign(plan);
  const std::vector<std::string> after = OwnersOf(plan);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(after[4 * b + 3], before[4 * b + 3]);
  EXPECT_EQ(after[2], "n2");
  // Off the GIFT path and no candidate: no owner, and none kept.
  plan.mutable_layers(3)->set_selected(false);
  owners.Assign(plan);
  EXPECT_EQ(plan.layers(3).owner(), "");
  plan.mutable_layers(3)->set_selected(true);
  owners.Assign(plan);
  EXPECT_FALSE(plan.layers(3).owner().empty());
}

TEST(WindowOwnersTest, JoinersTakeLayersFromTheLeaderAndALeaverHandsItsOn) {
  // The leader alone makes the first plan and owns every layer.
  v1::PeerPlan plan = Plan(8, {"n0"});
  WindowOwners owners;
  owners.Assign(plan);
  EXPECT_EQ(Load(plan), (std::map<std::string, int>{{"n0", 8}}));
  SetMembers(plan, {"n0", "n1"});
  owners.Assign(plan);
  EXPECT_EQ(Load(plan), (std::map<std::string, int>{{"n0", 4}, {"n1", 4}}));
  const std::vector<std::string> two = OwnersOf(plan);
  SetMembers(plan, {"n0", "n1", "n2", "n3"});
  owners.Assign(plan);
  EXPECT_EQ(Load(plan), (std::map<std::string, int>{
                            {"n0", 2}, {"n1", 2}, {"n2", 2}, {"n3", 2}}));
  // Only as many layers moved as the balance needs: 4 of 8.
  const std::vector<std::string> four = OwnersOf(plan);
  EXPECT_EQ(Moved(four, two), 4);
  // n2 leaves: its two layers go to two others; nothing else moves.
  SetMembers(plan, {"n0", "n1", "n3"});
  owners.Assign(plan);
  const std::vector<std::string> three = OwnersOf(plan);
  ExpectOnlyTheLeaversLayersMoved(four, three, "n2");
  EXPECT_EQ(Moved(three, four), 2);
  std::map<std::string, int> load = Load(plan);
  EXPECT_EQ(load["n0"] + load["n1"] + load["n3"], 8);
  for (const auto& [node, n] : load) EXPECT_LE(n, 3) << node;
  // The same members again: the same owners.
  owners.Assign(plan);
  EXPECT_EQ(OwnersOf(plan), three);
}

TEST(WindowOwnersTest, AnElectedFollowerKeepsTheOwnersOfThePlansItAdopted) {
  // n0 leads four nodes; n1 follows, adopting each of n0's plans.
  v1::PeerPlan plan = Plan(8, {"n0", "n1", "n2", "n3"});
  WindowOwners leader;
  leader.Assign(plan);
  WindowOwners follower;
  follower.Adopt(plan);
  const std::vector<std::string> before = OwnersOf(plan);
  // n0 dies and n1 is elected: its first plan, without n0.
  v1::PeerPlan next = plan;
  SetMembers(next, {"n1", "n2", "n3"});
  follower.Assign(next);
  const std::vector<std::string> after = OwnersOf(next);
  ExpectOnlyTheLeaversLayersMoved(before, after, "n0");
  EXPECT_EQ(Moved(after, before), 2);  // n0's two layers, nothing else
  // Without the adopted owners the new leader would start over: more of
  // the layers would change owner (their windows then go where no partial
  // sum is).
  v1::PeerPlan fresh = plan;
  SetMembers(fresh, {"n1", "n2", "n3"});
  WindowOwners empty;
  empty.Assign(fresh);
  EXPECT_GT(Moved(OwnersOf(fresh), before), Moved(after, before));
  // A plan without layers changes nothing.
  follower.Adopt(Plan(0, {"n1"}));
  follower.Assign(next);
  EXPECT_EQ(OwnersOf(next), after);
}

TEST(WindowOwnersTest, OwnerInFallsBackToTheIndexAndToSelf) {
  v1::PeerPlan plan = Plan(1, {"n0", "n1"});
  v1::Member self;
  self.set_node("me");
  // No members: this daemon owns everything.
  EXPECT_EQ(OwnerIn(std::vector<v1::Member>(), {}, 3, self).node(), "me");
  EXPECT_EQ(OwnerIn(plan.members(), {}, -1, self).node(), "me");
  // An owner that is not a member (it left since the plan) and a layer past
  // the owners list: members[i % size].
  EXPECT_EQ(OwnerIn(plan.members(), {"", "", "gone"}, 2, self).node(), "n0");
  EXPECT_EQ(OwnerIn(plan.members(), {"n0"}, 5, self).node(), "n1");
  EXPECT_EQ(OwnerIn(plan.members(), {"n1"}, 0, self).node(), "n1");
  // Without members the plan is left as it is.
  v1::PeerPlan lone = Plan(1, {});
  WindowOwners owners;
  owners.Assign(lone);
  EXPECT_TRUE(lone.layers(3).owner().empty());
}

}  // namespace
}  // namespace gift::daemon
