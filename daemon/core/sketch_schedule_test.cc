#include "daemon/core/sketch_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/factor_store.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;

TEST(SketchScheduleTest, StrideAndLongestPeriod) {
  EXPECT_EQ(SketchStride(0, 50), 3);  // auto: about 16 sketch steps
  EXPECT_EQ(SketchStride(0, 4), 1);
  EXPECT_EQ(SketchStride(0, 0), 1);
  EXPECT_EQ(SketchStride(2, 50), 2);
  EXPECT_EQ(SketchStride(9, 4), 4);           // never longer than the window
  EXPECT_EQ(MaxSketchPeriod(0, 200, 50), 3);  // 150 steps + 50 margin
  EXPECT_EQ(MaxSketchPeriod(0, 200, 4), 37);  // 148 steps + 52
  EXPECT_EQ(MaxSketchPeriod(0, 200, 100), 1);
  EXPECT_EQ(MaxSketchPeriod(0, 50, 50), 1);
  EXPECT_EQ(MaxSketchPeriod(0, 30, 8), 2);  // 16 steps + 14
  EXPECT_EQ(MaxSketchPeriod(0, 200, 0), 150);
  EXPECT_EQ(MaxSketchPeriod(5, 200, 50), 5);  // the operator's choice
}

TEST(SketchScheduleTest, WindowAndStepDueAgreeWithThePeriod) {
  // K = 10, period 3: windows 2, 5, 8, ... (steps 20-29, 50-59, ...).
  int sketched = 0;
  for (int64_t step = 0; step < 90; ++step) {
    const bool due = shm::SketchWindowDue(step, 10, 3);
    EXPECT_EQ(due, (step / 10) % 3 == 2) << step;
    sketched += due;
  }
  EXPECT_EQ(sketched, 30);
  for (int period : {0, 1}) EXPECT_TRUE(shm::SketchWindowDue(7, 10, period));
  EXPECT_TRUE(shm::SketchWindowDue(7, 0, 3));
  EXPECT_TRUE(shm::SketchStepDue(9, 3));
  EXPECT_FALSE(shm::SketchStepDue(10, 3));
  EXPECT_TRUE(shm::SketchStepDue(10, 0));
}

// A low-rank factor of d_in 4 whose eigenvectors are the unit vectors `e`.
shm::FactorData Factor(std::vector<int> e, std::vector<float> lambda) {
  shm::FactorData f;
  f.kind = 0;
  f.r = static_cast<int32_t>(e.size());
  f.u.assign(4 * e.size(), 0.0f);
  for (size_t i = 0; i < e.size(); ++i) f.u[e[i] * e.size() + i] = 1.0f;
  f.lambda = std::move(lambda);
  return f;
}

TEST(SketchScheduleTest, SubspaceKeptWeighsTheNewEigenpairs) {
  const shm::FactorData a = Factor({0, 1}, {3, 1});
  EXPECT_DOUBLE_EQ(SubspaceKept(a, a), 1.0);
  // The new factor's e0 (3 of its 4 units of energy) is in the old basis.
  EXPECT_DOUBLE_EQ(SubspaceKept(Factor({0}, {1}), a), 0.75);
  EXPECT_DOUBLE_EQ(SubspaceKept(Factor({2, 3}, {1, 1}), a), 0.0);
  // Negative (unclipped) eigenvalues carry no energy.
  EXPECT_DOUBLE_EQ(SubspaceKept(Factor({0}, {1}), Factor({0, 1}, {2, -1})),
                   1.0);
  shm::FactorData full = a;
  full.kind = 1;
  EXPECT_TRUE(std::isnan(SubspaceKept(full, a)));
  shm::FactorData wide = a;
  wide.u.resize(10);  // another d_in
  EXPECT_TRUE(std::isnan(SubspaceKept(wide, a)));
  EXPECT_TRUE(std::isnan(SubspaceKept(a, Factor({0, 1}, {0, 0}))));
}

TEST(SketchScheduleTest, SteadyGiftLayersAreSketchedLessOften) {
  SketchSchedule s;
  EXPECT_FALSE(s.Decide(false, false, 0, 3));
  EXPECT_EQ(s.period(), 1);
  EXPECT_THAT(s.reason(), HasSubstr("not a candidate"));
  // A candidate on probation: every window.
  s.NoteFactor(1, std::nan(""));
  EXPECT_FALSE(s.Decide(true, false, 0, 3));
  EXPECT_THAT(s.reason(), HasSubstr("probed before the GIFT path"));
  EXPECT_THAT(s.reason(), HasSubstr("sketched every window"));
  // On the GIFT path: each steady factor adds one window, up to 3.
  s.NoteFactor(2, 0.995);
  EXPECT_TRUE(s.Decide(true, true, 0, 3));
  EXPECT_EQ(s.period(), 2);
  EXPECT_THAT(s.reason(), HasSubstr("steady (v2 keeps 0.9950"));
  EXPECT_THAT(s.reason(), HasSubstr("sketched every 2nd window"));
  EXPECT_FALSE(s.Decide(true, true, 0, 3));  // no new factor: unchanged
  s.NoteFactor(3, 0.99);
  EXPECT_TRUE(s.Decide(true, true, 0, 3));
  EXPECT_EQ(s.period(), 3);
  s.NoteFactor(4, 0.999);
  EXPECT_FALSE(s.Decide(true, true, 0, 3));
  EXPECT_EQ(s.period(), 3);
  EXPECT_THAT(s.reason(), HasSubstr("every 3rd window"));
  // A shorter longest period (a larger K) clamps it.
  EXPECT_TRUE(s.Decide(true, true, 0, 2));
  EXPECT_EQ(s.period(), 2);
  // A subspace that holds without being steady (in [0.95, 0.98)): the
  // period stays, no new plan epoch.
  s.NoteFactor(41, 0.97);
  EXPECT_FALSE(s.Decide(true, true, 0, 2));
  EXPECT_EQ(s.period(), 2);
  EXPECT_THAT(s.reason(), HasSubstr("holding (v41 keeps 0.9700"));
  // A moved subspace: every window again.
  s.NoteFactor(45, 0.9);
  EXPECT_TRUE(s.Decide(true, true, 0, 3));
  EXPECT_EQ(s.period(), 1);
  EXPECT_THAT(s.reason(), HasSubstr("moved (v45 keeps 0.9000"));
  EXPECT_THAT(s.reason(), HasSubstr("< 0.95"));
  s.NoteFactor(46, 0.99);
  EXPECT_TRUE(s.Decide(true, true, 0, 3));
  // A refresh asked for (refresh_seq bumped): every window.
  EXPECT_TRUE(s.Decide(true, true, 1, 3));
  EXPECT_EQ(s.period(), 1);
  EXPECT_THAT(s.reason(), HasSubstr("refresh asked"));
  s.NoteFactor(47, 0.99);
  EXPECT_TRUE(s.Decide(true, true, 1, 3));
  // Off the GIFT path, or no longer a candidate: back to 1.
  EXPECT_TRUE(s.Decide(true, false, 1, 3));
  EXPECT_EQ(s.period(), 1);
  s.Follow(true, 0);  // a follower takes a leader's bad period as 1
  EXPECT_EQ(s.period(), 1);
  s.Follow(true, 3);
  EXPECT_EQ(s.reason(), "the leader's plan: sketched every 3rd window");
  for (auto [period, text] : {std::pair{11, "11th"},
                              {21, "21st"},
                              {22, "22nd"},
                              {112, "112th"},
                              {4, "4th"}}) {
    s.Follow(true, period);
    EXPECT_EQ(s.reason(), absl::StrCat("the leader's plan: sketched every ",
                                       text, " window"));
  }
  s.Follow(true, 3);
  EXPECT_TRUE(s.Decide(false, false, 1, 3));
  EXPECT_EQ(s.period(), 1);
}

}  // namespace
}  // namespace gift::daemon
