#include "daemon/core/peer_messages.h"

#include <string>
#include <utility>

#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

DaemonConfig Peered(const std::string& tag) {
  DaemonConfig c = TestDaemonConfig(tag);
  c.job_id = "job";
  c.peer_address = "n0:1";  // peered; no link: it leads
  return c;
}

v1::JoinRequest Joiner(int64_t term) {
  v1::JoinRequest j;
  j.set_job_id("job");
  j.set_layout_version(shm::kLayoutVersion);
  j.mutable_self()->set_node("n1");
  j.set_term(term);
  j.set_world_size(2);
  v1::LayerShape* l = j.add_layers();
  l->set_name("fc1");
  l->set_d_out(16);
  l->set_d_in(24);
  return j;
}

TEST(PeerMessagesTest, ALeaderAdoptsAJoinersLayersAndAnswersThePlan) {
  CoreParts core(Peered("pmjoin"));
  v1::JoinRequest j = Joiner(0);
  (*j.mutable_factor_version())["fc1"] = 6;
  absl::StatusOr<v1::PeerPlan> plan = core.messages.Join(j);
  ASSERT_OK(plan);
  EXPECT_EQ(core.layout.job_id(), "job");
  EXPECT_EQ(core.layout.world_size(), 2);
  ASSERT_EQ(core.layout.size(), 1u);
  EXPECT_EQ(plan->layers_size(), 1);
  EXPECT_EQ(plan->leader_instance(), core.instance);
  // The next version goes above the joiner's.
  EXPECT_EQ(core.layout.layers()[0].factors.next_version(), 7);
  // Another layout is refused.
  j.mutable_layers(0)->set_d_in(32);
  EXPECT_THAT(core.messages.Join(j),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("layer list differs")));
}

TEST(PeerMessagesTest, AJoinerOfANewerTermIsRefusedAndCounted) {
  CoreParts core(Peered("pmterm"));
  EXPECT_THAT(core.messages.Join(Joiner(5)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("a newer leader exists")));
  EXPECT_THAT(core.Text(), HasSubstr("gift_peer_refused_total{job_id=\"\","
                                     "kind=\"join\",node=\"test\"} 1"));
  core.peers.RaiseTerm(9);
  EXPECT_THAT(core.messages.CheckTerm(8, "plan"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(core.Text(), HasSubstr("kind=\"plan\",node=\"test\"} 1"));
  EXPECT_OK(core.messages.CheckTerm(9, "plan"));
}

TEST(PeerMessagesTest, JoinStateTellsTheLayersVersionsAndTerm) {
  CoreParts core(Peered("pmstate"));
  ASSERT_OK(core.messages.Join(Joiner(0)));
  core.layout.layers()[0].factors.ContinueAbove(3);
  core.peers.RaiseTerm(2);
  const v1::JoinRequest j = core.messages.JoinState();
  EXPECT_EQ(j.job_id(), "job");
  EXPECT_EQ(j.self().instance(), core.instance);
  EXPECT_EQ(j.self().address(), "n0:1");
  EXPECT_EQ(j.world_size(), 2);
  ASSERT_EQ(j.layers_size(), 1);
  EXPECT_EQ(j.factor_version().at("fc1"), 3);
  EXPECT_EQ(j.term(), 2);
  EXPECT_EQ(j.plan_epoch(), core.planner.HeldEpoch());
}

TEST(PeerMessagesTest, ALeadersReportsAreCheckedAndKept) {
  CoreParts core(Peered("pmreport"));
  ASSERT_OK(core.messages.Join(Joiner(0)));
  v1::ReportTelemetryRequest r;
  r.set_job_id("job");
  v1::LayerSample* s = r.add_layers();
  s->set_name("fc1");
  s->set_n(-1);
  EXPECT_THAT(core.messages.Report(r),
              StatusIs(absl::StatusCode::kInvalidArgument));
  s->set_n(10);
  const int64_t epoch = core.planner.epoch();
  r.set_plan_epoch(epoch + 5);  // the reporter's ranks hold a newer epoch
  ASSERT_OK(core.messages.Report(r));
  EXPECT_GT(core.planner.epoch(), epoch + 5);
}

// Windows of different widths or bases never sum, and factors of another
// width do not fit: a follower sketching another r + p, deriving Ω₀ (and
// the columns of a later Ω that a factor does not send) from another
// omega_seed, or holding another max_rank, is refused before anything
// changes; JoinState says its p, seed and max_rank.
TEST(PeerMessagesTest, AJoinerThatSketchesAnotherBasisIsRefused) {
  CoreParts core(Peered("pmbasis"));
  EXPECT_EQ(core.messages.JoinState().sketch_oversample(),
            core.config.sketch_oversample);
  EXPECT_EQ(core.messages.JoinState().omega_seed(), core.config.omega_seed);
  EXPECT_EQ(core.messages.JoinState().max_rank(), core.config.max_rank);
  v1::JoinRequest good = Joiner(0);
  good.set_sketch_oversample(core.config.sketch_oversample);
  good.set_omega_seed(core.config.omega_seed);
  good.set_max_rank(core.config.max_rank);
  v1::JoinRequest wider = good;
  wider.set_sketch_oversample(core.config.sketch_oversample + 8);
  v1::JoinRequest seeded = good;
  seeded.set_omega_seed(core.config.omega_seed + 1);
  v1::JoinRequest ranked = good;
  ranked.set_max_rank(core.config.max_rank * 2);
  const std::pair<v1::JoinRequest, const char*> bad[] = {
      {wider, "sketch_oversample p = 24 differs from the leader's 16"},
      {seeded,
       "omega_seed 0x9e3779b97f4a7c16 differs from the leader's "
       "0x9e3779b97f4a7c15"},
      {ranked, "max_rank 128 differs from the leader's 64"}};
  for (const auto& [j, what] : bad) {
    EXPECT_THAT(
        core.messages.Join(j),
        StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(what)));
    EXPECT_TRUE(core.layout.empty());
  }
  EXPECT_OK(core.messages.Join(good));
  EXPECT_EQ(core.layout.size(), 1u);
}

TEST(PeerMessagesTest, CheckJoinLayoutRefusesAnotherVersion) {
  v1::JoinRequest j = Joiner(0);
  EXPECT_OK(CheckJoinLayout(j));
  j.set_layout_version(shm::kLayoutVersion + 1);
  EXPECT_THAT(CheckJoinLayout(j),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this giftd speaks")));
}

}  // namespace
}  // namespace gift::daemon
