#include "daemon/core/control_plane.h"

#include <string>

#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(core_.registrar.Register(Request(0, 1))); }
  CoreParts core_{"ctlplane"};
};

TEST_F(ControlPlaneTest, StatusAndLayersDescribeTheJob) {
  const v1::GetStatusResponse s = core_.control.Status();
  EXPECT_EQ(s.job_id(), "job");
  EXPECT_EQ(s.daemon_instance(), core_.instance);
  EXPECT_EQ(s.version(), kGiftVersion);
  EXPECT_EQ(s.ranks_registered(), 1);
  EXPECT_EQ(s.layers(), 2);
  EXPECT_EQ(s.plan_epoch(), core_.planner.epoch());
  const v1::ListLayersResponse l = core_.control.Layers();
  ASSERT_EQ(l.layers_size(), 2);
  EXPECT_EQ(l.layers(1).name(), "fc2");
  EXPECT_EQ(l.layers(1).d_in(), 48);
  // The daemon's rank within the layer's cap, and the default β.
  EXPECT_EQ(l.layers(0).settings().rank(), 24);
  EXPECT_DOUBLE_EQ(l.layers(0).settings().beta(), core_.config.beta);
}

TEST_F(ControlPlaneTest, ARankChangeIsValidatedAndANewEpoch) {
  const int64_t epoch = core_.planner.epoch();
  v1::SetRankRequest r;
  r.set_rank(0);
  EXPECT_THAT(core_.control.SetRank(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank must be in [1, max_rank")));
  r.set_rank(30);  // above fc1's d_in 24
  EXPECT_THAT(core_.control.SetRank(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds d_in 24 of layer fc1")));
  EXPECT_EQ(core_.planner.epoch(), epoch);
  r.set_rank(8);
  absl::StatusOr<v1::SetRankResponse> out = core_.control.SetRank(r);
  ASSERT_OK(out);
  EXPECT_EQ(out->plan_epoch(), epoch + 1);
  EXPECT_EQ(core_.planner.rank(), 8);
  // The same rank again changes nothing.
  ASSERT_OK(core_.control.SetRank(r));
  EXPECT_EQ(core_.planner.epoch(), epoch + 1);
}

TEST_F(ControlPlaneTest, IntervalsAreBounded) {
  v1::SetRefreshIntervalRequest k;
  k.set_steps(0);
  EXPECT_THAT(core_.control.SetRefreshInterval(k),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("refresh interval K must be in [1, ")));
  k.set_steps(20);
  ASSERT_OK(core_.control.SetRefreshInterval(k));
  EXPECT_EQ(core_.planner.refresh_interval(), 20);
  v1::SetAuditIntervalRequest a;
  a.set_steps(-1);
  EXPECT_THAT(core_.control.SetAuditInterval(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("audit interval must be in [0, ")));
  a.set_steps(5);
  ASSERT_OK(core_.control.SetAuditInterval(a));
  EXPECT_EQ(core_.planner.audit_interval(), 5);
}

TEST_F(ControlPlaneTest, LayerSettingsAreValidatedBeforeAnythingChanges) {
  v1::SetLayerPolicyRequest r;
  r.set_layer("fc9");
  EXPECT_THAT(core_.control.SetLayerPolicy(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown layer 'fc9'")));
  r.set_layer("fc1");
  r.mutable_settings()->set_beta(0.5);
  r.mutable_settings()->set_beta_auto(true);
  EXPECT_THAT(core_.control.SetLayerPolicy(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("beta auto together")));
  const int64_t epoch = core_.planner.epoch();
  r.mutable_settings()->set_beta_auto(false);
  absl::StatusOr<v1::SetLayerPolicyResponse> out =
      core_.control.SetLayerPolicy(r);
  ASSERT_OK(out);
  EXPECT_DOUBLE_EQ(out->layer().settings().beta(), 0.5);
  EXPECT_EQ(out->plan_epoch(), epoch + 1);
  // A new β refactors: the ranks are asked to close their window.
  EXPECT_EQ(core_.layout.layers()[0].refresh_seq, 1);
}

// fc1 (16 x 24) cannot take a 4-bit format, fc2 (16 x 48) takes nvfp4 but
// not mxfp4 (blocks of 32). Refusals name the layer and change nothing.
TEST_F(ControlPlaneTest, AFormatIsCheckedAgainstTheLayersShape) {
  const int64_t epoch = core_.planner.epoch();
  v1::SetLayerPolicyRequest r;
  r.set_layer("fc1");
  r.mutable_settings()->set_beta(0.5);  // valid: must not be applied either
  r.mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);
  EXPECT_THAT(core_.control.SetLayerPolicy(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer fc1 cannot take nvfp4")));
  r.mutable_settings()->set_format(static_cast<v1::WireFormat>(7));
  EXPECT_THAT(core_.control.SetLayerPolicy(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer fc1: unknown wire format value 7")));
  r.set_layer("fc2");
  r.mutable_settings()->set_format(v1::WIRE_FORMAT_MXFP4);
  EXPECT_THAT(core_.control.SetLayerPolicy(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("multiple of 32")));
  EXPECT_EQ(core_.planner.epoch(), epoch);
  for (const JobLayer& l : core_.layout.layers()) {
    EXPECT_EQ(l.settings.format(), v1::WIRE_FORMAT_E4M3) << l.name;
    EXPECT_EQ(l.settings.beta(), 0) << l.name;
  }
  // nvfp4 fits fc2: a new epoch, in ListLayers and in the plan.
  r.mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);
  absl::StatusOr<v1::SetLayerPolicyResponse> out =
      core_.control.SetLayerPolicy(r);
  ASSERT_OK(out);
  EXPECT_EQ(out->plan_epoch(), epoch + 1);
  EXPECT_EQ(out->layer().settings().format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(core_.control.Layers().layers(1).settings().format(),
            v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(core_.control.Layers().layers(0).settings().format(),
            v1::WIRE_FORMAT_E4M3);
  EXPECT_EQ(core_.control.Layers().layers(1).format_reason(), "");
}

TEST_F(ControlPlaneTest, ARefreshIsForCandidatesOnly) {
  v1::TriggerRefreshRequest r;
  r.set_layer("fc1");
  EXPECT_THAT(core_.control.TriggerRefresh(r),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not a candidate")));
  r.clear_layer();
  absl::StatusOr<v1::TriggerRefreshResponse> none =
      core_.control.TriggerRefresh(r);
  ASSERT_OK(none);
  EXPECT_EQ(none->layers_size(), 0);  // no candidate yet
}

}  // namespace
}  // namespace gift::daemon
