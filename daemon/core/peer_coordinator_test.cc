#include "daemon/core/peer_coordinator.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "daemon/peer/fake_peer_link.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// Answers nothing: the coordinator's tests need a handler, not its calls.
class NullHandler : public PeerHandler {
 public:
  absl::StatusOr<v1::PeerPlan> OnJoin(const v1::JoinRequest&) override {
    return v1::PeerPlan();
  }
  absl::Status OnTelemetry(const v1::ReportTelemetryRequest&) override {
    return absl::OkStatus();
  }
  void OnMembersChanged() override {}
  absl::Status OnPlan(const v1::PeerPlan&) override { return absl::OkStatus(); }
  absl::Status OnSketch(const v1::PushSketchRequest&) override {
    return absl::OkStatus();
  }
  absl::Status OnFactor(const v1::PublishFactorRequest&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ForwardControlResponse> OnControl(
      const v1::ForwardControlRequest&) override {
    return v1::ForwardControlResponse();
  }
  absl::Status OnStoreSet(const v1::StoreSetRequest&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<v1::StoreGetResponse> OnStoreGet(const v1::StoreGetRequest&,
                                                  absl::Duration) override {
    return v1::StoreGetResponse();
  }
  absl::StatusOr<v1::StoreAddResponse> OnStoreAdd(
      const v1::StoreAddRequest&) override {
    return v1::StoreAddResponse();
  }
  v1::JoinRequest JoinState() override { return v1::JoinRequest(); }
};

TEST(PeerCoordinatorTest, WithoutPeersNothingIsFollowedOrLinked) {
  DaemonConfig c;
  absl::Mutex mu;
  PeerCoordinator peers(c, "inst", &mu);
  EXPECT_FALSE(peers.peered());
  EXPECT_FALSE(peers.coordinated());
  EXPECT_FALSE(peers.IsFollower());
  EXPECT_EQ(peers.link(), nullptr);
  EXPECT_EQ(peers.PeerRole(), "");
  EXPECT_EQ(peers.Status().role(), v1::PEER_ROLE_STANDALONE);
  v1::ForwardControlRequest f;
  f.mutable_set_rank()->set_rank(4);
  EXPECT_THAT(peers.Forward(f), StatusIs(absl::StatusCode::kUnavailable,
                                         HasSubstr("no leader of the job")));
}

TEST(PeerCoordinatorTest, TermsOnlyRiseAndOlderOnesAreRefused) {
  DaemonConfig c;
  absl::Mutex mu;
  PeerCoordinator peers(c, "inst", &mu);
  EXPECT_EQ(peers.term(), 0);
  EXPECT_OK(peers.CheckTerm(5, "plan"));  // a newer term raises it
  EXPECT_EQ(peers.term(), 5);
  EXPECT_OK(peers.CheckTerm(5, "plan"));
  EXPECT_THAT(peers.CheckTerm(4, "factor"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("factor of leader term 4 refused: this giftd "
                                 "has seen term 5")));
  peers.RaiseTerm(3);
  EXPECT_EQ(peers.term(), 5);
  peers.RaiseTerm(9);
  EXPECT_EQ(peers.term(), 9);
  EXPECT_EQ(peers.Status().term(), 9);
}

TEST(PeerCoordinatorTest, RefusesPeersOfAnotherJob) {
  DaemonConfig c;
  c.job_id = "job";
  absl::Mutex mu;
  PeerCoordinator peers(c, "inst", &mu);
  EXPECT_OK(peers.CheckPeerJob("job"));
  EXPECT_THAT(peers.CheckPeerJob("other"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("serves job 'job', not 'other'")));
}

TEST(PeerCoordinatorTest, PrepareNeedsTheJobLeaderAndToken) {
  DaemonConfig c;
  c.peer_address = "n0:1";
  absl::Mutex mu;
  PeerCoordinator peers(c, "inst", &mu);
  EXPECT_TRUE(peers.peered());
  EXPECT_THAT(peers.Prepare(nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("peer_address needs job_id")));
}

TEST(PeerCoordinatorTest, LeadsOrFollowsOverItsLink) {
  const std::string token =
      absl::StrCat(::testing::TempDir(), "/coord-token-", getpid());
  std::ofstream(token) << "s3cret\n";
  FakePeerNetwork net;
  NullHandler handler;
  absl::Mutex mu;
  DaemonConfig c;
  c.job_id = "job";
  c.node = "n0";
  c.peer_address = "n0:1";
  c.leader_address = "n0:1";
  c.job_token_file = token;
  DaemonConfig f = c;
  f.node = "n1";
  f.peer_address = "n1:1";
  {
    PeerCoordinator leader(c, "i0", &mu);
    PeerCoordinator follower(f, "i1", &mu);
    ASSERT_OK(leader.Prepare(net.Factory()));
    ASSERT_OK(leader.Connect(&handler, {}));
    ASSERT_OK(follower.Prepare(net.Factory()));
    ASSERT_OK(follower.Connect(&handler, {}));
    ASSERT_TRUE(net.Drain());
    EXPECT_FALSE(leader.IsFollower());
    EXPECT_TRUE(follower.IsFollower());
    EXPECT_THAT(leader.PeerRole(), HasSubstr("leader of job job"));
    EXPECT_THAT(follower.PeerRole(), HasSubstr("follower of n0:1 in job job"));
    EXPECT_EQ(leader.Status().role(), v1::PEER_ROLE_LEADER);
    EXPECT_EQ(follower.Status().role(), v1::PEER_ROLE_FOLLOWER);
    EXPECT_EQ(follower.Status().leader_address(), "n0:1");
    follower.StopLinks();
    leader.StopLinks();
  }
  std::remove(token.c_str());
}

}  // namespace
}  // namespace gift::daemon
