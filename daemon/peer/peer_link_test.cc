#include "daemon/peer/peer_link.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "gift/v1/peer.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/layout.h"

namespace gift::daemon {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kToken[] = "s3cret-token";
constexpr char kJob[] = "job-1";

// Polls `done` until it holds or `timeout` passes (then false).
bool Eventually(const std::function<bool()>& done,
                absl::Duration timeout = absl::Seconds(15)) {
  return gift::testing::WaitUntil(done, timeout, absl::Milliseconds(10));
}

// Records every call; the leader's OnMembersChanged publishes a new plan
// through the link, as the daemon does.
class FakeHandler : public PeerHandler {
 public:
  absl::StatusOr<v1::PeerPlan> OnJoin(const v1::JoinRequest& r) override {
    absl::MutexLock lock(&mu_);
    joins.push_back(r.self().node());
    v1::PeerPlan plan;
    plan.set_plan_epoch(++epoch_);
    return plan;
  }
  absl::Status OnTelemetry(const v1::ReportTelemetryRequest& r) override {
    absl::MutexLock lock(&mu_);
    telemetry.push_back(r.self().node());
    return absl::OkStatus();
  }
  void OnMembersChanged() override {
    PeerLink* l = link.load();
    v1::PeerPlan plan;
    {
      absl::MutexLock lock(&mu_);
      ++members_changed;
      plan.set_plan_epoch(++epoch_);
    }
    if (l != nullptr) l->BroadcastPlan(plan);
  }
  absl::Status OnPlan(const v1::PeerPlan& plan) override {
    absl::MutexLock lock(&mu_);
    plans.push_back(plan);
    return absl::OkStatus();
  }
  absl::Status OnSketch(const v1::PushSketchRequest& r) override {
    absl::MutexLock lock(&mu_);
    sketches.push_back(r);
    sketch_thread = std::this_thread::get_id();
    return absl::OkStatus();
  }
  absl::Status OnFactor(const v1::PublishFactorRequest& r) override {
    absl::MutexLock lock(&mu_);
    factors.push_back(r);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ForwardControlResponse> OnControl(
      const v1::ForwardControlRequest& r) override {
    absl::MutexLock lock(&mu_);
    controls.push_back(r);
    v1::ForwardControlResponse response;
    response.mutable_set_rank();
    return response;
  }
  absl::Status OnStoreSet(const v1::StoreSetRequest& r) override {
    absl::MutexLock lock(&mu_);
    store[r.key()] = r.value();
    return absl::OkStatus();
  }
  absl::StatusOr<v1::StoreGetResponse> OnStoreGet(const v1::StoreGetRequest& r,
                                                  absl::Duration) override {
    absl::MutexLock lock(&mu_);
    auto it = store.find(r.key());
    if (it == store.end()) return absl::NotFoundError(r.key());
    v1::StoreGetResponse response;
    response.set_value(it->second);
    return response;
  }
  absl::StatusOr<v1::StoreAddResponse> OnStoreAdd(
      const v1::StoreAddRequest& r) override {
    absl::MutexLock lock(&mu_);
    v1::StoreAddResponse response;
    response.set_value(counter += r.delta());
    return response;
  }
  v1::JoinRequest JoinState() override {
    v1::JoinRequest r;
    r.set_world_size(2);
    return r;
  }

  // Reads under the lock.
  template <typename F>
  auto With(F f) {
    absl::MutexLock lock(&mu_);
    return f(*this);
  }

  std::atomic<PeerLink*> link{nullptr};
  std::vector<std::string> joins, telemetry;
  std::vector<v1::PeerPlan> plans;
  std::vector<v1::PushSketchRequest> sketches;
  std::vector<v1::PublishFactorRequest> factors;
  std::vector<v1::ForwardControlRequest> controls;
  std::map<std::string, std::string> store;
  std::thread::id sketch_thread;
  int members_changed = 0;
  int64_t counter = 0;

 private:
  absl::Mutex mu_;
  int64_t epoch_ = 0;
};

PeerLinkOptions Options(const std::string& node, const std::string& leader) {
  PeerLinkOptions o;
  o.job_id = kJob;
  o.node = node;
  o.instance = node + "-1";
  o.listen_address = "127.0.0.1:0";
  o.leader_address = leader;
  o.token = kToken;
  o.retry_interval = absl::Milliseconds(50);
  return o;
}

struct Node {
  FakeHandler handler;
  std::unique_ptr<PeerLink> link;
};

class PeerLinkTest : public ::testing::Test {
 protected:
  // A leader and two followers; waits until all three agree on members.
  void StartJob(PeerLinkOptions leader_options = Options("n0", "127.0.0.1:0"),
                const std::string& tls_dir = "") {
    for (auto* o : {&leader_options}) SetTls(*o, tls_dir);
    Start(nodes_[0], leader_options);
    leader_address_ = nodes_[0].link->bound_address();
    for (int i = 1; i < 3; ++i) {
      PeerLinkOptions o = Options(absl::StrCat("n", i), leader_address_);
      SetTls(o, tls_dir);
      Start(nodes_[i], o);
    }
    ASSERT_TRUE(Eventually([&] { return AllSeeMembers(3); }));
  }
  // Broadcasts `plan` from the leader and waits until each follower's
  // handler saw its epoch; `got` (optional): the plans they saw, nodes 1, 2.
  bool BroadcastAndAwait(const v1::PeerPlan& plan,
                         std::vector<v1::PeerPlan>* got = nullptr) {
    nodes_[0].link->BroadcastPlan(plan);
    for (int i = 1; i < 3; ++i) {
      FakeHandler& h = nodes_[i].handler;
      if (!Eventually([&] {
            return h.With([&](auto& f) {
              return !f.plans.empty() &&
                     f.plans.back().plan_epoch() == plan.plan_epoch();
            });
          })) {
        return false;
      }
      if (got != nullptr) {
        got->push_back(h.With([](auto& f) { return f.plans.back(); }));
      }
    }
    return true;
  }
  static void SetTls(PeerLinkOptions& o, const std::string& dir) {
    if (dir.empty()) return;
    o.tls_cert_file = dir + "/cert.pem";
    o.tls_key_file = dir + "/key.pem";
    o.tls_ca_file = dir + "/cert.pem";
  }
  static void Start(Node& n, const PeerLinkOptions& o) {
    absl::StatusOr<std::unique_ptr<PeerLink>> link =
        PeerLink::Create(o, &n.handler);
    ASSERT_THAT(link.status(), IsOk());
    n.link = *std::move(link);
    n.handler.link = n.link.get();
  }
  // Stops node i's link and starts another incarnation of it, `instance`,
  // listening on `address` (its old address, or the leader's).
  void RestartNode(int i, const std::string& address,
                   const std::string& instance) {
    nodes_[i].handler.link = nullptr;
    nodes_[i].link->Stop();
    nodes_[i].link.reset();
    PeerLinkOptions o = Options(absl::StrCat("n", i), leader_address_);
    o.listen_address = address;
    o.instance = instance;
    ASSERT_NO_FATAL_FAILURE(Start(nodes_[i], o));
  }
  bool AllSeeMembers(size_t n) {
    for (Node& node : nodes_) {
      if (node.link == nullptr || node.link->members().size() != n) {
        return false;
      }
    }
    return true;
  }
  void TearDown() override {
    for (Node& n : nodes_) {
      n.handler.link = nullptr;
      if (n.link != nullptr) n.link->Stop();
    }
  }

  Node nodes_[3];
  std::string leader_address_;
};

std::vector<std::string> Nodes(const std::vector<v1::Member>& members) {
  std::vector<std::string> out;
  for (const v1::Member& m : members) out.push_back(m.node());
  return out;
}

TEST_F(PeerLinkTest, FollowersJoinAndAgreeOnMembersAndOwners) {
  StartJob();
  EXPECT_TRUE(nodes_[0].link->is_leader());
  EXPECT_FALSE(nodes_[1].link->is_leader());
  std::vector<std::string> leader_view = Nodes(nodes_[0].link->members());
  ASSERT_THAT(leader_view, SizeIs(3));
  EXPECT_EQ(leader_view[0], "n0");  // the leader owns layer 0
  for (Node& n : nodes_) {
    EXPECT_EQ(Nodes(n.link->members()), leader_view);
    for (int layer = 0; layer < 7; ++layer) {
      EXPECT_EQ(n.link->OwnerOf(layer).address(),
                nodes_[0].link->OwnerOf(layer).address());
    }
  }
  EXPECT_TRUE(nodes_[1].link->IsSelf(nodes_[1].link->members()[1]) ||
              nodes_[1].link->IsSelf(nodes_[1].link->members()[2]));
  PeerLinkStats stats = nodes_[1].link->stats();
  EXPECT_TRUE(stats.connected);
  EXPECT_EQ(stats.leader_instance, "n0-1");
  EXPECT_EQ(stats.joins, 1);
  EXPECT_EQ(nodes_[0].link->stats().joins, 2);
  EXPECT_EQ(nodes_[0].handler.With([](auto& h) { return h.members_changed; }),
            2);
  // How long each member has been silent (GetStatus, giftctl status): the
  // leader tracks every member, itself at 0; a follower the leader.
  EXPECT_GE(stats.leader_silence_seconds, 0.0);
  EXPECT_LT(stats.leader_silence_seconds, 60.0);
  EXPECT_THAT(stats.member_silence_seconds, IsEmpty());
  const PeerLinkStats leader = nodes_[0].link->stats();
  EXPECT_EQ(leader.leader_silence_seconds, 0.0);
  ASSERT_THAT(leader.member_silence_seconds, SizeIs(3));
  EXPECT_EQ(leader.member_silence_seconds[0],
            std::make_pair(std::string("n0-1"), 0.0));
  for (const auto& [instance, seconds] : leader.member_silence_seconds) {
    EXPECT_GE(seconds, 0.0) << instance;
    EXPECT_LT(seconds, 60.0) << instance;
  }
}

TEST_F(PeerLinkTest, PlansNameTheWindowOwnersEveryMemberSendsTo) {
  StartJob();
  // Three layers per block, the GIFT path on each block's third: with three
  // members, index modulo size would put all six on members[2].
  v1::PeerPlan plan;
  plan.set_plan_epoch(100);
  for (int i = 0; i < 18; ++i) {
    v1::PeerLayerPlan* l = plan.add_layers();
    l->set_name(absl::StrCat("layer", i));
    l->set_selected(i % 3 == 2);
  }
  std::vector<v1::PeerPlan> got;
  ASSERT_TRUE(BroadcastAndAwait(plan, &got));
  // The link adopts the plan right after its handler saw it; adopting it
  // here too (idempotent) leaves no race with the checks below.
  for (int i = 1; i < 3; ++i) nodes_[i].link->SetPlan(got[i - 1]);
  std::map<std::string, int> load;
  for (int layer = 2; layer < 18; layer += 3) {
    const v1::Member owner = nodes_[0].link->OwnerOf(layer);
    ++load[owner.node()];
    for (Node& n : nodes_) {
      EXPECT_EQ(n.link->OwnerOf(layer).address(), owner.address()) << layer;
    }
  }
  EXPECT_EQ(load,
            (std::map<std::string, int>{{"n0", 2}, {"n1", 2}, {"n2", 2}}));
  // The layers off the GIFT path keep members[i % size].
  const std::vector<v1::Member> members = nodes_[0].link->members();
  for (Node& n : nodes_) {
    EXPECT_EQ(n.link->OwnerOf(4).address(), members[1].address());
  }
}

TEST_F(PeerLinkTest, FollowerWithoutMembersOwnsEveryLayer) {
  FakeHandler handler;
  // Nobody listens at the leader address: the follower stays detached.
  auto link = PeerLink::Create(Options("n1", "127.0.0.1:1"), &handler);
  ASSERT_THAT(link.status(), IsOk());
  EXPECT_TRUE((*link)->IsSelf((*link)->OwnerOf(5)));
  EXPECT_FALSE((*link)->stats().connected);
  (*link)->Stop();
}

TEST_F(PeerLinkTest, BroadcastPlanReachesEveryFollower) {
  StartJob();
  v1::PeerPlan plan;
  plan.set_plan_epoch(100);
  std::vector<v1::PeerPlan> plans;
  ASSERT_TRUE(BroadcastAndAwait(plan, &plans));
  for (const v1::PeerPlan& got : plans) {
    EXPECT_EQ(got.job_id(), kJob);
    EXPECT_EQ(got.leader_instance(), "n0-1");
    EXPECT_EQ(got.members_size(), 3);
  }
  EXPECT_GT(nodes_[0].link->stats().bytes_sent[2].second, 0);  // "plan"
}

TEST_F(PeerLinkTest, BroadcastFactorFromFollowerReachesTheOthers) {
  StartJob();
  v1::PublishFactorRequest r;
  r.mutable_factor()->set_layer("blk.3");
  r.mutable_factor()->set_version(7);
  nodes_[1].link->BroadcastFactor(r);
  for (int i : {0, 2}) {
    ASSERT_TRUE(Eventually([&] {
      return nodes_[i].handler.With([](auto& f) { return f.factors.size(); }) ==
             1;
    }));
    auto got = nodes_[i].handler.With([](auto& f) { return f.factors[0]; });
    EXPECT_EQ(got.factor().version(), 7);
    EXPECT_EQ(got.owner(), "n1");
  }
  EXPECT_TRUE(
      nodes_[1].handler.With([](auto& f) { return f.factors.empty(); }));
}

TEST_F(PeerLinkTest, SketchGoesToTheOwner) {
  StartJob();
  PeerLink& from = *nodes_[1].link;
  int remote = -1, local = -1;
  for (int layer = 0; layer < 3; ++layer) {
    v1::Member owner = from.OwnerOf(layer);
    if (owner.node() == "n2") remote = layer;
    if (from.IsSelf(owner)) local = layer;
  }
  ASSERT_GE(remote, 0);
  ASSERT_GE(local, 0);
  v1::PushSketchRequest r;
  r.set_layer("remote");
  r.add_y(1.5f);
  from.SendSketch(from.OwnerOf(remote), r);
  r.set_layer("local");
  from.SendSketch(from.OwnerOf(local), r);
  auto layers = [](FakeHandler& h) {
    return h.With([](auto& f) {
      std::vector<std::string> out;
      for (const auto& s : f.sketches) out.push_back(s.layer());
      return out;
    });
  };
  ASSERT_TRUE(
      Eventually([&] { return layers(nodes_[2].handler).size() == 1; }));
  ASSERT_TRUE(
      Eventually([&] { return layers(nodes_[1].handler).size() == 1; }));
  EXPECT_THAT(layers(nodes_[2].handler), ElementsAre("remote"));
  EXPECT_THAT(layers(nodes_[1].handler), ElementsAre("local"));
  // The owner's work never runs on the caller's thread.
  EXPECT_NE(nodes_[1].handler.With([](auto& f) { return f.sketch_thread; }),
            std::this_thread::get_id());
  EXPECT_TRUE(
      nodes_[0].handler.With([](auto& f) { return f.sketches.empty(); }));
}

TEST_F(PeerLinkTest, ControlAndStoreReachTheLeader) {
  StartJob();
  PeerLink& f = *nodes_[2].link;
  v1::ForwardControlRequest control;
  control.mutable_set_rank()->set_rank(8);
  absl::StatusOr<v1::ForwardControlResponse> reply = f.ForwardControl(control);
  ASSERT_THAT(reply.status(), IsOk());
  EXPECT_TRUE(reply->has_set_rank());
  v1::StoreSetRequest set;
  set.set_key("nccl-id");
  set.set_value("abc");
  EXPECT_THAT(f.StoreSet(set), IsOk());
  v1::StoreGetRequest get;
  get.set_key("nccl-id");
  get.set_timeout_ms(100);
  absl::StatusOr<v1::StoreGetResponse> value = f.StoreGet(get);
  ASSERT_THAT(value.status(), IsOk());
  EXPECT_EQ(value->value(), "abc");
  get.set_key("missing");
  EXPECT_THAT(f.StoreGet(get).status(), StatusIs(absl::StatusCode::kNotFound));
  v1::StoreAddRequest add;
  add.set_key("barrier");
  add.set_delta(3);
  ASSERT_THAT(f.StoreAdd(add).status(), IsOk());
  EXPECT_EQ(f.StoreAdd(add)->value(), 6);
  FakeHandler& leader = nodes_[0].handler;
  EXPECT_EQ(leader.With([](auto& h) { return h.controls.size(); }), 1u);
  EXPECT_EQ(leader.With([](auto& h) { return h.controls[0].job_id(); }), kJob);
  EXPECT_EQ(leader.With([](auto& h) { return h.store["nccl-id"]; }), "abc");
}

// A raw client, so the test controls the token and the request.
class RawPeer {
 public:
  explicit RawPeer(const std::string& address)
      : stub_(v1::Peer::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}
  template <typename Req, typename Resp>
  grpc::StatusCode Call(grpc::Status (v1::Peer::Stub::*method)(
                            grpc::ClientContext*, const Req&, Resp*),
                        const Req& r, const std::string& authorization) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (!authorization.empty()) {
      context.AddMetadata("authorization", authorization);
    }
    Resp response;
    return ((*stub_).*method)(&context, r, &response).error_code();
  }

 private:
  std::unique_ptr<v1::Peer::Stub> stub_;
};

v1::JoinRequest GoodJoin() {
  v1::JoinRequest r;
  r.set_job_id(kJob);
  r.set_layout_version(shm::kLayoutVersion);
  r.mutable_self()->set_node("n9");
  r.mutable_self()->set_address("127.0.0.1:9");
  r.mutable_self()->set_instance("n9-1");
  return r;
}

TEST_F(PeerLinkTest, RefusesBadTokenJobAndLayoutBeforeTheHandler) {
  Start(nodes_[0], Options("n0", "127.0.0.1:0"));
  RawPeer peer(nodes_[0].link->bound_address());
  const std::string bearer = absl::StrCat("Bearer ", kToken);
  auto join = &v1::Peer::Stub::Join;
  using grpc::StatusCode;
  EXPECT_EQ(peer.Call(join, GoodJoin(), ""), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(peer.Call(join, GoodJoin(), "Bearer wrong"),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(peer.Call(join, GoodJoin(), kToken), StatusCode::UNAUTHENTICATED);
  v1::JoinRequest other_job = GoodJoin();
  other_job.set_job_id("job-2");
  EXPECT_EQ(peer.Call(join, other_job, bearer), StatusCode::PERMISSION_DENIED);
  v1::JoinRequest other_layout = GoodJoin();
  other_layout.set_layout_version(shm::kLayoutVersion + 1);
  EXPECT_EQ(peer.Call(join, other_layout, bearer),
            StatusCode::FAILED_PRECONDITION);
  v1::StoreSetRequest set;
  set.set_job_id(kJob);
  set.set_key("k");
  EXPECT_EQ(peer.Call(&v1::Peer::Stub::StoreSet, set, "Bearer x"),
            StatusCode::UNAUTHENTICATED);
  set.set_job_id("job-2");
  EXPECT_EQ(peer.Call(&v1::Peer::Stub::StoreSet, set, bearer),
            StatusCode::PERMISSION_DENIED);
  FakeHandler& h = nodes_[0].handler;
  EXPECT_TRUE(h.With([](auto& f) { return f.joins.empty(); }));
  EXPECT_TRUE(h.With([](auto& f) { return f.store.empty(); }));
  EXPECT_EQ(h.With([](auto& f) { return f.members_changed; }), 0);
  EXPECT_THAT(nodes_[0].link->members(), SizeIs(1));
  // The same request with the right credentials goes through.
  EXPECT_EQ(peer.Call(join, GoodJoin(), bearer), StatusCode::OK);
  EXPECT_THAT(h.With([](auto& f) { return f.joins; }), ElementsAre("n9"));
}

TEST_F(PeerLinkTest, FollowerWithWrongTokenNeverJoins) {
  Start(nodes_[0], Options("n0", "127.0.0.1:0"));
  PeerLinkOptions o = Options("n1", nodes_[0].link->bound_address());
  o.token = "not-the-token";
  Start(nodes_[1], o);
  ASSERT_TRUE(
      Eventually([&] { return nodes_[1].link->stats().send_failures >= 3; }));
  EXPECT_FALSE(nodes_[1].link->stats().connected);
  EXPECT_TRUE(nodes_[0].handler.With([](auto& f) { return f.joins.empty(); }));
  EXPECT_THAT(nodes_[0].link->members(), SizeIs(1));
}

TEST_F(PeerLinkTest, SilentFollowerIsDropped) {
  PeerLinkOptions leader = Options("n0", "127.0.0.1:0");
  leader.member_timeout = absl::Milliseconds(300);
  StartJob(leader);
  FakeHandler& h = nodes_[0].handler;
  const int changed = h.With([](auto& f) { return f.members_changed; });
  // n1 reports every poll; n2 has stopped.
  ASSERT_TRUE(Eventually([&] {
    nodes_[1].link->SendTelemetry(v1::ReportTelemetryRequest());
    return nodes_[0].link->members().size() == 2;
  }));
  EXPECT_THAT(Nodes(nodes_[0].link->members()), ElementsAre("n0", "n1"));
  EXPECT_GT(h.With([](auto& f) { return f.members_changed; }), changed);
  EXPECT_FALSE(h.With([](auto& f) { return f.telemetry.empty(); }));
  // The new plan tells n1 of the smaller job.
  EXPECT_TRUE(Eventually([&] {
    return Nodes(nodes_[1].link->members()) ==
           std::vector<std::string>{"n0", "n1"};
  }));
}

TEST_F(PeerLinkTest, FollowersRejoinARestartedLeader) {
  StartJob();
  ASSERT_NO_FATAL_FAILURE(RestartNode(0, leader_address_, "n0-2"));
  ASSERT_TRUE(Eventually([&] {
    bool all = true;
    for (int i = 1; i < 3; ++i) {
      // Several reports in flight at the restart: one that the new leader
      // answers NOT_FOUND before the follower's join lands must not detach
      // it again after the join (14 of 100 runs joined 3 times before).
      for (int k = 0; k < 8; ++k) {
        nodes_[i].link->SendTelemetry(v1::ReportTelemetryRequest());
      }
      PeerLinkStats s = nodes_[i].link->stats();
      all = all && s.connected && s.leader_instance == "n0-2";
    }
    return all && AllSeeMembers(3);
  }));
  EXPECT_EQ(nodes_[1].link->stats().joins, 2);
  EXPECT_EQ(Nodes(nodes_[1].link->members()), Nodes(nodes_[0].link->members()));
}

TEST_F(PeerLinkTest, RestartedFollowerKeepsItsPlace) {
  StartJob();
  const std::vector<std::string> order = Nodes(nodes_[0].link->members());
  FakeHandler& h = nodes_[0].handler;
  const int changed = h.With([](auto& f) { return f.members_changed; });
  const std::string address = nodes_[2].link->bound_address();
  ASSERT_NO_FATAL_FAILURE(RestartNode(2, address, "n2-2"));
  ASSERT_TRUE(Eventually([&] {
    std::vector<v1::Member> m = nodes_[0].link->members();
    return m.size() == 3 && m[order[1] == "n2" ? 1 : 2].instance() == "n2-2";
  }));
  EXPECT_EQ(Nodes(nodes_[0].link->members()), order);
  EXPECT_GT(h.With([](auto& f) { return f.members_changed; }), changed);
  EXPECT_TRUE(Eventually([&] { return AllSeeMembers(3); }));
}

TEST_F(PeerLinkTest, CreateRefusesBadOptions) {
  FakeHandler h;
  auto refused = [&h](PeerLinkOptions o) {
    return PeerLink::Create(o, &h).status();
  };
  PeerLinkOptions o = Options("n0", "127.0.0.1:0");
  o.token = "";
  EXPECT_THAT(refused(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = Options("n0", "127.0.0.1:0");
  o.tls_cert_file = "/nonexistent/cert.pem";
  EXPECT_THAT(refused(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o.tls_key_file = "/nonexistent/key.pem";  // still no CA
  EXPECT_THAT(refused(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = Options("n0", "127.0.0.1:0");
  o.listen_address = "0.0.0.0:0";  // others cannot reach a wildcard
  EXPECT_THAT(refused(o), StatusIs(absl::StatusCode::kInvalidArgument));
  Start(nodes_[0], Options("n0", "127.0.0.1:0"));
  o = Options("n1", "127.0.0.1:1");
  o.listen_address = nodes_[0].link->bound_address();  // taken
  EXPECT_THAT(refused(o), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(PeerLinkTest, TlsJob) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "openssl is not installed: no certificate for the test";
  }
  gift::testing::TempDir tmp("peer_link_test");
  ASSERT_TRUE(tmp.ok());
  const std::string dir = tmp.path();
  const std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -days 1 -keyout ",
      dir, "/key.pem -out ", dir, "/cert.pem >/dev/null 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  StartJob(Options("n0", "127.0.0.1:0"), dir);
  v1::StoreSetRequest set;
  set.set_key("k");
  set.set_value("v");
  EXPECT_THAT(nodes_[1].link->StoreSet(set), IsOk());
  EXPECT_EQ(nodes_[0].handler.With([](auto& f) { return f.store["k"]; }), "v");
  // A plaintext client gets nowhere.
  RawPeer plain(leader_address_);
  EXPECT_EQ(plain.Call(&v1::Peer::Stub::Join, GoodJoin(),
                       absl::StrCat("Bearer ", kToken)),
            grpc::StatusCode::UNAVAILABLE);
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

}  // namespace
}  // namespace gift::daemon
