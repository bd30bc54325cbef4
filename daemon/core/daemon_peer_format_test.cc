// Two giftd cores of one job (leader n0, follower n1) joined by the
// in-process FakePeerNetwork: the leader decides the job's wire format (its
// first rank's ask, else its config) and each layer's (SetLayerPolicy), and
// every node's ranks get the same formats at the same plan epoch. A
// follower's rank asking another job format is refused as on one node; a
// peer's plan or join with a format that is none (or that a layer's shape
// cannot take) is refused and changes nothing.
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "daemon/core/daemon.h"
#include "daemon/core/daemon_testutil.h"
#include "daemon/peer/fake_peer_link.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/wire_format.h"
#include "shm/protocol.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kNodes = 2;
constexpr int kFc1 = 0;  // 16 × 24: no whole 16- or 32-blocks per row
constexpr int kFc2 = 1;  // 16 × 48: whole nvfp4 blocks, no whole mxfp4 ones

constexpr int kE4m3 = kernels::WireFormat::kE4M3Code;
constexpr int kNvfp4 = kernels::WireFormat::kNvfp4Code;

// Rank `rank` of a `world`-rank job asking `format` (UNSPECIFIED: none).
v1::RegisterRequest Ask(int rank, int world, v1::WireFormat format) {
  v1::RegisterRequest r = Request(rank, world);
  r.set_format(format);
  return r;
}

class DaemonPeerFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ =
        absl::StrCat(::testing::TempDir(), "/peerfmt-token-", ::getpid());
    std::ofstream(token_file_) << "s3cret\n";
    for (int n = 0; n < kNodes; ++n) {
      auto d = Daemon::Create(Config(n), &registry_[n], net_.Factory());
      ASSERT_OK(d);
      daemons_[n] = *std::move(d);
    }
    ASSERT_TRUE(net_.Drain());
    ASSERT_THAT(daemons_[1]->PeerRole(), HasSubstr("follower of n0:1"));
  }
  void TearDown() override {
    for (auto& d : daemons_) d.reset();
    std::remove(token_file_.c_str());
  }

  DaemonConfig Config(int node) {
    auto c = LoadConfigFromString("", "", {});
    EXPECT_OK(c);
    c->node = absl::StrCat("n", node);
    c->shm_prefix = absl::StrCat("/gift-pftest", ::getpid(), "-n", node);
    c->poll_interval_ms = 5000;  // the test polls
    c->refresh_threads = 1;
    c->metrics_address = "";
    c->job_id = "job";
    c->peer_address = absl::StrCat("n", node, ":1");
    c->leader_address = "n0:1";
    c->job_token_file = token_file_;
    return *c;
  }
  // Registers `r` on `node` and maps the rank.
  void Register(int node, const v1::RegisterRequest& r) {
    auto resp = daemons_[node]->Register(r);
    ASSERT_OK(resp);
    ranks_.push_back(FakeRank::Map(*resp));
    ASSERT_TRUE(net_.Drain());
  }
  shm::PlanView Plan(int rank) {
    shm::PlanView p;
    EXPECT_TRUE(shm::ReadPlan(ranks_[rank].control->data(), &p));
    return p;
  }
  int64_t Epoch(int node) {
    auto s = daemons_[node]->GetStatus({});
    EXPECT_OK(s);
    return s.ok() ? s->plan_epoch() : -1;
  }
  // Every mapped rank holds the leader's epoch with these format codes.
  void ExpectEveryRankRuns(int fc1, int fc2) {
    const int64_t epoch = Epoch(0);
    EXPECT_GT(epoch, 0);
    EXPECT_EQ(Epoch(1), epoch);
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
      const shm::PlanView p = Plan(rank);
      EXPECT_EQ(p.plan_epoch, epoch) << "rank " << rank;
      ASSERT_EQ(p.layers.size(), 2u);
      EXPECT_EQ(p.layers[kFc1].format, fc1) << "rank " << rank;
      EXPECT_EQ(p.layers[kFc2].format, fc2) << "rank " << rank;
    }
  }
  // What `node` lists (giftctl layers).
  v1::ListLayersResponse Layers(int node) {
    auto l = daemons_[node]->ListLayers({});
    EXPECT_OK(l);
    return l.ok() ? *l : v1::ListLayersResponse();
  }

  FakePeerNetwork net_;  // outlives the daemons
  std::string token_file_;
  metrics::Registry registry_[kNodes];
  std::unique_ptr<Daemon> daemons_[kNodes];
  std::vector<FakeRank> ranks_;
};

TEST_F(DaemonPeerFormatTest, TheLeadersRankSetsTheFormatOfEveryNode) {
  Register(0, Ask(0, 3, v1::WIRE_FORMAT_NVFP4));
  // The follower holds the leader's format before its own first rank.
  EXPECT_THAT(
      daemons_[1]->Register(Ask(1, 3, v1::WIRE_FORMAT_MXFP4)).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("rank 1 asks format mxfp4; job job runs nvfp4")));
  Register(1, Ask(1, 3, v1::WIRE_FORMAT_UNSPECIFIED));
  Register(1, Ask(2, 3, v1::WIRE_FORMAT_NVFP4));
  // fc1's rows take no whole 16-blocks: e4m3 on every node, with a reason.
  ExpectEveryRankRuns(kE4m3, kNvfp4);
  for (int node = 0; node < kNodes; ++node) {
    const v1::ListLayersResponse l = Layers(node);
    ASSERT_EQ(l.layers_size(), 2) << node;
    EXPECT_EQ(l.layers(kFc1).settings().format(), v1::WIRE_FORMAT_E4M3);
    EXPECT_THAT(l.layers(kFc1).format_reason(),
                HasSubstr("not the job's nvfp4"))
        << node;
    EXPECT_EQ(l.layers(kFc2).settings().format(), v1::WIRE_FORMAT_NVFP4);
    EXPECT_EQ(l.layers(kFc2).format_reason(), "") << node;
  }
  // A later follower rank asking another format is refused as on one node.
  EXPECT_THAT(
      daemons_[1]->Register(Ask(2, 3, v1::WIRE_FORMAT_E5M2)).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("rank 2 asks format e5m2; job job runs nvfp4")));
}

// A follower's rank that came before the leader had a job asked its own
// format; the leader's job is a new epoch that brings the leader's to it.
TEST_F(DaemonPeerFormatTest, AFollowerThatCameFirstTakesTheLeadersFormat) {
  Register(1, Ask(1, 2, v1::WIRE_FORMAT_E5M2));
  const int64_t before = Plan(0).plan_epoch;
  Register(0, Ask(0, 2, v1::WIRE_FORMAT_NVFP4));
  EXPECT_GT(Epoch(0), before);
  // ranks_[0] is the follower's rank, ranks_[1] the leader's.
  ExpectEveryRankRuns(kE4m3, kNvfp4);
  EXPECT_THAT(Layers(1).layers(kFc1).format_reason(),
              HasSubstr("not the job's nvfp4"));
  EXPECT_THAT(daemons_[1]->Register(Ask(1, 2, v1::WIRE_FORMAT_E5M2)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job job runs nvfp4")));
}

// An operator's per-layer format, set through a follower, is the leader's
// decision and reaches every node at one epoch.
TEST_F(DaemonPeerFormatTest, ALayerFormatSetOnAFollowerReachesEveryNode) {
  Register(0, Ask(0, 2, v1::WIRE_FORMAT_UNSPECIFIED));
  Register(1, Ask(1, 2, v1::WIRE_FORMAT_UNSPECIFIED));
  ExpectEveryRankRuns(kE4m3, kE4m3);
  v1::SetLayerPolicyRequest set;
  set.set_layer("fc2");
  set.mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);
  ASSERT_OK(daemons_[1]->SetLayerPolicy(set));
  ASSERT_TRUE(net_.Drain());
  ExpectEveryRankRuns(kE4m3, kNvfp4);
  // A shape that cannot take it: refused by the leader, nothing changes.
  const int64_t epoch = Epoch(0);
  set.set_layer("fc1");
  EXPECT_THAT(daemons_[1]->SetLayerPolicy(set).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(net_.Drain());
  EXPECT_EQ(Epoch(0), epoch);
  ExpectEveryRankRuns(kE4m3, kNvfp4);
}

// A plan whose job or layer format is none, or does not fit the layer, is
// refused before the follower holds it: epoch, formats and term stay.
TEST_F(DaemonPeerFormatTest, APlanWithABadFormatIsRefusedAndChangesNothing) {
  Register(0, Ask(0, 2, v1::WIRE_FORMAT_NVFP4));
  Register(1, Ask(1, 2, v1::WIRE_FORMAT_UNSPECIFIED));
  const int64_t epoch = Epoch(1);
  const v1::PeerPlan held = daemons_[1]->JoinState().plan();
  ASSERT_EQ(held.format(), v1::WIRE_FORMAT_NVFP4);
  ASSERT_EQ(held.layers_size(), 2);

  v1::PeerPlan bad = held;
  bad.set_plan_epoch(epoch + 5);
  bad.set_term(held.term() + 1);
  bad.set_format(static_cast<v1::WireFormat>(99));
  EXPECT_THAT(daemons_[1]->OnPlan(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("job format"),
                             HasSubstr("unknown wire format value 99"))));
  bad = held;
  bad.set_plan_epoch(epoch + 5);
  bad.mutable_layers(kFc2)->mutable_settings()->set_format(
      static_cast<v1::WireFormat>(-3));
  EXPECT_THAT(daemons_[1]->OnPlan(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("layer 'fc2'"),
                             HasSubstr("unknown wire format value -3"))));
  bad = held;
  bad.set_plan_epoch(epoch + 5);
  bad.mutable_layers(kFc1)->mutable_settings()->set_format(
      v1::WIRE_FORMAT_MXFP4);
  EXPECT_THAT(daemons_[1]->OnPlan(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("layer 'fc1'"), HasSubstr("32"))));
  EXPECT_EQ(Epoch(1), epoch);
  auto status = daemons_[1]->GetStatus({});
  ASSERT_OK(status);
  EXPECT_EQ(status->peer().term(), held.term());
  ExpectEveryRankRuns(kE4m3, kNvfp4);
  EXPECT_EQ(Layers(1).layers(kFc2).settings().format(), v1::WIRE_FORMAT_NVFP4);

  // A plan without layer formats (an older leader's) keeps the layers'.
  v1::PeerPlan old = held;
  old.set_plan_epoch(epoch + 1);
  old.clear_format();
  for (v1::PeerLayerPlan& x : *old.mutable_layers()) {
    x.mutable_settings()->clear_format();
  }
  ASSERT_OK(daemons_[1]->OnPlan(old));
  EXPECT_EQ(Plan(1).plan_epoch, epoch + 1);
  EXPECT_EQ(Plan(1).layers[kFc2].format, kNvfp4);
}

// A plan held before the follower had layers could not be checked against
// their shapes: one that does not fit is not applied to them.
TEST_F(DaemonPeerFormatTest, AHeldPlanThatDoesNotFitTheNewLayersIsNotApplied) {
  v1::PeerPlan plan = daemons_[1]->JoinState().plan();
  plan.set_plan_epoch(plan.plan_epoch() + 1);
  v1::PeerLayerPlan* fc1 = plan.add_layers();
  fc1->set_name("fc1");
  fc1->mutable_settings()->set_format(v1::WIRE_FORMAT_MXFP4);  // d_in 24
  fc1->mutable_settings()->set_pin(v1::PIN_OUT);
  ASSERT_OK(daemons_[1]->OnPlan(plan));  // no layers to check yet
  Register(1, Ask(1, 2, v1::WIRE_FORMAT_UNSPECIFIED));
  const v1::ListLayersResponse l = Layers(1);
  ASSERT_EQ(l.layers_size(), 2);
  EXPECT_EQ(l.layers(kFc1).settings().format(), v1::WIRE_FORMAT_E4M3);
  EXPECT_EQ(l.layers(kFc1).settings().pin(), v1::PIN_AUTO);
  EXPECT_EQ(Plan(0).layers[kFc1].format, kE4m3);
}

// A join whose job format or plan is bad is refused by the leader before it
// adopts anything.
TEST_F(DaemonPeerFormatTest, AJoinWithABadFormatIsRefusedAndChangesNothing) {
  v1::JoinRequest j = daemons_[1]->JoinState();
  j.set_world_size(2);
  *j.mutable_layers() = Request(0).layers();
  j.set_format(static_cast<v1::WireFormat>(7));
  EXPECT_THAT(daemons_[0]->OnJoin(j).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("join of n1"),
                             HasSubstr("unknown wire format value 7"))));
  j.set_format(v1::WIRE_FORMAT_NVFP4);
  j.mutable_plan()->set_format(static_cast<v1::WireFormat>(12));
  EXPECT_THAT(daemons_[0]->OnJoin(j).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown wire format value 12")));
  EXPECT_EQ(Layers(0).layers_size(), 0);
  // The same join with good formats: the leader adopts the follower's
  // layers with the follower's job format (its first rank's ask).
  j.mutable_plan()->clear_format();
  auto plan = daemons_[0]->OnJoin(j);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->format(), v1::WIRE_FORMAT_NVFP4);
  ASSERT_EQ(plan->layers_size(), 2);
  EXPECT_EQ(plan->layers(kFc2).settings().format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(plan->layers(kFc1).settings().format(), v1::WIRE_FORMAT_E4M3);
}

}  // namespace
}  // namespace gift::daemon
