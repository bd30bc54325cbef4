#include "daemon/core/poll_gate.h"

#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

constexpr absl::Duration kInterval = absl::Milliseconds(100);
constexpr absl::Duration kMaxQuiet = absl::Seconds(1);

TEST(PollGateTest, IdleRanksBackOffToOnePollASecond) {
  PollGate gate(kInterval, kMaxQuiet);
  const PollGate::Activity idle{2, 40, 0};
  absl::Time t = absl::UnixEpoch();
  EXPECT_FALSE(gate.Quiet(idle, t));  // the first poll reads everything
  EXPECT_EQ(gate.wait(), kInterval);
  // Quiet polls double the wait (200, 400 ms) up to when the next full
  // poll is due, 1 s after the last (300 ms from t = 700 ms).
  for (int ms : {200, 400, 300}) {
    t += gate.wait();
    EXPECT_TRUE(gate.Quiet(idle, t)) << ms;
    EXPECT_EQ(gate.wait(), absl::Milliseconds(ms));
  }
  t += gate.wait();
  EXPECT_EQ(t, absl::UnixEpoch() + kMaxQuiet);
  EXPECT_FALSE(gate.Quiet(idle, t));  // full again, at the interval
  EXPECT_EQ(gate.wait(), kInterval);
  // Four wake-ups a second while nothing changes.
  for (int ms : {200, 400, 300}) {
    t += gate.wait();
    EXPECT_TRUE(gate.Quiet(idle, t)) << ms;
  }
}

TEST(PollGateTest, AStepASessionOrARefreshMakesThePollFull) {
  PollGate gate(kInterval, kMaxQuiet);
  absl::Time t = absl::UnixEpoch();
  PollGate::Activity a{2, 40, 0};
  EXPECT_FALSE(gate.Quiet(a, t));
  EXPECT_TRUE(gate.Quiet(a, t += kInterval));
  a.steps = 41;  // a rank stepped
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  EXPECT_EQ(gate.wait(), kInterval);
  EXPECT_TRUE(gate.Quiet(a, t += kInterval));
  a.sessions = 3;  // a rank came
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  a.refreshes = 1;  // a refresh was queued
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  a.refreshes = 0;  // and finished: its factor is to publish
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  EXPECT_TRUE(gate.Quiet(a, t += kInterval));
  a.peer_messages = 1;  // a peer's report, window, factor or plan
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  a.term = 2;  // a new leader
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  a.follower = true;
  EXPECT_FALSE(gate.Quiet(a, t += kInterval));
  EXPECT_TRUE(gate.Quiet(a, t += kInterval));
}

// max_quiet equal to the interval (a peer_timeout_ms below four poll
// intervals): never quiet.
TEST(PollGateTest, MaxQuietOfOneIntervalPollsInFull) {
  PollGate gate(kInterval, kInterval);
  const PollGate::Activity a{1, 5, 0};
  absl::Time t = absl::UnixEpoch();
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(gate.Quiet(a, t += kInterval));
}

}  // namespace
}  // namespace gift::daemon
