#include "daemon/core/poll_gate.h"

#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

TEST(PollGateTest, UnchangedActivityIsQuietForAtMostMaxQuietPolls) {
  PollGate gate(3);
  const PollGate::Activity idle{2, 40, 0};
  EXPECT_FALSE(gate.Quiet(idle));  // the first poll reads everything
  EXPECT_TRUE(gate.Quiet(idle));
  EXPECT_TRUE(gate.Quiet(idle));
  EXPECT_TRUE(gate.Quiet(idle));
  EXPECT_FALSE(gate.Quiet(idle));  // the fourth in a row is full
  EXPECT_TRUE(gate.Quiet(idle));
}

TEST(PollGateTest, AStepASessionOrARefreshMakesTheNextPollFull) {
  PollGate gate(100);
  PollGate::Activity a{2, 40, 0};
  EXPECT_FALSE(gate.Quiet(a));
  EXPECT_TRUE(gate.Quiet(a));
  a.steps = 41;  // a rank stepped
  EXPECT_FALSE(gate.Quiet(a));
  EXPECT_TRUE(gate.Quiet(a));
  a.sessions = 3;  // a rank came
  EXPECT_FALSE(gate.Quiet(a));
  a.refreshes = 1;  // a refresh was queued
  EXPECT_FALSE(gate.Quiet(a));
  a.refreshes = 0;  // and finished: its factor is to publish
  EXPECT_FALSE(gate.Quiet(a));
  EXPECT_TRUE(gate.Quiet(a));
}

TEST(PollGateTest, ZeroMaxQuietPollsEveryTime) {
  PollGate gate(0);
  const PollGate::Activity a{1, 5, 0};
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(gate.Quiet(a));
}

}  // namespace
}  // namespace gift::daemon
