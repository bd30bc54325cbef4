#include "daemon/core/job_layout.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

LayerShapes Shapes(std::vector<std::pair<std::string, int64_t>> d_in) {
  LayerShapes out;
  for (const auto& [name, d] : d_in) {
    v1::LayerShape* s = out.Add();
    s->set_name(name);
    s->set_d_out(16);
    s->set_d_in(d);
  }
  return out;
}

absl::Status Keep(const JobLayer&) { return absl::OkStatus(); }

// sketch_oversample p sizes Ω (k_cap = min(d_in, r_cap + p)) and reaches
// the ranks' entries through the declarations.
TEST(JobLayoutTest, SketchOversampleSizesOmegaAndTheDeclarations) {
  DaemonConfig c;
  c.max_rank = 32;
  c.sketch_oversample = 4;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("job", 1, Shapes({{"fc1", 34}, {"fc2", 96}}), Keep));
  EXPECT_EQ(layout.layers()[0].k_cap, 34);  // capped by d_in
  EXPECT_EQ(layout.layers()[1].k_cap, 36);
  EXPECT_EQ(layout.layers()[1].omega0.size(), 96u * 36u);
  const std::vector<shm::LayerDecl> decls = layout.Decls();
  ASSERT_EQ(decls.size(), 2u);
  EXPECT_EQ(decls[1].oversample, 4);
  EXPECT_EQ(shm::GeometryOf(decls[1]).k_cap, 36);
}

TEST(JobLayoutTest, AdoptsLayersWithTheConfigDefaults) {
  DaemonConfig c;
  c.max_rank = 32;
  c.transform = "full";
  c.full_max_d_in = 40;
  c.format = "e5m2";
  c.beta_auto = true;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("job", 4, Shapes({{"fc1", 24}, {"fc2", 48}}), Keep));
  EXPECT_EQ(layout.job_id(), "job");
  EXPECT_EQ(layout.world_size(), 4);
  ASSERT_EQ(layout.size(), 2u);
  const JobLayer& fc1 = layout.layers()[0];
  const JobLayer& fc2 = layout.layers()[1];
  // r_cap = min(max_rank, d_in); k_cap = min(d_in, r_cap + oversample).
  EXPECT_EQ(fc1.r_cap, 24);
  EXPECT_EQ(fc2.r_cap, 32);
  EXPECT_EQ(fc1.k_cap, 24);
  EXPECT_EQ(fc2.k_cap, std::min<int64_t>(48, 32 + shm::kDefaultOversample));
  // The full default only within full_max_d_in; β auto only when low-rank.
  EXPECT_EQ(fc1.settings.transform(), v1::TRANSFORM_FULL);
  EXPECT_EQ(fc2.settings.transform(), v1::TRANSFORM_LOWRANK);
  EXPECT_FALSE(fc1.settings.beta_auto());
  EXPECT_TRUE(fc2.settings.beta_auto());
  EXPECT_EQ(fc1.settings.format(), v1::WIRE_FORMAT_E5M2);
  EXPECT_EQ(fc2.settings.format(), v1::WIRE_FORMAT_E5M2);
  EXPECT_EQ(layout.format(), kernels::Fp8Format::kE5M2);
  EXPECT_EQ(fc1.format_note, "");
  EXPECT_EQ(fc1.settings.pin(), v1::PIN_AUTO);
  EXPECT_EQ(fc1.omega0.size(), static_cast<size_t>(24 * fc1.k_cap));
  EXPECT_THAT(layout.FullLayers(), ElementsAre(true, false));
  ASSERT_EQ(layout.Decls().size(), 2u);
  EXPECT_EQ(layout.Decls()[1].name, "fc2");
  EXPECT_EQ(layout.Decls()[1].r_cap, 32);
  EXPECT_EQ(layout.IndexOf(fc2), 1);
  EXPECT_EQ(layout.PlanLayers().size(), 2u);
  EXPECT_EQ(layout.SelectedCount(), 0);
}

TEST(JobLayoutTest, AdoptStopsAtTheFirstRefusedLayer) {
  DaemonConfig c;
  JobLayout layout(c);
  absl::Status st = layout.Adopt(
      "job", 2, Shapes({{"a", 8}, {"b", 8}, {"c", 8}}), [](const JobLayer& l) {
        return l.name == "b" ? absl::InvalidArgumentError("no b")
                             : absl::OkStatus();
      });
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_EQ(layout.size(), 1u);
  EXPECT_EQ(layout.layers()[0].name, "a");
}

TEST(JobLayoutTest, ChecksTheSameJob) {
  DaemonConfig c;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("job", 2, Shapes({{"fc1", 24}, {"fc2", 48}}), Keep));
  EXPECT_OK(layout.CheckSameJob(2, Shapes({{"fc1", 24}, {"fc2", 48}})));
  EXPECT_THAT(layout.CheckSameJob(3, Shapes({{"fc1", 24}, {"fc2", 48}})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("world size 3 differs from the job's 2")));
  EXPECT_THAT(layout.CheckSameJob(2, Shapes({{"fc1", 24}, {"fc2", 40}})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("layer list differs")));
  EXPECT_THAT(layout.CheckSameJob(2, Shapes({{"fc1", 24}})),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// A 4-bit default where the shape takes it; e4m3 and a note where d_in is
// not a multiple of the block (nvfp4: 16, mxfp4: 32).
TEST(JobLayoutTest, LayersThatCannotTakeA4BitDefaultGetE4m3) {
  DaemonConfig c;
  c.format = "nvfp4";
  JobLayout layout(c);
  EXPECT_EQ(layout.format(), kernels::Fp4Format::kNvfp4);  // before a job
  ASSERT_OK(layout.Adopt("job", 2, Shapes({{"fc1", 48}, {"fc2", 40}}), Keep));
  EXPECT_EQ(layout.layers()[0].settings.format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(layout.layers()[0].format_note, "");
  EXPECT_EQ(layout.layers()[1].settings.format(), v1::WIRE_FORMAT_E4M3);
  EXPECT_THAT(layout.layers()[1].format_note,
              HasSubstr("e4m3, not the job's nvfp4"));
  EXPECT_THAT(layout.layers()[1].format_note, HasSubstr("multiple of 16"));
  // A rank's ask overrides the config: 48 is no multiple of mxfp4's 32.
  ASSERT_OK(layout.Adopt("job2", 2, Shapes({{"fc1", 64}, {"fc2", 48}}),
                         kernels::Fp4Format::kMxfp4, Keep));
  EXPECT_EQ(layout.format(), kernels::Fp4Format::kMxfp4);
  EXPECT_EQ(layout.layers()[0].settings.format(), v1::WIRE_FORMAT_MXFP4);
  EXPECT_EQ(layout.layers()[1].settings.format(), v1::WIRE_FORMAT_E4M3);
  EXPECT_THAT(layout.layers()[1].format_note, HasSubstr("multiple of 32"));
}

TEST(JobLayoutTest, ChecksARanksFormatAgainstTheJobs) {
  DaemonConfig c;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("J", 2, Shapes({{"fc1", 32}}),
                         kernels::Fp8Format::kE4M3, Keep));
  EXPECT_OK(layout.CheckFormat(1, v1::WIRE_FORMAT_UNSPECIFIED));
  EXPECT_OK(layout.CheckFormat(1, v1::WIRE_FORMAT_E4M3));
  EXPECT_THAT(layout.CheckFormat(1, v1::WIRE_FORMAT_NVFP4),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 1 asks format nvfp4; job J runs e4m3")));
  EXPECT_THAT(layout.CheckFormat(1, static_cast<v1::WireFormat>(9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown wire format value 9")));
}

// A follower takes the leader's job format: later asks are checked against
// it and the notes follow it; the layers' own formats come with the plan.
TEST(JobLayoutTest, TakesTheLeadersFormatWithItsNotes) {
  DaemonConfig c;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("J", 2, Shapes({{"fc1", 48}, {"fc2", 64}}),
                         kernels::Fp4Format::kNvfp4, Keep));
  EXPECT_EQ(layout.layers()[0].format_note, "");
  layout.TakeFormat(kernels::Fp4Format::kMxfp4);
  EXPECT_EQ(layout.format(), kernels::Fp4Format::kMxfp4);
  EXPECT_THAT(layout.layers()[0].format_note, HasSubstr("not the job's mxfp4"));
  EXPECT_EQ(layout.layers()[1].format_note, "");
  EXPECT_EQ(layout.layers()[0].settings.format(), v1::WIRE_FORMAT_NVFP4);
  EXPECT_THAT(layout.CheckFormat(1, v1::WIRE_FORMAT_NVFP4),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job J runs mxfp4")));
  EXPECT_OK(layout.CheckFormat(1, v1::WIRE_FORMAT_MXFP4));
  // Without layers too (a follower before its first rank).
  JobLayout empty(c);
  empty.TakeFormat(kernels::Fp8Format::kE5M2);
  EXPECT_EQ(empty.format(), kernels::Fp8Format::kE5M2);
}

// A peer's plan: every format a wire format, every layer's fitting its
// shape; unset keeps the layer's; layers this job lacks are not checked.
TEST(JobLayoutTest, ChecksAPeersPlanFormats) {
  DaemonConfig c;
  JobLayout layout(c);
  ASSERT_OK(layout.Adopt("J", 2, Shapes({{"fc1", 48}, {"fc2", 40}}), Keep));
  v1::PeerPlan plan;
  plan.set_plan_epoch(3);
  plan.set_format(v1::WIRE_FORMAT_NVFP4);
  v1::PeerLayerPlan* fc1 = plan.add_layers();
  fc1->set_name("fc1");
  fc1->mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);
  v1::PeerLayerPlan* fc2 = plan.add_layers();
  fc2->set_name("fc2");  // unset
  v1::PeerLayerPlan* other = plan.add_layers();
  other->set_name("other");
  other->mutable_settings()->set_format(v1::WIRE_FORMAT_MXFP4);
  EXPECT_OK(layout.CheckPlanFormats(plan, "n0"));

  fc2->mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);  // 40 % 16
  EXPECT_THAT(layout.CheckPlanFormats(plan, "n0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("plan epoch 3 from n0: layer 'fc2'"),
                             HasSubstr("multiple of 16"))));
  fc2->mutable_settings()->set_format(static_cast<v1::WireFormat>(5));
  EXPECT_THAT(layout.CheckPlanFormats(plan, "n0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown wire format value 5")));
  fc2->mutable_settings()->set_format(v1::WIRE_FORMAT_E5M2);
  plan.set_format(static_cast<v1::WireFormat>(-1));
  EXPECT_THAT(layout.CheckPlanFormats(plan, "n0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("job format"),
                             HasSubstr("unknown wire format value -1"))));
}

TEST(JobLayoutTest, FindsLayersByName) {
  DaemonConfig c;
  JobLayout layout(c);
  EXPECT_THAT(layout.Find("fc1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no rank has registered yet")));
  ASSERT_OK(layout.Adopt("job", 2, Shapes({{"fc1", 24}, {"fc2", 48}}), Keep));
  absl::StatusOr<JobLayer*> l = layout.Find("fc2");
  ASSERT_OK(l);
  EXPECT_EQ((*l)->d_in, 48);
  EXPECT_EQ(layout.FindOrNull("fc3"), nullptr);
  EXPECT_THAT(layout.Find("fc3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("giftctl layers lists the 2 layers")));
}

TEST(JobLayoutTest, LabelsCarryTheJobAndNode) {
  DaemonConfig c;
  c.node = "n1";
  JobLayout layout(c);
  layout.set_job_id("job");
  const metrics::Labels labels = layout.Labels({{"layer", "fc1"}});
  EXPECT_EQ(labels.at("job_id"), "job");
  EXPECT_EQ(labels.at("node"), "n1");
  EXPECT_EQ(labels.at("layer"), "fc1");
  EXPECT_EQ(labels.size(), 3u);
}

}  // namespace
}  // namespace gift::daemon
