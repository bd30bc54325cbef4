#include "daemon/core/plan_publisher.h"

#include <string>

#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;

TEST(PlanPublisherTest, ANewEpochReachesEveryRankAndTheGauges) {
  CoreParts core("planpub");
  absl::StatusOr<v1::RegisterResponse> r0 =
      core.registrar.Register(Request(0, 2));
  absl::StatusOr<v1::RegisterResponse> r1 =
      core.registrar.Register(Request(1, 2));
  ASSERT_OK(r0);
  ASSERT_OK(r1);
  FakeRank rank0 = FakeRank::Map(*r0);
  FakeRank rank1 = FakeRank::Map(*r1);
  const int64_t epoch = core.planner.epoch();
  core.planner.set_refresh_interval(17);
  core.layout.layers()[1].selected = true;
  core.plans.NewEpoch("test");
  EXPECT_EQ(core.planner.epoch(), epoch + 1);
  for (FakeRank* rank : {&rank0, &rank1}) {
    shm::PlanView plan;
    ASSERT_TRUE(shm::ReadPlan(rank->control->data(), &plan));
    EXPECT_EQ(plan.plan_epoch, epoch + 1);
    EXPECT_EQ(plan.refresh_interval, 17);
    EXPECT_EQ(plan.probe_interval, core.config.probe_interval);
    ASSERT_EQ(plan.layers.size(), 2u);
    EXPECT_EQ(plan.layers[0].path, 0);
    EXPECT_EQ(plan.layers[1].path, 1);
    // The rank within the slot cap: min(r_cap, r).
    EXPECT_EQ(plan.layers[0].rank, 24);
  }
  EXPECT_THAT(core.Text(),
              HasSubstr("gift_refresh_interval_steps{job_id=\"job\",node="
                        "\"test\"} 17"));
}

TEST(PlanPublisherTest, ThePlanForThePeersCarriesTheLayersAndTheLeader) {
  CoreParts core("planpeer");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.peers.RaiseTerm(4);
  const v1::PeerPlan p = core.plans.Plan();
  EXPECT_EQ(p.plan_epoch(), core.planner.epoch());
  EXPECT_EQ(p.leader_instance(), core.instance);
  EXPECT_EQ(p.term(), 4);
  EXPECT_EQ(p.world_size(), 1);
  EXPECT_EQ(p.layers_size(), 2);
  EXPECT_EQ(p.members_size(), 0);  // no link
  // The job's format, once there is a job (the followers take it).
  EXPECT_EQ(p.format(), v1::WIRE_FORMAT_E4M3);
  CoreParts none("planpeer0");
  EXPECT_EQ(none.plans.Plan().format(), v1::WIRE_FORMAT_UNSPECIFIED);
}

TEST(PlanPublisherTest, NothingObservedChangesNoSelectionAndNoEpoch) {
  CoreParts core("plansel");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  const int64_t epoch = core.planner.epoch();
  // Nothing observed: nothing changes, no epoch.
  EXPECT_FALSE(core.plans.ApplySelection());
  EXPECT_EQ(core.planner.epoch(), epoch);
}

}  // namespace
}  // namespace gift::daemon
