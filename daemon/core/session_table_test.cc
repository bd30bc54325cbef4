#include "daemon/core/session_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/region.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// A pid that no longer exists: a child that exited and was waited for.
int64_t GonePid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

class SessionTableTest : public ::testing::Test {
 protected:
  void SetUp() override { prefix_ = absl::StrCat("/gift-st-", ::getpid()); }
  // Creates and adds a host session of `rank` (one 16 × 8 layer).
  RankSession& AddRank(int rank, int64_t pid = ::getpid()) {
    auto [id, name_prefix] = table_.NextIds("inst", prefix_);
    SessionSpec spec;
    spec.session_id = id;
    spec.name_prefix = name_prefix;
    spec.daemon_instance = "inst";
    spec.rank = rank;
    spec.world_size = 4;
    spec.pid = pid;
    spec.layers = {{"fc", 16, 8, 2}};
    auto s = RankSession::Create(spec);
    EXPECT_OK(s);
    (*s)->last_seen = absl::Now();
    return table_.Add(*std::move(s));
  }

  std::string prefix_;
  SessionTable table_;
};

TEST_F(SessionTableTest, IdsAreNumberedAndSessionsFoundByIdAndRank) {
  RankSession& a = AddRank(0);
  RankSession& b = AddRank(1);
  EXPECT_EQ(a.id(), "inst-1");
  EXPECT_EQ(b.id(), "inst-2");
  EXPECT_EQ(b.spec().name_prefix, prefix_ + "-inst-s2");
  EXPECT_EQ(table_.size(), 2u);
  EXPECT_TRUE(table_.contains("inst-1"));
  EXPECT_EQ(table_.Find("inst-2"), &b);
  EXPECT_EQ(table_.Find("inst-9"), nullptr);
  EXPECT_EQ(table_.FindRank(1), &b);
  EXPECT_EQ(table_.FindRank(5), nullptr);
  int n = 0;
  for (auto& [id, s] : table_) n += id == s->id();
  EXPECT_EQ(n, 2);
}

TEST_F(SessionTableTest, CapacityPerNodeAndPerProcess) {
  Limits limits;
  limits.max_local_ranks = 2;
  limits.max_sessions_per_pid = 1;
  AddRank(0);
  EXPECT_THAT(table_.CheckCapacity(::getpid(), "", limits),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_sessions_per_pid is 1")));
  // Replacing its own session is room enough.
  EXPECT_OK(table_.CheckCapacity(::getpid(), "inst-1", limits));
  EXPECT_OK(table_.CheckCapacity(::getpid() + 1, "", limits));
  limits.max_sessions_per_pid = 4;
  AddRank(1);
  EXPECT_THAT(table_.CheckCapacity(::getpid(), "", limits),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("2 ranks are registered; max_local_ranks")));
  EXPECT_EQ(table_.CountWithout("inst-2"), 1);
  EXPECT_EQ(table_.CountWithout(""), 2);
}

TEST_F(SessionTableTest, HeartbeatsAndTheSlowestStep) {
  EXPECT_EQ(table_.SlowestStep(), 0);
  AddRank(0);
  AddRank(1);
  const absl::Time now = absl::Now();
  EXPECT_TRUE(table_.Heartbeat("inst-1", 30, now));
  EXPECT_TRUE(table_.Heartbeat("inst-2", 20, now));
  EXPECT_TRUE(table_.Heartbeat("inst-2", 10, now));  // never back
  EXPECT_FALSE(table_.Heartbeat("inst-3", 10, now));
  EXPECT_EQ(table_.Find("inst-2")->last_step, 20);
  EXPECT_EQ(table_.Find("inst-1")->last_seen, now);
  EXPECT_EQ(table_.SlowestStep(), 20);
}

// DESIGN §5: the control block carries the heartbeats both ways. Each
// exchange advances daemon_beat in every block; a rank whose heartbeat word
// changed (any change: the word is the rank's, only compared) is seen then,
// one whose word stood still is not, and goes on towards the timeout.
TEST_F(SessionTableTest, HeartbeatsThroughTheControlBlock) {
  RankSession& beating = AddRank(0);
  RankSession& still = AddRank(1);
  const absl::Time t0 = absl::Now() - absl::Seconds(30);
  beating.last_seen = still.last_seen = t0;
  const int32_t b0 = beating.header()->daemon_beat.load();
  const absl::Time t1 = t0 + absl::Seconds(1);
  beating.header()->heartbeat_ns.store(12345);
  table_.ExchangeBeats(t1);
  EXPECT_EQ(beating.last_seen, t1);
  EXPECT_EQ(still.last_seen, t0);
  EXPECT_EQ(beating.header()->daemon_beat.load(), b0 + 1);
  EXPECT_EQ(still.header()->daemon_beat.load(), b0 + 1);

  // The same word again is no beat; a smaller one (garbage, a restarted
  // clock) is one.
  table_.ExchangeBeats(t1 + absl::Seconds(1));
  EXPECT_EQ(beating.last_seen, t1);
  beating.header()->heartbeat_ns.store(-7);
  table_.ExchangeBeats(t1 + absl::Seconds(2));
  EXPECT_EQ(beating.last_seen, t1 + absl::Seconds(2));
  EXPECT_THAT(table_.Dead(t1 + absl::Seconds(2), absl::Milliseconds(2500)),
              UnorderedElementsAre(Pair("inst-2", HasSubstr("no heartbeat"))));

  // The beat word wraps.
  still.header()->daemon_beat.store(std::numeric_limits<int32_t>::max());
  table_.ExchangeBeats(t1 + absl::Seconds(3));
  EXPECT_EQ(still.header()->daemon_beat.load(),
            std::numeric_limits<int32_t>::min());
}

TEST_F(SessionTableTest, DeadRanksAreTheSilentAndTheGone) {
  AddRank(0);
  AddRank(1, GonePid());
  RankSession& silent = AddRank(2);
  const absl::Time now = absl::Now();
  silent.last_seen = now - absl::Seconds(10);
  EXPECT_THAT(table_.Dead(now, absl::Seconds(5)),
              UnorderedElementsAre(Pair("inst-2", HasSubstr("is gone")),
                                   Pair("inst-3", HasSubstr("no heartbeat"))));
  EXPECT_THAT(table_.Dead(now, absl::Seconds(60)),
              UnorderedElementsAre(Pair("inst-2", HasSubstr("is gone"))));
}

TEST_F(SessionTableTest, RemoveUnlinksAHostSessionsMemory) {
  RankSession& s = AddRank(3);
  const shm::RegionDesc control = s.control_desc();
  EXPECT_EQ(table_.Remove("inst-1"), 3);
  EXPECT_TRUE(table_.empty());
  EXPECT_EQ(table_.Remove("inst-1"), -1);
  EXPECT_FALSE(shm::OpenRegion(control).ok());
  table_.ReapGraveyard();
  table_.ClearGraveyard();
}

TEST_F(SessionTableTest, MalformedPollsInARowDisconnect) {
  RankSession& s = AddRank(0);
  for (int i = 1; i < kMalformedPollsBeforeDisconnect; ++i) {
    s.malformed_now = true;
    s.malformed_why = "window";
    EXPECT_THAT(table_.Malformed(), IsEmpty());
  }
  // One good poll starts the count again.
  EXPECT_THAT(table_.Malformed(), IsEmpty());
  EXPECT_EQ(s.malformed_polls, 0);
  for (int i = 1; i <= kMalformedPollsBeforeDisconnect; ++i) {
    s.malformed_now = true;
    s.malformed_why = "window";
    auto bad = table_.Malformed();
    if (i < kMalformedPollsBeforeDisconnect) {
      EXPECT_THAT(bad, IsEmpty());
    } else {
      EXPECT_THAT(bad, UnorderedElementsAre(
                           Pair("inst-1", HasSubstr("(last: window)"))));
    }
  }
}

}  // namespace
}  // namespace gift::daemon
