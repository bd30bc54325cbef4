// Leader election end to end (issue 16, DESIGN §4): three giftd "nodes"
// that elect their job's leader on a real etcd (giftd --coordinator; the
// etcd is started by the test, daemon/coord/test_etcd.h), each with two
// rank_worker processes on the committed real data.
//
// The tests run in loopback mode only (every node on 127.0.0.1 with ports
// of its own), even where network namespaces could be made: the test's
// etcd and the TCP forwarders that cut one daemon off it
// (daemon/coord/test_net.h) listen on 127.0.0.1 of the test's own network
// namespace, and scripts/netns.sh puts nothing there (the namespaces' bridge
// lives in a namespace of its own), so no node namespace could reach them.
// What is tested here is the election and the fencing of plans by term,
// not the Peer network, which peer_integration_test covers in namespaces.
//
// Every test compares the ranks' per-step reports (PeerCluster::
// RecordsAgree: the same plan epoch, path and factor version per layer, and
// bit-identical averaged buckets and parameters on all six ranks). Every
// wait is a bounded poll; nothing asserts how fast anything happened.
#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "daemon/coord/test_etcd.h"
#include "daemon/coord/test_net.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"
#include "tests/daemon/peer_cluster.h"

namespace gift::testing_daemon {
namespace {

namespace coord = ::gift::daemon::coord;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kJob[] = "electjob";
constexpr int kTtlS = 2;  // the shortest lease etcd grants
constexpr char kLeaderRole[] = "PEER_ROLE_LEADER";
constexpr char kFollowerRole[] = "PEER_ROLE_FOLLOWER";

// "http://127.0.0.1:P" (TestEtcd, TcpForwarder) as giftd's coordinator URI.
std::string EtcdUri(const std::string& http_endpoint) {
  return absl::StrCat("etcd://", absl::StripPrefix(http_endpoint, "http://"));
}

std::vector<std::string> CoordinatorFlags(const std::string& uri) {
  return {"--coordinator=" + uri, absl::StrCat("--coordinator-ttl-s=", kTtlS)};
}

// The sum of every series of `name` in a Prometheus text exposition; NaN
// when there is none.
double MetricSum(const std::string& text, const std::string& name) {
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, name)) {
      continue;
    }
    absl::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;
    if (rest[0] == '{') {
      const size_t close = rest.rfind('}');
      if (close == absl::string_view::npos) continue;
      rest = rest.substr(close + 1);
    }
    rest = absl::StripLeadingAsciiWhitespace(rest);
    const std::string value(rest.substr(0, rest.find(' ')));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    sum += v;
    found = true;
  }
  return found ? sum : std::nan("");
}

// One daemon's view of the election (giftctl status --json, status.peer).
struct PeerView {
  std::string error;  // "": read
  std::string instance;
  std::string role, leader_instance, leader_address, coordinator;
  int64_t term = 0;
  int64_t leader_changes = 0;
  std::string Summary() const {
    if (!error.empty()) return error;
    return absl::StrCat(instance, " ", role, " term=", term,
                        " leader=", leader_instance, "@", leader_address,
                        " changes=", leader_changes);
  }
};

PeerView ViewOf(const Giftd& d) {
  PeerView v;
  absl::StatusOr<json> st = d.CtlJson({"status"});
  if (!st.ok()) {
    v.error = std::string(st.status().message());
    return v;
  }
  const json& p = Field(*st, "peer");
  v.instance = Str(*st, "daemon_instance");
  v.role = Str(p, "role");
  v.leader_instance = Str(p, "leader_instance");
  v.leader_address = Str(p, "leader_address");
  v.coordinator = Str(p, "coordinator");
  v.term = Int(p, "term");  // protobuf JSON prints int64 as a string
  v.leader_changes = Int(p, "leader_changes");
  return v;
}

class PeerElectionTest : public coord::TestEtcdTest {
 protected:
  void SetUp() override {
    coord::TestEtcdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    absl::StatusOr<std::string> dir = MakeTempDir("giftd_elect");
    ASSERT_OK(dir);
    dir_ = *dir;
  }

  void TearDown() override {
    if (cluster_ && HasFailure()) cluster_->KeepDir();
    cluster_.reset();  // the daemons first, while etcd still answers
    forwarders_.clear();
    etcd_.reset();
  }

  // Loopback mode (see the top of the file), every daemon on `uri_of(slot)`.
  static PeerClusterOptions Options(
      std::function<std::string(int slot)> uri_of) {
    PeerClusterOptions o;
    o.job = kJob;
    o.netns_script = "";  // loopback: the namespaces cannot reach etcd
    o.giftd.refresh_interval = 5;
    o.giftd.staleness_limit = 1000;  // the failure tests keep old factors
    o.coordinator_flags = [uri_of](int slot) {
      return CoordinatorFlags(uri_of(slot));
    };
    return o;
  }
  PeerClusterOptions SharedEtcdOptions() {
    const std::string uri = EtcdUri(etcd_->endpoint());
    return Options([uri](int) { return uri; });
  }

  void StartCluster(const PeerClusterOptions& o) {
    const PeerBinaries b = {GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN,
                            GIFT_RANK_WORKER_BIN};
    absl::StatusOr<std::unique_ptr<PeerCluster>> c =
        PeerCluster::Create(b, dir_, o);
    ASSERT_OK(c);
    cluster_ = *std::move(c);
    ASSERT_OK(cluster_->StartDaemons());
    for (int i = 0; i < cluster_->nodes(); ++i) live_.insert(i);
    ASSERT_OK(cluster_->StartRanks());
  }

  // Every daemon's view; `except` (e.g. a stopped daemon) is not asked.
  std::string Views(int except = -1) const {
    std::string s;
    for (int i = 0; i < cluster_->nodes(); ++i) {
      absl::StrAppend(&s, "\n node ", i, ": ");
      if (!live_.count(i)) {
        absl::StrAppend(&s, "(not running)");
      } else if (i == except) {
        absl::StrAppend(&s, "(left out)");
      } else {
        absl::StrAppend(&s, ViewOf(cluster_->daemon(i)).Summary());
      }
    }
    return s;
  }

  // Polls until exactly one live daemon leads, with a term above
  // `above_term`, and every live daemon names it (its instance) and that
  // term. Returns the leader's node, or -1 (a failure, with every view).
  // `except`: a live node left out (one cut off etcd: it cannot know).
  int WaitForLeader(int64_t above_term, absl::Duration timeout,
                    int64_t* term = nullptr, int except = -1) {
    int leader = -1;
    int64_t t = 0;
    const bool ok = WaitFor(
        [&] {
          std::map<int, PeerView> v;
          std::vector<int> leaders;
          for (int i : live_) {
            if (i == except) continue;
            v[i] = ViewOf(cluster_->daemon(i));
            if (!v[i].error.empty()) return false;
            if (v[i].role == kLeaderRole) leaders.push_back(i);
          }
          if (leaders.size() != 1) return false;
          const PeerView& l = v[leaders[0]];
          if (l.term <= above_term) return false;
          for (const auto& [i, w] : v) {
            if (w.leader_instance != l.instance || w.term != l.term) {
              return false;
            }
          }
          leader = leaders[0];
          t = l.term;
          return true;
        },
        timeout, absl::Milliseconds(200));
    if (!ok) {
      ADD_FAILURE() << "no single agreed leader with a term above "
                    << above_term << " after " << timeout << ":"
                    << Views(except);
      return -1;
    }
    if (term != nullptr) *term = t;
    std::cout << "leader: node " << leader << ", term " << t << Views(except)
              << std::endl;
    return leader;
  }

  // Polls until no live daemon reports that it leads; false on timeout.
  bool WaitForNoLeader(absl::Duration timeout) {
    return WaitFor(
        [&] {
          for (int i : live_) {
            const PeerView v = ViewOf(cluster_->daemon(i));
            if (!v.error.empty() || v.role == kLeaderRole) return false;
          }
          return true;
        },
        timeout, absl::Milliseconds(200));
  }

  // Reports (does not assert) what the daemons refused for an older term
  // and their step-downs: whether an old-term plan was sent is a race.
  void PrintFencing() {
    for (int i = 0; i < cluster_->nodes(); ++i) {
      std::cout << "node " << i << ": gift_peer_refused_total "
                << Metric(i, "gift_peer_refused_total") << std::endl;
      for (absl::string_view l :
           absl::StrSplit(cluster_->daemon(i).Log(), '\n')) {
        if (absl::StrContains(l, "refused: this giftd has seen term") ||
            absl::StrContains(l, "no longer the job's leader")) {
          std::cout << "  " << l << std::endl;
        }
      }
    }
  }

  // Polls node's `name` (the sum of its series) until `ok` holds: giftd's
  // poll cycle sets the gauges (once it has ranks), not the election.
  ::testing::AssertionResult MetricEventually(
      int node, const std::string& name, const std::string& want,
      const std::function<bool(double)>& ok) {
    double last = std::nan("");
    if (WaitFor(
            [&] {
              last = Metric(node, name);
              return ok(last);
            },
            absl::Seconds(15), absl::Milliseconds(100))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "node " << node << ": " << name
                                         << " is " << last << ", want " << want;
  }
  ::testing::AssertionResult MetricIs(int node, const std::string& name,
                                      double want) {
    return MetricEventually(node, name, absl::StrCat("== ", want),
                            [want](double v) { return v == want; });
  }

  double Metric(int node, const std::string& name) {
    absl::StatusOr<std::string> m = cluster_->daemon(node).Metrics();
    if (!m.ok()) return std::nan("");
    return MetricSum(*m, name);
  }

  // giftctl set-interval `k` on `node`, retried until it is accepted (a
  // follower answers UNAVAILABLE until it has a leader to forward to);
  // the new plan epoch, or -1 (a failure, with the last answer).
  int64_t SetIntervalEventually(int node, int k, absl::Duration timeout) {
    int64_t epoch = -1;
    std::string last;
    WaitFor(
        [&] {
          absl::StatusOr<json> r =
              cluster_->daemon(node).CtlJson({"set-interval", absl::StrCat(k)});
          if (!r.ok()) {
            last = std::string(r.status().message());
            return false;
          }
          epoch = Int(*r, "plan_epoch");
          return true;
        },
        timeout, absl::Milliseconds(500));
    if (epoch < 0) {
      ADD_FAILURE() << "set-interval " << k << " on node " << node
                    << " never accepted; last answer: " << last << Views();
    }
    return epoch;
  }

  // Waits until every rank runs with plan epoch >= `epoch` and K = `k`.
  void WaitForInterval(int64_t epoch, int k) {
    ASSERT_OK(cluster_->WaitForAll(
        [&](const json& l) {
          return l["epoch"].get<int64_t>() >= epoch &&
                 l["refresh_interval"] == k;
        },
        absl::Seconds(90)))
        << Views();
  }

  // The steps at which the ranks first ran an epoch >= `epoch` (one step,
  // when all ranks switched together) and K was `k` from then on.
  std::set<int64_t> SwitchSteps(int64_t epoch, int k) {
    std::set<int64_t> steps;
    for (int r = 0; r < cluster_->world_size(); ++r) {
      bool switched = false;
      for (const json& l : cluster_->Report(r)) {
        if (!switched && l["epoch"].get<int64_t>() >= epoch) {
          switched = true;
          steps.insert(l["step"].get<int64_t>());
        }
        if (switched) {
          EXPECT_EQ(l["refresh_interval"], k)
              << "rank " << r << " step " << l["step"];
        }
      }
    }
    return steps;
  }

  // Every real layer's factor version rises on every rank above what rank
  // `witness` ran with last.
  void WaitForNewFactors(int witness) {
    const json last = cluster_->Report(witness).back();
    std::map<std::string, int64_t> v;
    for (const std::string& l : kRealLayers) v[l] = GiftVersion(last, l);
    ASSERT_OK(cluster_->WaitForAll(
        [&](const json& line) {
          for (const auto& [layer, version] : v) {
            if (GiftVersion(line, layer) <= version) return false;
          }
          return true;
        },
        absl::Seconds(90)))
        << "factor versions at the start: " << json(v).dump() << Views();
  }

  int64_t ExpectRecordsAgree() {
    int64_t steps = 0;
    EXPECT_OK(cluster_->RecordsAgree(&steps));
    return steps;
  }

  void StopRanksAndCompare(int64_t min_steps) {
    ASSERT_OK(cluster_->StopRanks(absl::Seconds(30)));
    EXPECT_GE(ExpectRecordsAgree(), min_steps);
  }

  // Control works for the whole job: `set-interval 7` through `node`
  // (retried while refused) is applied by every rank at one step, factors
  // rise afterwards (seen by rank `witness`), and the records agree over at
  // least 40 steps.
  void ExpectSetIntervalAppliesEverywhere(int node, int witness) {
    const int64_t epoch = SetIntervalEventually(node, 7, absl::Seconds(30));
    ASSERT_GE(epoch, 0);
    ASSERT_NO_FATAL_FAILURE(WaitForInterval(epoch, 7));
    ASSERT_NO_FATAL_FAILURE(WaitForNewFactors(witness));
    ASSERT_NO_FATAL_FAILURE(StopRanksAndCompare(40));
    EXPECT_EQ(SwitchSteps(epoch, 7).size(), 1u);
  }

  int OtherLive(int not_this) const {
    for (int i : live_) {
      if (i != not_this) return i;
    }
    return -1;
  }

  // The first leader of a started cluster (its node in *leader, its term
  // in *term), once every rank runs every real layer on the GIFT path.
  void WaitForFirstLeaderOnGift(int* leader, int64_t* term) {
    *leader = WaitForLeader(0, absl::Seconds(kTtlS + 15), term);
    ASSERT_GE(*leader, 0);
    ASSERT_OK(cluster_->WaitForAll(AllRealLayersOnGift, absl::Seconds(90)))
        << Views();
  }

  std::string dir_;
  std::vector<std::unique_ptr<coord::TcpForwarder>> forwarders_;
  std::unique_ptr<PeerCluster> cluster_;
  std::set<int> live_;  // nodes whose daemon runs
};

TEST_F(PeerElectionTest, ThreeDaemonsElectOneLeaderAndShareItsTerm) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(SharedEtcdOptions()));
  int64_t term = 0;
  const int leader = WaitForLeader(0, absl::Seconds(kTtlS + 15), &term);
  ASSERT_GE(leader, 0);
  const PeerView lv = ViewOf(cluster_->daemon(leader));
  const std::string uri = EtcdUri(etcd_->endpoint());
  for (int i = 0; i < cluster_->nodes(); ++i) {
    const PeerView v = ViewOf(cluster_->daemon(i));
    EXPECT_EQ(v.role, i == leader ? kLeaderRole : kFollowerRole) << i;
    EXPECT_EQ(v.coordinator, uri) << "node " << i;
    EXPECT_EQ(v.leader_address, cluster_->PeerAddress(leader)) << "node " << i;
  }
  // The leader is whoever holds the job's election key in etcd.
  const ShellResult key = Shell(
      absl::StrCat("env ETCDCTL_API=3 ", coord::kEtcdctlBinary,
                   " --endpoints=", etcd_->endpoint(),
                   " get --print-value-only /gift/jobs/", kJob, "/leader"));
  EXPECT_EQ(key.exit_code, 0) << key.output;
  EXPECT_THAT(key.output, HasSubstr(lv.instance));

  ASSERT_OK(cluster_->WaitForAll([](const json& l) { return l["attached"]; },
                                 absl::Seconds(60)));
  for (int i = 0; i < cluster_->nodes(); ++i) {
    EXPECT_TRUE(MetricIs(i, "gift_peer_coordinated", 1));
    EXPECT_TRUE(MetricIs(i, "gift_peer_leader", i == leader ? 1 : 0));
    EXPECT_TRUE(MetricIs(i, "gift_peer_term", static_cast<double>(term)));
  }
  ASSERT_OK(cluster_->WaitForAll(AllRealLayersOnGift, absl::Seconds(90)))
      << Views();
  ASSERT_NO_FATAL_FAILURE(WaitForNewFactors(0));
  ASSERT_OK(cluster_->WaitForMoreSteps(10, absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(StopRanksAndCompare(20));
  // Nobody lost or changed its leader meanwhile.
  for (int i = 0; i < cluster_->nodes(); ++i) {
    const PeerView v = ViewOf(cluster_->daemon(i));
    EXPECT_EQ(v.term, term) << "node " << i;
    EXPECT_EQ(v.leader_instance, lv.instance) << "node " << i;
  }
}

TEST_F(PeerElectionTest, ASigkilledLeaderIsReplacedAndControlWorksAgain) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(SharedEtcdOptions()));
  int old_leader = -1;
  int64_t term = 0;
  ASSERT_NO_FATAL_FAILURE(WaitForFirstLeaderOnGift(&old_leader, &term));
  const int64_t old_changes =
      ViewOf(cluster_->daemon(OtherLive(old_leader))).leader_changes;

  // For good: nothing restarts it until the replacement below.
  ASSERT_OK(cluster_->daemon(old_leader).Kill(SIGKILL));
  live_.erase(old_leader);
  int64_t new_term = 0;
  const int leader = WaitForLeader(term, absl::Seconds(kTtlS + 15), &new_term);
  ASSERT_GE(leader, 0);
  EXPECT_GT(new_term, term);
  const int follower = OtherLive(leader);
  EXPECT_GT(ViewOf(cluster_->daemon(follower)).leader_changes, old_changes);
  EXPECT_TRUE(MetricIs(leader, "gift_peer_leader", 1));
  EXPECT_TRUE(MetricIs(follower, "gift_peer_leader", 0));
  EXPECT_TRUE(
      MetricIs(follower, "gift_peer_term", static_cast<double>(new_term)));
  EXPECT_TRUE(MetricEventually(follower, "gift_peer_leader_changes_total",
                               absl::StrCat("> ", old_changes), [&](double v) {
                                 return v > static_cast<double>(old_changes);
                               }));

  // Control works again, through a follower of the new leader.
  const int64_t epoch = SetIntervalEventually(follower, 7, absl::Seconds(30));
  ASSERT_GE(epoch, 0);
  // The dead node's ranks get no new plan: the ranks' agreement keeps the
  // whole job on the last plan they all hold.
  ASSERT_OK(cluster_->WaitForMoreSteps(30, absl::Seconds(60)));
  EXPECT_TRUE(cluster_->AllRanksRunning());
  for (int r = 0; r < cluster_->world_size(); ++r) {
    EXPECT_LT(cluster_->Report(r).back()["epoch"].get<int64_t>(), epoch)
        << "rank " << r << " ran the new plan without its node's daemon";
  }
  ExpectRecordsAgree();

  // A replacement daemon on the dead node comes back as a follower of the
  // elected leader, and the whole job adopts its plans and factors.
  ASSERT_OK(cluster_->ReplaceDaemon(old_leader));
  live_.insert(old_leader);
  EXPECT_EQ(WaitForLeader(term, absl::Seconds(kTtlS + 15)), leader);
  const PeerView back = ViewOf(cluster_->daemon(old_leader));
  EXPECT_EQ(back.role, kFollowerRole) << back.Summary();
  EXPECT_EQ(back.term, new_term) << back.Summary();
  ASSERT_OK(cluster_->WaitForAll([](const json& l) { return l["attached"]; },
                                 absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(WaitForInterval(epoch, 7));
  ASSERT_NO_FATAL_FAILURE(WaitForNewFactors(follower * 2));
  ASSERT_NO_FATAL_FAILURE(StopRanksAndCompare(40));
  EXPECT_EQ(SwitchSteps(epoch, 7).size(), 1u)
      << "the ranks switched to K = 7 at different steps";
  for (int i = 0; i < cluster_->nodes(); ++i) {
    absl::StatusOr<json> st = cluster_->daemon(i).CtlJson({"status"});
    ASSERT_OK(st);
    EXPECT_EQ(Int(*st, "refresh_interval"), 7) << "node " << i;
  }
}

TEST_F(PeerElectionTest, ALeaderCutOffFromEtcdStepsDownAndItsPlansAreRefused) {
  // Each daemon reaches etcd through a forwarder of its own, so that one
  // daemon can be cut off etcd while the others keep it (and the Peer
  // links between the daemons stay up).
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<coord::TcpForwarder>> f =
        coord::TcpForwarder::Start(etcd_->client_port());
    ASSERT_OK(f);
    forwarders_.push_back(*std::move(f));
  }
  std::vector<std::string> uris;
  for (const auto& f : forwarders_) uris.push_back(EtcdUri(f->endpoint()));
  PeerClusterOptions o = Options([uris](int slot) { return uris[slot]; });
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  int old_leader = -1;
  int64_t term = 0;
  ASSERT_NO_FATAL_FAILURE(WaitForFirstLeaderOnGift(&old_leader, &term));

  forwarders_[old_leader]->Cut();
  std::cout << "cut node " << old_leader << "'s daemon off etcd" << std::endl;
  // The old leader stops leading, and the other two elect a new one.
  EXPECT_TRUE(WaitFor(
      [&] {
        const PeerView v = ViewOf(cluster_->daemon(old_leader));
        return v.error.empty() && v.role != kLeaderRole;
      },
      absl::Seconds(kTtlS + 15), absl::Milliseconds(200)))
      << Views();
  int64_t new_term = 0;  // the election among the other two
  const int leader = WaitForLeader(term, absl::Seconds(kTtlS + 15), &new_term,
                                   /*except=*/old_leader);
  ASSERT_GE(leader, 0);
  ASSERT_NE(leader, old_leader);
  EXPECT_GT(new_term, term);
  // Exactly one daemon leads (the old one no longer does), and the others
  // have seen the new term.
  const PeerView cut = ViewOf(cluster_->daemon(old_leader));
  std::cout << "node " << old_leader << " cut off: " << cut.Summary()
            << std::endl;
  EXPECT_NE(cut.role, kLeaderRole) << cut.Summary();
  EXPECT_TRUE(MetricIs(old_leader, "gift_peer_leader", 0));
  EXPECT_TRUE(MetricIs(leader, "gift_peer_leader", 1));
  for (int i = 0; i < cluster_->nodes(); ++i) {
    if (i == old_leader) continue;
    EXPECT_TRUE(MetricEventually(
        i, "gift_peer_term", absl::StrCat(">= ", new_term),
        [&](double v) { return v >= static_cast<double>(new_term); }));
  }
  // What the others refused for an older term (only if the old leader sent
  // something after the new term: not guaranteed, so only reported).
  PrintFencing();
  // Training goes on meanwhile, on one plan.
  ASSERT_OK(cluster_->WaitForMoreSteps(30, absl::Seconds(60)));
  EXPECT_TRUE(cluster_->AllRanksRunning());
  ExpectRecordsAgree();

  // Back on etcd: it follows the new leader, and the job moves on together.
  forwarders_[old_leader]->Restore();
  EXPECT_EQ(WaitForLeader(term, absl::Seconds(kTtlS + 15)), leader);
  const PeerView back = ViewOf(cluster_->daemon(old_leader));
  EXPECT_EQ(back.role, kFollowerRole) << back.Summary();
  EXPECT_EQ(back.term, new_term) << back.Summary();
  ASSERT_NO_FATAL_FAILURE(ExpectSetIntervalAppliesEverywhere(old_leader, 0));
}

// The leader's daemon is paused (SIGSTOP: no keepalive, no Peer traffic)
// past its lease, so the others elect a new leader; when it resumes it may
// still send what it had under way with its old term, which the others
// refuse, and it follows the new leader.
TEST_F(PeerElectionTest, APausedLeaderResumesAsAFollower) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(SharedEtcdOptions()));
  int old_leader = -1;
  int64_t term = 0;
  ASSERT_NO_FATAL_FAILURE(WaitForFirstLeaderOnGift(&old_leader, &term));

  ASSERT_OK(cluster_->Partition(old_leader, true));  // SIGSTOP (loopback)
  int64_t new_term = 0;
  const int leader = WaitForLeader(term, absl::Seconds(kTtlS + 15), &new_term,
                                   /*except=*/old_leader);
  ASSERT_GE(leader, 0);
  EXPECT_GT(new_term, term);
  ASSERT_OK(cluster_->WaitForMoreSteps(20, absl::Seconds(60)));
  ASSERT_OK(cluster_->Partition(old_leader, false));  // SIGCONT

  // It steps down and follows the new leader; one leader, one term.
  EXPECT_EQ(WaitForLeader(term, absl::Seconds(kTtlS + 15)), leader);
  const PeerView back = ViewOf(cluster_->daemon(old_leader));
  EXPECT_EQ(back.role, kFollowerRole) << back.Summary();
  EXPECT_EQ(back.term, new_term) << back.Summary();
  EXPECT_TRUE(MetricIs(old_leader, "gift_peer_leader", 0));
  PrintFencing();
  ASSERT_NO_FATAL_FAILURE(
      ExpectSetIntervalAppliesEverywhere(old_leader, leader * 2));
}

TEST_F(PeerElectionTest, EtcdDownKeepsTrainingAndRecovers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(SharedEtcdOptions()));
  int old_leader = -1;
  int64_t term = 0;
  ASSERT_NO_FATAL_FAILURE(WaitForFirstLeaderOnGift(&old_leader, &term));

  etcd_->Stop();  // SIGKILL; the same ports and data dir on Restart
  std::cout << "etcd stopped" << std::endl;
  EXPECT_TRUE(WaitForNoLeader(absl::Seconds(kTtlS + 15)))
      << "a daemon still leads with etcd down:" << Views();
  for (int i = 0; i < cluster_->nodes(); ++i) {
    EXPECT_TRUE(MetricIs(i, "gift_peer_leader", 0));
  }
  // Without a leader no control change is made.
  const int follower = OtherLive(old_leader);
  absl::StatusOr<CommandResult> refused =
      cluster_->daemon(follower).Ctl({"set-interval", "7"});
  ASSERT_OK(refused);
  EXPECT_NE(refused->exit_code, 0) << refused->out;
  std::cout << "set-interval without a leader: " << refused->err << std::endl;
  // The ranks keep training, on one plan.
  ASSERT_OK(cluster_->WaitForMoreSteps(30, absl::Seconds(60)));
  EXPECT_TRUE(cluster_->AllRanksRunning());
  ExpectRecordsAgree();
  EXPECT_TRUE(WaitForNoLeader(absl::Seconds(1))) << Views();

  ASSERT_OK(etcd_->Restart());
  std::cout << "etcd restarted" << std::endl;
  int64_t new_term = 0;
  const int leader = WaitForLeader(term, absl::Seconds(kTtlS + 20), &new_term);
  ASSERT_GE(leader, 0);
  EXPECT_GT(new_term, term);
  ASSERT_NO_FATAL_FAILURE(
      ExpectSetIntervalAppliesEverywhere(OtherLive(leader), 0));
}

// giftd on a coordinator it cannot use: exit status 2 and a message that
// names the user and the endpoint. One giftd at a time, no ranks.
class CoordinatorStartTest : public PeerElectionTest {
 protected:
  void SetUp() override {
    PeerElectionTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    token_ = dir_ + "/job.token";
    std::ofstream(token_) << "electjob-token";
    ASSERT_EQ(::chmod(token_.c_str(), 0600), 0);
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "(files kept in " << dir_ << ")\n";
    } else if (!dir_.empty()) {
      std::filesystem::remove_all(dir_);
    }
    PeerElectionTest::TearDown();
  }

  std::vector<std::string> Flags(const std::string& uri,
                                 const std::vector<std::string>& more) {
    absl::StatusOr<int> port = FreePort();
    EXPECT_OK(port);
    std::vector<std::string> f = {
        absl::StrCat("--job-id=", kJob),
        absl::StrCat("--peer-address=127.0.0.1:", port.value_or(1)),
        "--job-token-file=" + token_};
    for (std::string& c : CoordinatorFlags(uri)) f.push_back(std::move(c));
    f.insert(f.end(), more.begin(), more.end());
    return f;
  }

  absl::StatusOr<std::unique_ptr<Giftd>> Start(
      const std::string& name, const std::vector<std::string>& flags) {
    const std::string dir = dir_ + "/" + name;
    std::filesystem::create_directories(dir);
    GiftdConfig c;
    c.node = name;
    c.extra_args = flags;
    return Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir, c);
  }

  // giftd with `flags` must not come up; then run again to completion (on
  // the config file that Start wrote) for its exit status and output.
  CommandResult Refused(const std::string& name,
                        const std::vector<std::string>& flags) {
    absl::StatusOr<std::unique_ptr<Giftd>> d = Start(name, flags);
    EXPECT_FALSE(d.ok()) << name << ": giftd came up:\n"
                         << (d.ok() ? (*d)->Log() : "");
    std::vector<std::string> argv = {GIFT_GIFTD_BIN, "--config",
                                     dir_ + "/" + name + "/giftd.yaml"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<CommandResult> r =
        testing_daemon::Run(argv, {}, absl::Seconds(60));
    EXPECT_OK(r);
    if (!r.ok()) return CommandResult{};
    std::cout << name << ": exit " << r->exit_code << ":\n"
              << r->out << r->err << std::endl;
    return *r;
  }

  std::string token_;
};

TEST_F(CoordinatorStartTest, BadCoordinatorCredentialsFailAtStart) {
  const std::string user = "gifttrainer";
  ASSERT_OK(etcd_->Etcdctl({"user", "add", "root:rootpw"}));
  ASSERT_OK(etcd_->Etcdctl({"user", "add", user + ":trainerpw"}));
  ASSERT_OK(etcd_->Etcdctl({"user", "grant-role", user, "root"}));
  ASSERT_OK(etcd_->Etcdctl({"auth", "enable"}));
  const std::string uri = EtcdUri(etcd_->endpoint());
  const std::string hostport =
      std::string(absl::StripPrefix(etcd_->endpoint(), "http://"));
  const std::string wrong = dir_ + "/wrong.pw", right = dir_ + "/right.pw";
  std::ofstream(wrong) << "not-the-password";
  std::ofstream(right) << "trainerpw";

  // A wrong password.
  const CommandResult bad = Refused(
      "wrong-password", Flags(uri, {"--coordinator-user=" + user,
                                    "--coordinator-password-file=" + wrong}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out + bad.err, HasSubstr(user));
  EXPECT_THAT(bad.out + bad.err, HasSubstr(hostport));

  // No etcd at all: a port nobody listens on.
  absl::StatusOr<int> closed = FreePort();
  ASSERT_OK(closed);
  const std::string closed_hostport = absl::StrCat("127.0.0.1:", *closed);
  const CommandResult none =
      Refused("no-etcd", Flags("etcd://" + closed_hostport, {}));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.out + none.err, HasSubstr(closed_hostport));

  // --coordinator and --leader-address together are refused.
  const CommandResult both =
      Refused("both", Flags(uri, {"--coordinator-user=" + user,
                                  "--coordinator-password-file=" + right,
                                  "--leader-address=127.0.0.1:1"}));
  EXPECT_NE(both.exit_code, 0);

  // The right password: it comes up and leads (so the refusals above were
  // the credentials' and the endpoint's).
  absl::StatusOr<std::unique_ptr<Giftd>> good = Start(
      "right-password", Flags(uri, {"--coordinator-user=" + user,
                                    "--coordinator-password-file=" + right}));
  ASSERT_OK(good);
  EXPECT_TRUE(WaitFor([&] { return ViewOf(**good).role == kLeaderRole; },
                      absl::Seconds(kTtlS + 15), absl::Milliseconds(200)))
      << ViewOf(**good).Summary() << "\n"
      << (*good)->Log();
  EXPECT_EQ(ViewOf(**good).coordinator, uri);
}

}  // namespace
}  // namespace gift::testing_daemon
