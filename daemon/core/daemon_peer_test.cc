// Three giftd cores of one job (a leader and two followers) joined by the
// in-process FakePeerNetwork: plans decided by the leader reach every rank,
// Control and the store go through the leader, and the sketch windows of
// every node make one factor, computed by the layer's owner and installed
// byte for byte in every rank's slot on every node.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/core/daemon.h"
#include "daemon/core/daemon_testutil.h"
#include "daemon/peer/fake_peer_link.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kNodes = 3;
constexpr int kWorld = 4;  // n0: ranks 0 and 1; n1: rank 2; n2: rank 3
constexpr int kFc2 = 1;    // owned by members[1 % 3] = n1

std::string Address(int node) { return absl::StrCat("n", node, ":1"); }

v1::RegisterRequest Request(int rank) {
  return ::gift::daemon::Request(rank, kWorld);
}

// A mapped rank (daemon_testutil.h) that also reads its plan and closes
// sketch windows.
struct PeerRank : FakeRank {
  static PeerRank Map(const v1::RegisterResponse& resp) {
    PeerRank p;
    static_cast<FakeRank&>(p) = FakeRank::Map(resp);
    return p;
  }
  shm::PlanView Plan() {
    shm::PlanView p;
    EXPECT_TRUE(shm::ReadPlan(control->data(), &p));
    return p;
  }
  // Closes sketch window w of layer i (ending at step 50 (w + 1)) with this
  // rank's share of Y = count · A Ω, A = diag(0.7^j), in the basis Ω of the
  // newest factor in its slot (Ω₀ without one), as a rank does: the first
  // ks = r + p of Ω's k_cap columns for the rank r of its plan.
  void CloseWindow(int i, int64_t w = 0) {
    shm::LayerEntry* e = entry(i);
    const int64_t d = e->d_in, k = e->k_cap, count = 1000 / kWorld;
    const int64_t ks =
        shm::SketchColumns(e->k_cap, e->oversample, Plan().layers[i].rank);
    std::vector<float> omega;
    int64_t omega_version = -1;
    if (shm::NewestFactorVersion(*e) >= 1) {
      shm::FactorData f;
      ASSERT_OK(shm::ReadNewestFactor(*e, *data[i], nullptr, &f));
      omega = f.omega;
      omega_version = f.version;
    } else {
      ASSERT_OK(shm::ReadOmega0(*e, *data[i], &omega));
    }
    ASSERT_EQ(omega.size(), static_cast<size_t>(d * k));
    std::vector<float> y(d * ks);
    double trace = 0;
    for (int64_t r = 0; r < d; ++r) {
      const double lambda = std::pow(0.7, r);
      trace += lambda * count;
      for (int64_t j = 0; j < ks; ++j) {
        y[r * ks + j] = static_cast<float>(count * lambda * omega[r * k + j]);
      }
    }
    auto began = shm::BeginWindow(e, data[i].get(), nullptr, w, false);
    ASSERT_OK(began);
    ASSERT_TRUE(*began);
    const auto layout = shm::LayerRegionLayout::Compute(d, e->r_cap, k);
    const auto& buffer = layout.sketch[w % 2];
    ASSERT_OK(data[i]->Write(buffer.y, y.data(), y.size() * 4));
    ASSERT_OK(data[i]->Write(buffer.trace, &trace, 8));
    ASSERT_OK(data[i]->Write(buffer.count, &count, 8));
    shm::SketchMeta meta{};
    meta.window = w;
    meta.omega_version = omega_version;
    meta.k = static_cast<int32_t>(ks);
    meta.start_step = 50 * w;
    meta.end_step = 50 * (w + 1);
    shm::CloseWindow(e, meta);
  }
};

class DaemonPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = absl::StrCat(::testing::TempDir(), "/peer-token-", getpid());
    std::ofstream(token_file_) << "s3cret\n";
    for (int n = 0; n < kNodes; ++n) {
      auto d = Daemon::Create(Config(n), &registry_[n], net_.Factory());
      ASSERT_OK(d);
      daemons_[n] = *std::move(d);
    }
    ASSERT_TRUE(net_.Drain());
    const int node_of_rank[kWorld] = {0, 0, 1, 2};
    for (int rank = 0; rank < kWorld; ++rank) {
      auto resp = daemons_[node_of_rank[rank]]->Register(Request(rank));
      ASSERT_OK(resp);
      ranks_.push_back(PeerRank::Map(*resp));
    }
  }
  void TearDown() override {
    for (auto& d : daemons_) d.reset();
    std::remove(token_file_.c_str());
  }

  DaemonConfig Config(int node) {
    auto c = LoadConfigFromString("", "", {});
    EXPECT_OK(c);
    c->node = absl::StrCat("n", node);
    c->shm_prefix = absl::StrCat("/gift-ptest", ::getpid(), "-n", node);
    c->poll_interval_ms = 10;
    c->refresh_threads = 1;
    c->metrics_address = "";
    c->job_id = "job";
    c->peer_address = Address(node);
    c->leader_address = Address(0);
    c->job_token_file = token_file_;
    // The leader's stride, not the followers' auto 50 / 16 = 3, is the
    // job's (ExpectAllRanksOnFc2).
    if (node == 0) c->sketch_stride = 5;
    return *c;
  }
  void PollAll() {
    for (auto& d : daemons_) {
      if (d != nullptr) d->PollOnce();
    }
    ASSERT_TRUE(net_.Drain());
  }
  // Polls every daemon until `done` or 20 s.
  template <typename F>
  bool PollUntil(F done) {
    return gift::testing::WaitUntil(
        [&] {
          if (done()) return true;
          PollAll();
          return false;
        },
        absl::Seconds(20), absl::Milliseconds(2));
  }
  // Ranks 0..ranks-1 hold an fc2 factor of `version` or newer.
  bool RanksHoldFc2(int64_t version, int ranks = kWorld) {
    for (int rank = 0; rank < ranks; ++rank) {
      if (shm::NewestFactorVersion(*ranks_[rank].entry(kFc2)) < version) {
        return false;
      }
    }
    return true;
  }
  // Rank 0's newest factor of fc2, once every other rank (on every node)
  // is checked to hold the same bytes (bitwise: the same floats).
  shm::FactorData Fc2OnEveryRank() {
    shm::FactorData first;
    EXPECT_OK(shm::ReadNewestFactor(*ranks_[0].entry(kFc2),
                                    *ranks_[0].data[kFc2], nullptr, &first));
    for (int rank = 1; rank < kWorld; ++rank) {
      shm::FactorData f;
      EXPECT_OK(shm::ReadNewestFactor(*ranks_[rank].entry(kFc2),
                                      *ranks_[rank].data[kFc2], nullptr, &f));
      EXPECT_EQ(f.version, first.version) << "rank " << rank;
      EXPECT_EQ(f.u, first.u) << "rank " << rank;
      EXPECT_EQ(f.c, first.c) << "rank " << rank;
      EXPECT_EQ(f.c_inv, first.c_inv) << "rank " << rank;
      EXPECT_EQ(f.omega, first.omega) << "rank " << rank;
      EXPECT_EQ(f.sigma2, first.sigma2) << "rank " << rank;
    }
    return first;
  }
  int64_t Epoch(int node) {
    auto s = daemons_[node]->GetStatus({});
    EXPECT_OK(s);
    return s.ok() ? s->plan_epoch() : -1;
  }
  // Every rank holds the leader's current epoch, with fc2 on the GIFT path.
  void ExpectAllRanksOnFc2(int64_t epoch) {
    for (int rank = 0; rank < kWorld; ++rank) {
      shm::PlanView p = ranks_[rank].Plan();
      EXPECT_EQ(p.plan_epoch, epoch) << "rank " << rank;
      EXPECT_EQ(p.sketch_stride, 5) << "rank " << rank;
      ASSERT_EQ(p.layers.size(), 2u);
      EXPECT_EQ(p.layers[0].path, 0) << "rank " << rank;
      EXPECT_EQ(p.layers[kFc2].path, 1) << "rank " << rank;
      EXPECT_EQ(p.layers[kFc2].candidate, 1) << "rank " << rank;
    }
  }
  void Pin(int node) {
    v1::SetLayerPolicyRequest pin;
    pin.set_layer("fc2");
    pin.mutable_settings()->set_pin(v1::PIN_IN);
    auto out = daemons_[node]->SetLayerPolicy(pin);
    ASSERT_OK(out);
    EXPECT_EQ(out->layer().settings().pin(), v1::PIN_IN);
    ASSERT_TRUE(net_.Drain());
  }

  FakePeerNetwork net_;  // outlives the daemons
  std::string token_file_;
  metrics::Registry registry_[kNodes];
  std::unique_ptr<Daemon> daemons_[kNodes];
  std::vector<PeerRank> ranks_;
};

TEST_F(DaemonPeerTest, FollowersPublishTheLeadersPlan) {
  EXPECT_EQ(daemons_[0]->PeerRole(), "leader of job job at n0:1");
  EXPECT_THAT(daemons_[1]->PeerRole(), HasSubstr("follower of n0:1"));
  Pin(0);
  const int64_t epoch = Epoch(0);
  EXPECT_GT(epoch, 1);
  EXPECT_EQ(Epoch(1), epoch);
  EXPECT_EQ(Epoch(2), epoch);
  ExpectAllRanksOnFc2(epoch);
  // Polls without telemetry change nothing anywhere.
  PollAll();
  PollAll();
  ExpectAllRanksOnFc2(epoch);
}

// GetStatus says where each daemon stands in the job (giftctl status).
TEST_F(DaemonPeerTest, StatusNamesThePeerRoleAndTheMembers) {
  absl::StatusOr<v1::GetStatusResponse> leader = daemons_[0]->GetStatus({});
  ASSERT_OK(leader);
  const v1::PeerStatus& l = leader->peer();
  EXPECT_EQ(l.role(), v1::PEER_ROLE_LEADER);
  EXPECT_EQ(l.job_id(), "job");
  EXPECT_EQ(l.leader_address(), "n0:1");
  EXPECT_EQ(l.leader_instance(), daemons_[0]->instance());
  EXPECT_TRUE(l.connected());
  ASSERT_EQ(l.members_size(), kNodes);
  int self = 0;
  for (const v1::PeerMemberStatus& m : l.members()) self += m.self();
  EXPECT_EQ(self, 1);
  EXPECT_TRUE(l.members(0).self());
  for (int node = 1; node < kNodes; ++node) {
    absl::StatusOr<v1::GetStatusResponse> f = daemons_[node]->GetStatus({});
    ASSERT_OK(f);
    EXPECT_EQ(f->peer().role(), v1::PEER_ROLE_FOLLOWER) << node;
    EXPECT_EQ(f->peer().leader_address(), "n0:1") << node;
    EXPECT_EQ(f->peer().members_size(), kNodes) << node;
    self = 0;
    for (const v1::PeerMemberStatus& m : f->peer().members()) {
      if (m.self()) {
        ++self;
        EXPECT_EQ(m.instance(), daemons_[node]->instance());
      }
    }
    EXPECT_EQ(self, 1) << node;
  }
}

TEST_F(DaemonPeerTest, ControlOnAFollowerIsForwardedToTheLeader) {
  Pin(2);
  const int64_t epoch = Epoch(0);
  ExpectAllRanksOnFc2(epoch);
  auto layers = daemons_[0]->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_EQ(layers->layers(kFc2).settings().pin(), v1::PIN_IN);
  // Bad input is refused by the leader and changes nothing.
  v1::SetRefreshIntervalRequest k;
  k.set_steps(0);
  EXPECT_THAT(daemons_[1]->SetRefreshInterval(k).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  k.set_steps(7);
  auto ok = daemons_[1]->SetRefreshInterval(k);
  ASSERT_OK(ok);
  ASSERT_TRUE(net_.Drain());
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(ranks_[rank].Plan().refresh_interval, 7) << "rank " << rank;
    EXPECT_EQ(ranks_[rank].Plan().plan_epoch, ok->plan_epoch());
  }
}

TEST_F(DaemonPeerTest, FollowerTelemetryReachesTheLeadersSelector) {
  shm::LayerCounters c{};
  c.steps = 20;
  c.n = 100000;
  c.upper = 5000;
  c.factor_version = -1;
  shm::WriteTelemetry(ranks_[3].entry(0), c);  // a rank on follower n2
  ASSERT_TRUE(PollUntil([&] {
    auto l = daemons_[0]->ListLayers({});
    return l.ok() && l->layers(0).vulnerability() > 0;
  }));
  // The follower itself decides nothing.
  auto l = daemons_[2]->ListLayers({});
  ASSERT_OK(l);
  EXPECT_EQ(l->layers(0).vulnerability(), 0);
}

TEST_F(DaemonPeerTest, WindowsOfEveryNodeMakeOneFactorEverywhere) {
  Pin(0);
  for (PeerRank& r : ranks_) r.CloseWindow(kFc2);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(1); }));
  const shm::FactorData first = Fc2OnEveryRank();
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(first.window, 50);
  EXPECT_NEAR(std::abs(first.u[0]), 1.0, 1e-3);  // A's top direction
  // Only the owner (n1) computed it.
  const std::string computed = "gift_factor_refresh_duration_seconds_count";
  EXPECT_THAT(
      metrics::Serialize(registry_[1]),
      HasSubstr(computed + "{job_id=\"job\",layer=\"fc2\",node=\"n1\"}"));
  EXPECT_THAT(metrics::Serialize(registry_[0]),
              ::testing::Not(HasSubstr(computed + "{")));
  EXPECT_THAT(metrics::Serialize(registry_[2]),
              ::testing::Not(HasSubstr(computed + "{")));
  for (int n = 0; n < kNodes; ++n) {
    auto l = daemons_[n]->ListLayers({});
    ASSERT_OK(l);
    EXPECT_EQ(l->layers(kFc2).factor_version(), 1) << "node " << n;
    // Every daemon names the same owner (the plan's).
    EXPECT_EQ(l->layers(kFc2).owner(), "n1") << "node " << n;
  }
}

TEST_F(DaemonPeerTest, AWindowMissingOnOneNodePublishesNothing) {
  Pin(0);
  for (int rank = 0; rank < 3; ++rank) ranks_[rank].CloseWindow(kFc2);
  for (int i = 0; i < 20; ++i) PollAll();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(shm::NewestFactorVersion(*ranks_[rank].entry(kFc2)), -1)
        << "rank " << rank;
  }
  // The last node's window completes the sum.
  ranks_[3].CloseWindow(kFc2);
  EXPECT_TRUE(PollUntil([&] { return RanksHoldFc2(1); }));
}

// The owner's broadcast of a factor is lost to one node (cut off just
// then): the other nodes sketch their next window in that factor's basis,
// the node in the old one, so no window of the layer could complete again.
// The owner sees the bases differ, sends the node the factor again, and
// the next window lines up: a new version everywhere.
TEST_F(DaemonPeerTest, AFactorBroadcastLostToANodeIsSentAgain) {
  Pin(0);
  // n2 (rank 3) contributes window 0, then is cut off before the factor.
  ranks_[3].CloseWindow(kFc2);
  daemons_[2]->PollOnce();
  ASSERT_TRUE(net_.Drain());
  net_.SetReachable(Address(2), false);
  for (int rank = 0; rank < 3; ++rank) ranks_[rank].CloseWindow(kFc2);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(1, 3); }));
  net_.SetReachable(Address(2), true);
  for (int i = 0; i < 5; ++i) PollAll();
  ASSERT_EQ(shm::NewestFactorVersion(*ranks_[3].entry(kFc2)), -1);

  // Window 1: ranks 0-2 in v1's basis, rank 3 in Ω₀.
  for (PeerRank& r : ranks_) r.CloseWindow(kFc2, 1);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(1); }))
      << "the factor never reached the node that lacked it";
  EXPECT_EQ(shm::NewestFactorVersion(*ranks_[0].entry(kFc2)), 1)
      << "window 1 is in two bases: it cannot make a factor";
  // Window 2, every rank in v1's basis: v2 everywhere.
  for (PeerRank& r : ranks_) r.CloseWindow(kFc2, 2);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(2); }));
  shm::FactorData f;
  ASSERT_OK(shm::ReadNewestFactor(*ranks_[3].entry(kFc2), *ranks_[3].data[kFc2],
                                  nullptr, &f));
  EXPECT_EQ(f.window, 150);
}

// At rank 8 the ranks of every node sketch 24 of fc2's 48 Ω columns
// (DESIGN §3: r + p): the narrower windows travel to the owner, sum there
// and make one factor of rank 8 on every node, in a basis whose 48 columns
// the next windows take their 24 from.
TEST_F(DaemonPeerTest, WindowsOfRankPlusOversamplingColumnsMakeOneFactor) {
  Pin(0);
  v1::SetRankRequest rank8;
  rank8.set_rank(8);
  ASSERT_OK(daemons_[0]->SetRank(rank8));
  ASSERT_TRUE(net_.Drain());
  for (PeerRank& r : ranks_) ASSERT_EQ(r.Plan().layers[kFc2].rank, 8);
  for (PeerRank& r : ranks_) r.CloseWindow(kFc2);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(1); }));
  const shm::FactorData first = Fc2OnEveryRank();
  EXPECT_EQ(first.r, 8);
  EXPECT_NEAR(std::abs(first.u[0]), 1.0, 1e-3);  // A's top direction
  EXPECT_EQ(first.omega.size(), 48u * 48u);      // d_in × k_cap
  // The next basis is built 24 wide (orthonormal): U itself, bit for bit,
  // then 16 new columns; its other 24 columns are Ω₀'s. The peers sent only
  // the 16 (PeerFactor.omega_u_cols, omega_cols), and every node rebuilt the
  // same bytes (Fc2OnEveryRank).
  std::vector<float> omega0;
  ASSERT_OK(
      shm::ReadOmega0(*ranks_[0].entry(kFc2), *ranks_[0].data[kFc2], &omega0));
  for (int i = 0; i < 48; ++i) {
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(first.omega[i * 48 + j], first.u[i * 8 + j]) << i << "," << j;
    }
    for (int j = 24; j < 48; ++j) {
      ASSERT_EQ(first.omega[i * 48 + j], omega0[i * 48 + j]) << i << "," << j;
    }
  }
  for (int a = 0; a < 24; ++a) {
    for (int b = 0; b < 24; ++b) {
      double dot = 0;
      for (int i = 0; i < 48; ++i) {
        dot += double{first.omega[i * 48 + a]} * first.omega[i * 48 + b];
      }
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
    }
  }

  // Raised to rank 16, the ranks sketch 32 columns of that Ω: its 24 built
  // ones and 8 of Ω₀'s (not orthogonal to them, of full column rank), and
  // every node gets one factor of rank 16 whose basis is built 32 wide.
  v1::SetRankRequest rank16;
  rank16.set_rank(16);
  ASSERT_OK(daemons_[0]->SetRank(rank16));
  ASSERT_TRUE(net_.Drain());
  for (PeerRank& r : ranks_) ASSERT_EQ(r.Plan().layers[kFc2].rank, 16);
  for (PeerRank& r : ranks_) r.CloseWindow(kFc2, 1);
  ASSERT_TRUE(PollUntil([&] { return RanksHoldFc2(2); }));
  const shm::FactorData second = Fc2OnEveryRank();
  EXPECT_EQ(second.r, 16);
  EXPECT_NEAR(std::abs(second.u[0]), 1.0, 1e-3);
  ASSERT_EQ(second.lambda.size(), 16u);
  for (int j = 1; j < 16; ++j)
    EXPECT_LE(second.lambda[j], second.lambda[j - 1]);
  for (int i = 0; i < 48; ++i) {
    for (int j = 0; j < 16; ++j) {
      ASSERT_EQ(second.omega[i * 48 + j], second.u[i * 16 + j])
          << i << "," << j;
    }
    EXPECT_NE(second.omega[i * 48 + 31], omega0[i * 48 + 31]) << i;
    for (int j = 32; j < 48; ++j) {
      ASSERT_EQ(second.omega[i * 48 + j], omega0[i * 48 + j]) << i << "," << j;
    }
  }
}

TEST_F(DaemonPeerTest, FollowerWithoutItsLeaderKeepsItsPlan) {
  Pin(0);
  const int64_t epoch = Epoch(0);
  daemons_[0].reset();
  for (int i = 0; i < 5; ++i) PollAll();
  for (int rank = 2; rank < kWorld; ++rank) {
    shm::PlanView p = ranks_[rank].Plan();
    EXPECT_EQ(p.plan_epoch, epoch) << "rank " << rank;
    EXPECT_EQ(p.layers[kFc2].path, 1) << "rank " << rank;
  }
  EXPECT_EQ(Epoch(1), epoch);
  // Changes need the leader; nothing changes without it.
  v1::SetRankRequest r;
  r.set_rank(8);
  EXPECT_THAT(daemons_[1]->SetRank(r).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Epoch(1), epoch);
}

TEST_F(DaemonPeerTest, StoreOfOneFollowerIsReadableOnAnother) {
  v1::StoreSetRequest set;
  set.set_job_id("job");
  set.set_key("nccl/id");
  set.set_value("abc");
  ASSERT_OK(daemons_[1]->StoreSet(set));
  v1::StoreGetRequest get;
  get.set_job_id("job");
  get.set_key("nccl/id");
  get.set_timeout_ms(1000);
  auto got = daemons_[2]->StoreGet(get, absl::Seconds(5));
  ASSERT_OK(got);
  EXPECT_EQ(got->value(), "abc");
  v1::StoreAddRequest add;
  add.set_job_id("job");
  add.set_key("barrier");
  add.set_delta(1);
  ASSERT_OK(daemons_[1]->StoreAdd(add));
  auto sum = daemons_[2]->StoreAdd(add);
  ASSERT_OK(sum);
  EXPECT_EQ(sum->value(), 2);
  set.set_job_id("other");
  EXPECT_THAT(daemons_[2]->StoreSet(set),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(DaemonPeerTest, RankOfAnotherJobIsRefused) {
  v1::RegisterRequest r = Request(3);
  r.set_job_id("other");
  EXPECT_THAT(daemons_[2]->Register(r).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("'job'"), HasSubstr("'other'"))));
}

// Fencing (issue 16): a plan or a factor of a leader term older than the
// newest a daemon has seen is refused and counted, whatever its epoch or
// version; the newer term's plan is applied. (With a static leader every
// term is 0, so nothing is ever refused.)
TEST_F(DaemonPeerTest, PlansAndFactorsOfAnOlderTermAreRefused) {
  // gift_peer_refused_total{kind} of daemon 1. The leader's own plans
  // (term 0) that reach it after term 5 are refused and counted too, so the
  // checks below are on how much each count grew.
  const auto refused = [&](const char* kind) {
    return SeriesValue(
        registry_[1],
        absl::StrCat("gift_peer_refused_total{job_id=\"job\",kind=\"", kind,
                     "\",node=\"n1\"}"));
  };
  v1::PeerPlan plan;
  plan.set_job_id("job");
  plan.set_plan_epoch(Epoch(0) + 10);
  plan.set_refresh_interval(50);
  plan.set_term(5);
  ASSERT_OK(daemons_[1]->OnPlan(plan));
  EXPECT_EQ(Epoch(1), plan.plan_epoch());
  plan.set_plan_epoch(plan.plan_epoch() + 10);
  plan.set_term(3);  // a deposed leader's, with a higher epoch
  const double plans_refused = refused("plan");
  const double factors_refused = refused("factor");
  EXPECT_THAT(daemons_[1]->OnPlan(plan),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("plan of leader term 3 refused: this giftd "
                                 "has seen term 5")));
  EXPECT_EQ(Epoch(1), plan.plan_epoch() - 10);
  v1::PublishFactorRequest f;
  f.set_job_id("job");
  f.set_term(4);
  f.mutable_factor()->set_layer("fc2");
  f.mutable_factor()->set_version(99);
  EXPECT_THAT(daemons_[1]->OnFactor(f),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("factor of leader term 4 refused")));
  auto status = daemons_[1]->GetStatus({});
  ASSERT_OK(status);
  EXPECT_EQ(status->peer().term(), 5);
  EXPECT_GE(refused("plan"), plans_refused + 1);
  EXPECT_GE(refused("factor"), factors_refused + 1);
  // The newer term's next plan is taken.
  plan.set_term(6);
  ASSERT_OK(daemons_[1]->OnPlan(plan));
  EXPECT_EQ(Epoch(1), plan.plan_epoch());
}

}  // namespace
}  // namespace gift::daemon
