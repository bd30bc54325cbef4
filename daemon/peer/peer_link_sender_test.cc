#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing.h"
#include "daemon/peer/peer_link_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon::internal {
namespace {

using ::testing::ElementsAre;

TEST(PeerSenderTest, RunsInOrderAndDropsTheOldestWhenFull) {
  PeerCounters counters;
  PeerSender sender(/*limit=*/2, &counters);
  absl::Notification started, release;
  absl::Mutex mu;
  std::vector<int> ran;
  sender.Enqueue([&] {
    started.Notify();
    release.WaitForNotification();
    return absl::OkStatus();
  });
  started.WaitForNotification();  // the sender is busy; 4 more arrive
  for (int i = 1; i <= 4; ++i) {
    sender.Enqueue([&, i] {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
      return i == 4 ? absl::UnavailableError("peer gone") : absl::OkStatus();
    });
  }
  release.Notify();
  gift::testing::WaitUntil(
      [&] {
        absl::MutexLock lock(&mu);
        return ran.size() == 2;
      },
      absl::Seconds(10), absl::Milliseconds(5));
  sender.Stop();
  {
    absl::MutexLock lock(&mu);
    EXPECT_THAT(ran, ElementsAre(3, 4));  // 1 and 2 were dropped
  }
  PeerLinkStats stats;
  counters.Fill(stats);
  EXPECT_EQ(stats.dropped, 2);
  EXPECT_EQ(stats.send_failures, 1);
}

TEST(PeerSenderTest, StopDropsWhatIsQueuedAndRefusesMore) {
  PeerCounters counters;
  std::atomic<int> ran{0};
  PeerSender sender(8, &counters);
  sender.Stop();
  sender.Enqueue([&] {
    ++ran;
    return absl::OkStatus();
  });
  sender.Stop();  // idempotent
  EXPECT_EQ(ran.load(), 0);
}

TEST(PeerCountersTest, ListsEveryKindInOrder) {
  PeerCounters counters;
  counters.Sent("sketch", 100);
  counters.Sent("sketch", 20);
  counters.Received("join", 7);
  PeerLinkStats stats;
  counters.Fill(stats);
  ASSERT_EQ(stats.bytes_sent.size(), 7u);
  EXPECT_EQ(stats.bytes_sent[0].first, "join");
  EXPECT_EQ(stats.bytes_sent[3],
            (std::pair<std::string, int64_t>("sketch", 120)));
  EXPECT_EQ(stats.bytes_received[0].second, 7);
  EXPECT_EQ(stats.bytes_received[3].second, 0);
}

}  // namespace
}  // namespace gift::daemon::internal
