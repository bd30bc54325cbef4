#include "daemon/core/registrar.h"

#include <string>

#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RegistrarTest, TheFirstRankAdoptsItsJobAndGetsThePlan) {
  CoreParts core("regadopt");
  absl::StatusOr<v1::RegisterResponse> r =
      core.registrar.Register(Request(0, /*world=*/2));
  ASSERT_OK(r);
  EXPECT_EQ(r->daemon_instance(), core.instance);
  EXPECT_EQ(core.layout.job_id(), "job");
  EXPECT_EQ(core.layout.world_size(), 2);
  EXPECT_EQ(core.layout.size(), 2u);
  EXPECT_TRUE(core.planner.selector().HasLayer("fc1"));
  ASSERT_EQ(core.sessions.size(), 1u);
  // The plan is in the rank's control block.
  FakeRank rank = FakeRank::Map(*r);
  shm::PlanView plan;
  ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
  EXPECT_EQ(plan.plan_epoch, core.planner.epoch());
  EXPECT_EQ(plan.layers.size(), 2u);
  EXPECT_THAT(core.Text(), HasSubstr("gift_ranks_registered{job_id=\"job\""));
}

TEST(RegistrarTest, ARankOfAnotherJobOrLayoutIsRefused) {
  CoreParts core("regrefuse");
  ASSERT_OK(core.registrar.Register(Request(0, 2)));
  v1::RegisterRequest other = Request(1, 2);
  other.set_job_id("other");
  EXPECT_THAT(core.registrar.Register(other),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("giftd serves job 'job'")));
  v1::RegisterRequest wider = Request(1, 2);
  wider.mutable_layers(1)->set_d_in(40);
  EXPECT_THAT(core.registrar.Register(wider),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("layer list differs")));
  // The same rank again by another live process.
  v1::RegisterRequest again = Request(0, 2);
  again.set_pid(1);  // the registered process (this one) is alive
  EXPECT_THAT(core.registrar.Register(again),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(core.sessions.size(), 1u);
}

// The first rank's format is the job's (fc1's d_in 24 cannot take nvfp4:
// e4m3 there); a later rank asking another is refused and changes nothing.
TEST(RegistrarTest, TheFirstRanksFormatIsTheJobsAndOthersMustAgree) {
  CoreParts core("regformat");
  v1::RegisterRequest first = Request(0, 3);
  first.set_format(v1::WIRE_FORMAT_NVFP4);
  absl::StatusOr<v1::RegisterResponse> r = core.registrar.Register(first);
  ASSERT_OK(r);
  EXPECT_EQ(core.layout.format(), kernels::Fp4Format::kNvfp4);
  EXPECT_EQ(core.layout.layers()[0].settings.format(), v1::WIRE_FORMAT_E4M3);
  EXPECT_THAT(core.layout.layers()[0].format_note, HasSubstr("multiple of 16"));
  EXPECT_EQ(core.layout.layers()[1].settings.format(), v1::WIRE_FORMAT_NVFP4);
  // The plan carries each layer's format code.
  FakeRank rank = FakeRank::Map(*r);
  shm::PlanView plan;
  ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
  EXPECT_EQ(plan.layers[0].format, kernels::WireFormat::kE4M3Code);
  EXPECT_EQ(plan.layers[1].format, kernels::WireFormat::kNvfp4Code);
  const int64_t epoch = core.planner.epoch();

  v1::RegisterRequest other = Request(1, 3);
  other.set_format(v1::WIRE_FORMAT_MXFP4);
  EXPECT_THAT(core.registrar.Register(other),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 1 asks format mxfp4; job job runs "
                                 "nvfp4")));
  other.set_format(static_cast<v1::WireFormat>(9));
  EXPECT_THAT(core.registrar.Register(other),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown wire format value 9")));
  EXPECT_EQ(core.sessions.size(), 1u);
  EXPECT_EQ(core.layout.format(), kernels::Fp4Format::kNvfp4);
  EXPECT_EQ(core.layout.layers()[1].settings.format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(core.planner.epoch(), epoch);
  // The same format, or none, joins.
  other.set_format(v1::WIRE_FORMAT_NVFP4);
  ASSERT_OK(core.registrar.Register(other));
  ASSERT_OK(core.registrar.Register(Request(2, 3)));
  EXPECT_EQ(core.sessions.size(), 3u);
}

TEST(RegistrarTest, HeartbeatsDeregisterAndReaps) {
  CoreParts core("reghb");
  absl::StatusOr<v1::RegisterResponse> r = core.registrar.Register(Request(0));
  ASSERT_OK(r);
  v1::HeartbeatRequest hb;
  hb.set_session_id(r->session_id());
  hb.set_step(7);
  absl::StatusOr<v1::HeartbeatResponse> out = core.registrar.Heartbeat(hb);
  ASSERT_OK(out);
  EXPECT_EQ(out->plan_epoch(), core.planner.epoch());
  hb.set_session_id("nope");
  EXPECT_THAT(
      core.registrar.Heartbeat(hb),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("register again")));
  v1::DeregisterRequest d;
  d.set_session_id("nope");
  EXPECT_THAT(core.registrar.Deregister(d),
              StatusIs(absl::StatusCode::kNotFound));
  core.registrar.Reap(r->session_id(), "test");
  EXPECT_EQ(core.registrar.reaped_total(), 1);
  EXPECT_TRUE(core.sessions.empty());
  EXPECT_THAT(core.Text(), HasSubstr("gift_ranks_reaped_total{job_id=\"job\""));
}

TEST(RegistrarTest, ANewJobReplacesTheLastOnceItsRanksLeft) {
  CoreParts core("regnew");
  absl::StatusOr<v1::RegisterResponse> r = core.registrar.Register(Request(0));
  ASSERT_OK(r);
  ASSERT_OK(core.store.Set("job", "k", "v"));
  v1::DeregisterRequest d;
  d.set_session_id(r->session_id());
  ASSERT_OK(core.registrar.Deregister(d));
  v1::RegisterRequest next = Request(0, 1);
  next.set_job_id("next");
  next.mutable_layers()->RemoveLast();
  ASSERT_OK(core.registrar.Register(next));
  EXPECT_EQ(core.layout.job_id(), "next");
  EXPECT_EQ(core.layout.size(), 1u);
  // The old job's store is dropped with it.
  EXPECT_FALSE(core.store.Get("job", "k", absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace gift::daemon
