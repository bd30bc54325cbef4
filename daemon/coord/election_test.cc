#include "daemon/coord/election.h"

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/coord/test_etcd.h"
#include "daemon/coord/test_net.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon::coord {
namespace {

using ::gift::testing::StatusIs;

constexpr absl::Duration kTtl = absl::Seconds(2);
// How long beyond the TTL a change may take on a loaded 2-core machine.
constexpr absl::Duration kSlack = absl::Seconds(15);

// Leadership changes as the on_change callbacks saw them, in order.
class Events {
 public:
  Election::OnChange For(const std::string& who) {
    return [this, who](const ElectionState& s) {
      absl::MutexLock lock(&mu_);
      const bool was = leading_[who];
      if (s.leader != was) {
        order_.push_back(
            absl::StrCat(who, s.leader ? " up " : " down ", s.term));
      }
      leading_[who] = s.leader;
    };
  }
  std::vector<std::string> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> leading_;
  std::vector<std::string> order_;
};

bool WaitFor(const std::function<bool()>& done, absl::Duration limit) {
  return gift::testing::WaitUntil(done, limit, absl::Milliseconds(50));
}

class ElectionTest : public TestEtcdTest {
 protected:
  std::unique_ptr<Election> Make(const std::string& instance,
                                 const std::string& endpoint = "") {
    EtcdOptions eo;
    eo.endpoints = {endpoint.empty() ? etcd_->endpoint() : endpoint};
    eo.request_timeout = absl::Seconds(1);
    auto etcd = EtcdClient::Create(eo);
    EXPECT_OK(etcd);
    if (!etcd.ok()) return nullptr;
    ElectionOptions o;
    o.job_id = "job1";
    o.instance = instance;
    o.address = instance + ":7070";
    o.ttl = kTtl;
    auto e = Election::Start(std::move(*etcd), o, events_.For(instance));
    EXPECT_OK(e);
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Exactly one of `es` leads, every one agrees on it and its term, and
  // each sees `members` members; returns the leader's index.
  static int Agreed(const std::vector<Election*>& es, size_t members) {
    int leader = -1;
    std::vector<ElectionState> s;
    for (Election* e : es) s.push_back(e->state());
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].coordinator_reachable || s[i].members.size() != members)
        return -1;
      if (s[i].leader) {
        if (leader >= 0) return -1;
        leader = static_cast<int>(i);
      }
    }
    if (leader < 0) return -1;
    for (const ElectionState& x : s) {
      if (x.leader_instance != s[leader].leader_instance ||
          x.term != s[leader].term ||
          x.leader_address != s[leader].leader_address || x.term <= 0) {
        return -1;
      }
    }
    return leader;
  }

  Events events_;
};

TEST_F(ElectionTest, BadOptions) {
  EtcdOptions eo;
  eo.endpoints = {etcd_->endpoint()};
  for (ElectionOptions o :
       {ElectionOptions{"", "a", "a:1"}, ElectionOptions{"j/x", "a", "a:1"},
        ElectionOptions{"j", "", "a:1"}, ElectionOptions{"j", "a", ""},
        ElectionOptions{"j", "a", "a:1", absl::Seconds(1)},
        ElectionOptions{"j", "a", "a:1", absl::Milliseconds(2500)}}) {
    auto etcd = EtcdClient::Create(eo);
    ASSERT_OK(etcd);
    EXPECT_THAT(Election::Start(std::move(*etcd), o),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << o.job_id << " " << o.instance;
  }
  EXPECT_THAT(Election::Start(nullptr, ElectionOptions{"j", "a", "a:1"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ElectionTest, ThreeAgreeOnOneLeaderAndStopHandsOver) {
  auto a = Make("a"), b = Make("b"), c = Make("c");
  ASSERT_TRUE(a && b && c);
  std::vector<Election*> all = {a.get(), b.get(), c.get()};
  ASSERT_TRUE(WaitFor([&] { return Agreed(all, 3) >= 0; }, kTtl + kSlack));
  const int leader = Agreed(all, 3);
  ElectionState s = all[leader]->state();
  EXPECT_EQ(s.leader_address, s.leader_instance + ":7070");
  ASSERT_EQ(s.members.size(), 3u);
  EXPECT_EQ(s.members[0].instance, "a");
  EXPECT_EQ(s.members[2].address, "c:7070");

  // A graceful stop revokes the lease: one of the others leads, higher term.
  all[leader]->Stop();
  EXPECT_FALSE(all[leader]->state().leader);
  std::vector<Election*> rest;
  for (int i = 0; i < 3; ++i) {
    if (i != leader) rest.push_back(all[i]);
  }
  ASSERT_TRUE(WaitFor([&] { return Agreed(rest, 2) >= 0; }, kTtl + kSlack));
  EXPECT_GT(rest[Agreed(rest, 2)]->state().term, s.term);
}

TEST_F(ElectionTest, SigkilledLeaderIsReplacedWithinTheTtl) {
  auto child = Child::Spawn({GIFT_ELECTION_CHILD, etcd_->endpoint(), "job1",
                             "child", "child:7070", "2"},
                            "");
  ASSERT_OK(child);
  EtcdOptions eo;
  eo.endpoints = {etcd_->endpoint()};
  auto etcd = EtcdClient::Create(eo);
  ASSERT_OK(etcd);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto kv = (*etcd)->Get(Election::LeaderKey("job1"));
        return kv.ok() && kv->has_value();
      },
      absl::Seconds(30)))
      << "the child never campaigned";
  auto a = Make("a"), b = Make("b");
  ASSERT_TRUE(a && b);
  auto follow_child = [&] {
    for (Election* e : {a.get(), b.get()}) {
      ElectionState s = e->state();
      if (s.leader || s.leader_instance != "child" || s.members.size() != 3)
        return false;
    }
    return true;
  };
  ASSERT_TRUE(WaitFor(follow_child, kTtl + kSlack));
  const int64_t old_term = a->state().term;

  (*child)->Kill();  // SIGKILL: the lease is never revoked, it expires
  std::vector<Election*> rest = {a.get(), b.get()};
  ASSERT_TRUE(WaitFor([&] { return Agreed(rest, 2) >= 0; }, kTtl + kSlack));
  EXPECT_GT(a->state().term, old_term);
  EXPECT_NE(a->state().leader_instance, "child");
}

TEST_F(ElectionTest, PartitionedLeaderStepsDownAndRejoins) {
  auto forwarder = TcpForwarder::Start(etcd_->client_port());
  ASSERT_OK(forwarder);
  auto a = Make("a", (*forwarder)->endpoint());
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] { return a->state().leader; }, kTtl + kSlack));
  auto b = Make("b"), c = Make("c");
  ASSERT_TRUE(b && c);
  std::vector<Election*> all = {a.get(), b.get(), c.get()};
  ASSERT_TRUE(WaitFor([&] { return Agreed(all, 3) == 0; }, kTtl + kSlack));
  const int64_t old_term = a->state().term;

  (*forwarder)->Cut();
  std::vector<Election*> rest = {b.get(), c.get()};
  ASSERT_TRUE(
      WaitFor([&] { return !a->state().leader && Agreed(rest, 2) >= 0; },
              kTtl + kSlack));
  const ElectionState now = rest[Agreed(rest, 2)]->state();
  EXPECT_GT(now.term, old_term);
  // The cut-off leader stepped down before anyone else took over.
  std::vector<std::string> order = events_.order();
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(order[0], absl::StrCat("a up ", old_term));
  EXPECT_EQ(order[1], absl::StrCat("a down ", old_term));
  EXPECT_EQ(order[2], absl::StrCat(now.leader_instance, " up ", now.term));
  EXPECT_FALSE(a->state().coordinator_reachable);

  (*forwarder)->Restore();
  ASSERT_TRUE(WaitFor([&] { return Agreed(all, 3) >= 1; }, kTtl + kSlack));
  ElectionState back = a->state();
  EXPECT_FALSE(back.leader);
  EXPECT_EQ(back.leader_instance, now.leader_instance);
  EXPECT_EQ(back.term, now.term);
}

TEST_F(ElectionTest, EtcdDownThenBack) {
  auto a = Make("a"), b = Make("b"), c = Make("c");
  ASSERT_TRUE(a && b && c);
  std::vector<Election*> all = {a.get(), b.get(), c.get()};
  ASSERT_TRUE(WaitFor([&] { return Agreed(all, 3) >= 0; }, kTtl + kSlack));
  const int leader = Agreed(all, 3);
  const ElectionState before = all[leader]->state();

  etcd_->Stop();
  ASSERT_TRUE(WaitFor(
      [&] {
        for (Election* e : all) {
          ElectionState s = e->state();
          if (s.leader || s.coordinator_reachable) return false;
        }
        return true;
      },
      kTtl + kSlack));
  // The followers keep the last leader they saw.
  for (int i = 0; i < 3; ++i) {
    if (i == leader) continue;
    EXPECT_EQ(all[i]->state().leader_instance, before.leader_instance);
    EXPECT_EQ(all[i]->state().term, before.term);
  }

  ASSERT_OK(etcd_->Restart());  // same data directory
  ASSERT_TRUE(WaitFor([&] { return Agreed(all, 3) >= 0; }, kTtl + kSlack));
  EXPECT_GT(all[Agreed(all, 3)]->state().term, before.term);
}

TEST_F(ElectionTest, CampaignsWithCredentials) {
  ASSERT_OK(etcd_->Etcdctl({"user", "add", "root:pw"}));
  ASSERT_OK(etcd_->Etcdctl({"auth", "enable"}));
  EtcdOptions eo;
  eo.endpoints = {etcd_->endpoint()};
  eo.user = "root";
  eo.password = "bad";
  EXPECT_THAT(EtcdClient::Create(eo),
              StatusIs(absl::StatusCode::kUnauthenticated));
  eo.password = "pw";
  auto etcd = EtcdClient::Create(eo);
  ASSERT_OK(etcd);
  ElectionOptions o{"job1", "a", "a:7070", kTtl};
  auto e = Election::Start(std::move(*etcd), o);
  ASSERT_OK(e);
  // Longer than the test etcd's 2 s tokens: leading survives re-logins.
  ASSERT_TRUE(WaitFor([&] { return (*e)->state().leader; }, kTtl + kSlack));
  absl::SleepFor(absl::Seconds(5));
  EXPECT_TRUE((*e)->state().leader);
  EXPECT_EQ((*e)->state().members.size(), 1u);
}

}  // namespace
}  // namespace gift::daemon::coord
