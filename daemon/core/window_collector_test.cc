#include "daemon/core/window_collector.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::testing::ElementsAre;

// A window of `rows` rows ending at `end_step` in basis `omega_version`,
// every y value `v` (d_in 2 × k 2).
shm::SketchData Window(int64_t end_step, int64_t omega_version, float v,
                       int64_t rows = 10) {
  shm::SketchData d;
  d.meta.end_step = end_step;
  d.meta.omega_version = omega_version;
  d.meta.k = 2;
  d.y.assign(4, v);
  d.trace = v;
  d.count = rows;
  return d;
}

TEST(AddSketchTest, SumsAndRefusesWhatDoesNotAddUp) {
  WindowSum p;
  ASSERT_TRUE(AddSketch(p, Window(10, -1, 1.0f)));
  p.contributors = 1;
  ASSERT_TRUE(AddSketch(p, Window(10, -1, 2.0f)));
  EXPECT_THAT(p.sum.y, ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
  EXPECT_EQ(p.sum.trace, 3.0);
  EXPECT_EQ(p.sum.count, 20);
  EXPECT_EQ(p.contributors, 1);  // the caller counts

  shm::SketchData wide = Window(10, -1, 1.0f);
  wide.y.resize(6);
  EXPECT_FALSE(AddSketch(p, wide));
  EXPECT_FALSE(
      AddSketch(p, Window(10, -1, 1.0f, std::numeric_limits<int64_t>::max())));
  // As many values, in another width (4 × 1 instead of 2 × 2: a rank whose
  // window sketched another number of Ω's columns).
  shm::SketchData narrow = Window(10, -1, 1.0f);
  narrow.meta.k = 1;
  EXPECT_FALSE(AddSketch(p, narrow));
  EXPECT_EQ(p.sum.count, 20);  // unchanged
  EXPECT_THAT(p.sum.y, ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
}

TEST(WindowCollectorTest, TakesAWindowOnceEveryLiveRankClosedIt) {
  WindowCollector w;
  int dropped = 0;
  ASSERT_TRUE(w.AddLocal(Window(50, -1, 1.0f)));
  EXPECT_FALSE(w.TakeLocal(/*live=*/2, &dropped).has_value());
  ASSERT_TRUE(w.AddLocal(Window(50, -1, 2.0f)));
  std::optional<WindowSum> s = w.TakeLocal(/*live=*/2, &dropped);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->contributors, 2);
  EXPECT_EQ(s->sum.meta.end_step, 50);
  EXPECT_EQ(s->sum.count, 20);
  EXPECT_THAT(s->sum.y, ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(w.pending_windows(), 0u);
}

TEST(WindowCollectorTest, TheNewestCompleteWindowDropsOlderOnes) {
  WindowCollector w;
  int dropped = 0;
  // Window 50 misses a rank; 100 is complete; 150 has just begun.
  ASSERT_TRUE(w.AddLocal(Window(50, -1, 1.0f)));
  ASSERT_TRUE(w.AddLocal(Window(100, 1, 1.0f)));
  ASSERT_TRUE(w.AddLocal(Window(100, 1, 1.0f)));
  ASSERT_TRUE(w.AddLocal(Window(100, 2, 1.0f)));  // another basis
  ASSERT_TRUE(w.AddLocal(Window(150, 1, 1.0f)));
  std::optional<WindowSum> s = w.TakeLocal(/*live=*/2, &dropped);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->sum.meta.end_step, 100);
  EXPECT_EQ(s->sum.meta.omega_version, 1);
  // 50 and (100, basis 2) can no longer complete; 150 still can.
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(w.pending_windows(), 1u);
  EXPECT_FALSE(w.TakeLocal(/*live=*/2, &dropped).has_value());
}

TEST(WindowCollectorTest, WindowsThatNeverLineUpDoNotPileUp) {
  WindowCollector w;
  int dropped = 0;
  for (int64_t i = 1; i <= static_cast<int64_t>(kMaxPendingWindows) + 3; ++i) {
    ASSERT_TRUE(w.AddLocal(Window(i * 10, -1, 1.0f)));
  }
  EXPECT_FALSE(w.TakeLocal(/*live=*/2, &dropped).has_value());
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(w.pending_windows(), kMaxPendingWindows);
  w.ClearLocal();
  EXPECT_EQ(w.pending_windows(), 0u);
}

TEST(WindowCollectorTest, AMismatchedWindowIsNotCounted) {
  WindowCollector w;
  int dropped = 0;
  ASSERT_TRUE(w.AddLocal(Window(50, -1, 1.0f)));
  shm::SketchData wide = Window(50, -1, 1.0f);
  wide.y.resize(8);
  EXPECT_FALSE(w.AddLocal(wide));
  EXPECT_FALSE(w.TakeLocal(/*live=*/2, &dropped).has_value());
}

TEST(WindowCollectorTest, OwnerCompletesAWindowAtTheWorldSize) {
  WindowCollector w;
  int dropped = 0;
  WindowCollector::Owned o =
      w.AddOwned("node-a", 2, Window(100, 3, 1.0f), /*world_size=*/4, &dropped);
  EXPECT_EQ(o.result, WindowCollector::Owned::kWaiting);
  o = w.AddOwned("node-b", 1, Window(50, 3, 1.0f), 4, &dropped);  // older
  EXPECT_EQ(o.result, WindowCollector::Owned::kWaiting);
  o = w.AddOwned("node-b", 2, Window(100, 3, 2.0f), 4, &dropped);
  ASSERT_EQ(o.result, WindowCollector::Owned::kComplete);
  ASSERT_TRUE(o.sum.has_value());
  EXPECT_EQ(o.sum->contributors, 4);
  EXPECT_THAT(o.sum->sources, ElementsAre("node-a", "node-b"));
  EXPECT_THAT(o.sum->sum.y, ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
  EXPECT_EQ(dropped, 1);  // window 50
  EXPECT_EQ(w.owned_windows(), 0u);
}

TEST(WindowCollectorTest, OwnerDropsTooManyContributorsAndMismatches) {
  WindowCollector w;
  int dropped = 0;
  ASSERT_EQ(w.AddOwned("a", 2, Window(100, 3, 1.0f), 3, &dropped).result,
            WindowCollector::Owned::kWaiting);
  shm::SketchData wide = Window(100, 3, 1.0f);
  wide.y.resize(8);
  EXPECT_EQ(w.AddOwned("b", 1, wide, 3, &dropped).result,
            WindowCollector::Owned::kMismatch);
  EXPECT_EQ(dropped, 0);
  WindowCollector::Owned o =
      w.AddOwned("c", 2, Window(100, 3, 1.0f), 3, &dropped);
  ASSERT_EQ(o.result, WindowCollector::Owned::kTooMany);
  EXPECT_EQ(o.contributors, 4);
  EXPECT_THAT(o.sources, ElementsAre("a", "c"));
  EXPECT_FALSE(o.sum.has_value());
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(w.owned_windows(), 0u);
}

TEST(WindowCollectorTest, OwnerKeepsOnlyRecentWindows) {
  WindowCollector w;
  int dropped = 0;
  for (int64_t i = 1; i <= static_cast<int64_t>(kOwnedWindows) + 2; ++i) {
    EXPECT_EQ(w.AddOwned("a", 1, Window(i * 10, 1, 1.0f), 3, &dropped).result,
              WindowCollector::Owned::kWaiting);
  }
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(w.owned_windows(), kOwnedWindows);
  // Without a world size (a follower that has not learnt it) nothing
  // completes.
  EXPECT_EQ(w.AddOwned("b", 5, Window(60, 1, 1.0f), 0, &dropped).result,
            WindowCollector::Owned::kWaiting);
}

// A node whose ranks sketch a step in an older basis than another node's
// lacks that basis's factor: it is named (once per window), with its basis,
// whether it comes first or last; windows in one basis name nobody.
TEST(WindowCollectorTest, OwnerNamesTheNodesSketchingInAnOlderBasis) {
  using Lag = std::pair<std::string, int64_t>;
  WindowCollector w;
  int dropped = 0;
  WindowCollector::Owned o =
      w.AddOwned("a", 2, Window(100, 3, 1.0f), 6, &dropped);
  EXPECT_THAT(o.lagging, ::testing::IsEmpty());
  EXPECT_EQ(o.basis, 3);
  o = w.AddOwned("b", 2, Window(100, 3, 1.0f), 6, &dropped);
  EXPECT_THAT(o.lagging, ::testing::IsEmpty());
  // c is behind, and comes last.
  o = w.AddOwned("c", 2, Window(100, 2, 1.0f), 6, &dropped);
  EXPECT_EQ(o.result, WindowCollector::Owned::kWaiting);
  EXPECT_THAT(o.lagging, ElementsAre(Lag{"c", 2}));
  EXPECT_EQ(o.basis, 3);

  // The next window: c first, then a newer basis names it, then nobody.
  o = w.AddOwned("c", 2, Window(105, -1, 1.0f), 6, &dropped);
  EXPECT_THAT(o.lagging, ::testing::IsEmpty());
  EXPECT_EQ(o.basis, -1);
  o = w.AddOwned("a", 2, Window(105, 3, 1.0f), 6, &dropped);
  EXPECT_THAT(o.lagging, ElementsAre(Lag{"c", -1}));
  o = w.AddOwned("b", 2, Window(105, 3, 1.0f), 6, &dropped);
  EXPECT_THAT(o.lagging, ::testing::IsEmpty());

  // Once c has caught up the window completes, naming nobody.
  w.AddOwned("a", 2, Window(110, 4, 1.0f), 6, &dropped);
  w.AddOwned("c", 2, Window(110, 4, 1.0f), 6, &dropped);
  o = w.AddOwned("b", 2, Window(110, 4, 1.0f), 6, &dropped);
  EXPECT_EQ(o.result, WindowCollector::Owned::kComplete);
  EXPECT_THAT(o.lagging, ::testing::IsEmpty());
}

}  // namespace
}  // namespace gift::daemon
