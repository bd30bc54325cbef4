// Job-wide coordination end to end (issue 6, DESIGN §4): three giftd
// "nodes", each in a network namespace of its own (scripts/netns.sh; on
// loopback ports where namespaces cannot be made, and the test says so),
// each with two rank_worker processes: a six-rank job on the committed real
// data whose ranks rendezvous through their daemons (relayed by the
// leader, node 0) and whose daemons agree through the Peer service.
//
// Every test compares the ranks' per-step reports: the same agreed plan
// epoch, the same path and factor version per layer, and bit-identical
// averaged buckets and parameters (FNV digests) on all six ranks after
// every step. Conditions are polled with deadlines; nothing asserts
// wall-clock time.
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"
#include "tests/daemon/peer_cluster.h"

namespace gift::testing_daemon {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kJob[] = "peerjob";

class PeerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("giftd_peer");
    ASSERT_OK(dir);
    dir_ = *dir;
  }

  void TearDown() override {
    if (cluster_ && HasFailure()) cluster_->KeepDir();
    cluster_.reset();
  }

  static PeerClusterOptions Options() {
    PeerClusterOptions o;
    o.job = kJob;
    // GIFT_PEER_TEST_LOOPBACK=1 runs the loopback variant even where
    // namespaces could be made.
    const char* loopback = std::getenv("GIFT_PEER_TEST_LOOPBACK");
    if (loopback == nullptr || std::string(loopback) != "1") {
      o.netns_script = GIFT_NETNS_SCRIPT;
    }
    o.giftd.refresh_interval = 5;
    o.giftd.staleness_limit = 1000;  // the failure tests keep old factors
    return o;
  }

  void StartCluster(const PeerClusterOptions& o, bool ranks = true) {
    const PeerBinaries b = {GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN,
                            GIFT_RANK_WORKER_BIN};
    absl::StatusOr<std::unique_ptr<PeerCluster>> c =
        PeerCluster::Create(b, dir_, o);
    ASSERT_OK(c);
    cluster_ = *std::move(c);
    ASSERT_OK(cluster_->StartDaemons());
    if (ranks) {
      ASSERT_OK(cluster_->StartRanks());
    }
  }

  // Every step so far agrees on all ranks; returns the steps compared.
  int64_t ExpectRecordsAgree() {
    int64_t steps = 0;
    EXPECT_OK(cluster_->RecordsAgree(&steps));
    return steps;
  }

  // Waits until every rank runs every real layer on GIFT with a factor.
  void WaitForGift() {
    ASSERT_OK(cluster_->WaitForAll(AllRealLayersOnGift, absl::Seconds(90)));
  }

  // Waits until `layer` ran on every rank with a factor version > `above`.
  void WaitForVersionAbove(const std::string& layer, int64_t above) {
    ASSERT_OK(cluster_->WaitForAll(
        [&](const json& l) { return GiftVersion(l, layer) > above; },
        absl::Seconds(60)));
  }

  // SIGKILLs `node`'s giftd: every rank keeps training on the last agreed
  // versions, and no rank uses a version another lacks (40 more steps).
  void KillDaemon(int node) {
    ASSERT_OK(cluster_->daemon(node).Kill(SIGKILL));
    ASSERT_OK(cluster_->WaitForMoreSteps(40, absl::Seconds(60)));
    EXPECT_TRUE(cluster_->AllRanksRunning());
    ExpectRecordsAgree();
  }
  // Restarts `node`'s giftd: every rank re-attaches and the job moves on, on
  // every rank together, to a version of `layer` above the one rank
  // `witness` (a rank whose daemon stayed up) used last.
  void RestartAndMoveOn(int node, const std::string& layer, int witness) {
    ASSERT_OK(cluster_->daemon(node).Restart());
    const int64_t v = GiftVersion(cluster_->Report(witness).back(), layer);
    ASSERT_OK(cluster_->WaitForAll(
        [&](const json& l) { return l["attached"] == true; },
        absl::Seconds(60)));
    ASSERT_NO_FATAL_FAILURE(WaitForVersionAbove(layer, v));
    ASSERT_OK(cluster_->StopRanks(absl::Seconds(30)));
    EXPECT_GE(ExpectRecordsAgree(), 40);
  }

  std::string dir_;
  std::unique_ptr<PeerCluster> cluster_;
};

// The harness alone: three independent one-node daemons (no peers, the
// ranks meet in a shared FileStore) with nothing selected, so that every
// rank runs the Euclidean path; the six ranks across the three nodes step
// together bit-identically.
TEST_F(PeerIntegrationTest, HarnessRunsSixRanksOnThreeNodes) {
  PeerClusterOptions o = Options();
  o.peers = false;
  o.giftd.min_gain = 0.99;  // no layer gains that much
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  ASSERT_OK(cluster_->WaitForAll([](const json& l) { return l["attached"]; },
                                 absl::Seconds(60)));
  ASSERT_OK(cluster_->WaitForMoreSteps(20, absl::Seconds(60)));
  ASSERT_OK(cluster_->StopRanks(absl::Seconds(30)));
  EXPECT_GE(ExpectRecordsAgree(), 20);
}

TEST_F(PeerIntegrationTest, SixRanksOnThreeNodesRunOnePlanBitIdentically) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  ASSERT_OK(cluster_->WaitForAll([](const json& l) { return l["attached"]; },
                                 absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(WaitForGift());
  // Factors keep coming: every refresh is computed by the layer's owner and
  // reaches all six ranks at the same step.
  const std::string layer = kRealLayers[1];
  const int64_t v = GiftVersion(cluster_->Report(0).back(), layer);
  ASSERT_NO_FATAL_FAILURE(WaitForVersionAbove(layer, v));

  // The layers are owned round robin: some factor was computed on a
  // follower (its refresh count) and used everywhere.
  int64_t follower_refreshes = 0;
  for (int node = 1; node < cluster_->nodes(); ++node) {
    absl::StatusOr<json> layers = cluster_->daemon(node).CtlJson({"layers"});
    ASSERT_OK(layers);
    for (const json& l : Field(*layers, "layers")) {
      follower_refreshes += Int(l, "refreshes");
    }
  }
  EXPECT_GT(follower_refreshes, 0) << "no factor computed on a follower";

  // An operator's change on a follower is forwarded to the leader and
  // applied by every rank at the same step.
  absl::StatusOr<json> set = cluster_->daemon(2).CtlJson({"set-interval", "7"});
  ASSERT_OK(set);
  const int64_t epoch = Int(*set, "plan_epoch");
  ASSERT_OK(cluster_->WaitForAll(
      [&](const json& l) {
        return l["epoch"].get<int64_t>() >= epoch && l["refresh_interval"] == 7;
      },
      absl::Seconds(60)));
  for (int node = 0; node < cluster_->nodes(); ++node) {
    absl::StatusOr<json> st = cluster_->daemon(node).CtlJson({"status"});
    ASSERT_OK(st);
    EXPECT_EQ(Int(*st, "refresh_interval"), 7) << "node " << node;
    EXPECT_EQ(Int(*st, "world_size"), 6) << "node " << node;
  }
  ASSERT_OK(cluster_->WaitForMoreSteps(10, absl::Seconds(30)));
  ASSERT_OK(cluster_->StopRanks(absl::Seconds(30)));
  EXPECT_GE(ExpectRecordsAgree(), 20);
  // The switch to the new epoch happened at one step on every rank (the
  // records agree on the epoch of every step) and after it K was 7.
  std::set<int64_t> switch_steps;
  for (int r = 0; r < cluster_->world_size(); ++r) {
    for (const json& l : cluster_->Report(r)) {
      if (l["epoch"].get<int64_t>() >= epoch) {
        switch_steps.insert(l["step"].get<int64_t>());
        break;
      }
    }
  }
  EXPECT_EQ(switch_steps.size(), 1u);
}

TEST_F(PeerIntegrationTest, AKilledFollowerDaemonSplitsNobody) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  ASSERT_NO_FATAL_FAILURE(WaitForGift());
  // Its ranks keep training on the last agreed versions, detached; no rank
  // uses a version node 2's ranks lack.
  ASSERT_NO_FATAL_FAILURE(KillDaemon(2));
  for (int r = 4; r < 6; ++r) {
    EXPECT_EQ(cluster_->Report(r).back()["attached"], false) << "rank " << r;
  }
  // A restarted follower re-joins, its ranks re-attach and the job moves
  // on to new factor versions together.
  ASSERT_NO_FATAL_FAILURE(RestartAndMoveOn(2, kRealLayers[0], /*witness=*/0));
}

// The leader dies: the followers keep serving their ranks on the last plan
// and factors; a restarted leader is rebuilt from the followers' joins (their
// plans, epochs and factors) and the job moves on to new versions together.
TEST_F(PeerIntegrationTest, ARestartedLeaderIsRebuiltFromTheFollowers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  ASSERT_NO_FATAL_FAILURE(WaitForGift());
  ASSERT_NO_FATAL_FAILURE(KillDaemon(0));
  // kRealLayers[0] is owned by the leader.
  ASSERT_NO_FATAL_FAILURE(RestartAndMoveOn(0, kRealLayers[0], /*witness=*/2));
}

TEST_F(PeerIntegrationTest, APartitionBetweenDaemonsNeverSplitsTheRanks) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  ASSERT_NO_FATAL_FAILURE(WaitForGift());
  std::cout << "partitioning node 1's daemon ("
            << (cluster_->netns() ? "blackhole routes between Peer addresses"
                                  : "SIGSTOP, loopback mode")
            << ")" << std::endl;
  ASSERT_OK(cluster_->Partition(1, true));
  ASSERT_OK(cluster_->WaitForMoreSteps(40, absl::Seconds(60)));
  ExpectRecordsAgree();
  ASSERT_OK(cluster_->Partition(1, false));
  // Healed: coordination resumes and new versions reach every rank.
  const std::string layer = kRealLayers[3];
  const int64_t v = GiftVersion(cluster_->Report(0).back(), layer);
  ASSERT_NO_FATAL_FAILURE(WaitForVersionAbove(layer, v));
  ASSERT_OK(cluster_->StopRanks(absl::Seconds(30)));
  EXPECT_GE(ExpectRecordsAgree(), 40);
}

// A Join by hand (peer_probe) from the spare namespace.
std::string Probe(const PeerCluster& c, const std::vector<std::string>& args) {
  std::string cmd;
  for (const std::string& p : c.CommandPrefix(c.nodes())) {
    absl::StrAppend(&cmd, p, " ");
  }
  absl::StrAppend(&cmd, GIFT_PEER_PROBE_BIN, " --address=", c.PeerAddress(0));
  for (const std::string& a : args) absl::StrAppend(&cmd, " ", a);
  return Shell(cmd).output;
}

TEST_F(PeerIntegrationTest, BadPeersAreRefused) {
  PeerClusterOptions o = Options();
  o.nodes = 1;  // the leader alone is enough to refuse
  ASSERT_NO_FATAL_FAILURE(StartCluster(o, /*ranks=*/false));
  const PeerCluster& c = *cluster_;
  const std::string wrong_token = dir_ + "/wrong.token";
  { std::ofstream(wrong_token) << "not-the-token"; }

  struct Bad {
    std::string name, job, token, want;
  };
  const std::vector<Bad> bad = {
      {"bad-job", "otherjob", c.token_file(), "PERMISSION_DENIED"},
      {"bad-token", kJob, wrong_token, "UNAUTHENTICATED"},
  };
  for (const Bad& b : bad) {
    absl::StatusOr<std::unique_ptr<Giftd>> d =
        c.ExtraDaemon(b.name, 0, c.PeerFlags(c.nodes(), b.job, b.token));
    ASSERT_OK(d);
    EXPECT_TRUE(WaitFor([&] { return absl::StrContains((*d)->Log(), b.want); },
                        absl::Seconds(20)))
        << b.name << "'s log:\n"
        << (*d)->Log();
  }
  // Without a token file a peer daemon does not start at all.
  absl::StatusOr<std::unique_ptr<Giftd>> no_token =
      c.ExtraDaemon("no-token", 0, c.PeerFlags(c.nodes(), kJob, ""));
  ASSERT_FALSE(no_token.ok());
  EXPECT_THAT(no_token.status().message(), HasSubstr("job_token_file"));

  // The same refusals by hand, and a wrong layout version.
  EXPECT_THAT(Probe(c, {absl::StrCat("--job=", kJob)}),
              HasSubstr("code=UNAUTHENTICATED"));
  EXPECT_THAT(Probe(c, {"--job=otherjob", "--token-file=" + c.token_file()}),
              HasSubstr("code=PERMISSION_DENIED"));
  EXPECT_THAT(
      Probe(c, {absl::StrCat("--job=", kJob), "--token-file=" + c.token_file(),
                "--layout-version=999"}),
      HasSubstr("code=FAILED_PRECONDITION"));

  // None of them is a member.
  const std::string leader_log = cluster_->daemon(0).Log();
  for (const char* name : {"bad-job", "bad-token", "no-token", "peer-probe"}) {
    EXPECT_THAT(leader_log, ::testing::Not(HasSubstr(name))) << leader_log;
  }
}

}  // namespace
}  // namespace gift::testing_daemon
