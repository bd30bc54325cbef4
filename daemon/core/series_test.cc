#include "daemon/core/series.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/wire_format.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The handles are the families' own series: what is set through them is
// what GET /metrics shows, under the job's labels.
TEST(SeriesCacheTest, HandlesAreTheExportedSeries) {
  CoreParts core("series");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  RankSeries& r = core.series.Rank(0);
  ASSERT_EQ(r.layers.size(), core.layout.size());
  r.layers[1].upper->Increment(7);
  r.steps->Increment(3);
  core.series.Layer(0).gain->Set(0.5);
  const std::string text = core.Text();
  EXPECT_THAT(text, HasSubstr("gift_boundary_hits_total{bound=\"upper\","
                              "job_id=\"job\",layer=\"fc2\",node=\"test\","
                              "rank=\"0\"} 7"));
  EXPECT_THAT(text, HasSubstr("gift_steps_total{job_id=\"job\",node=\"test\","
                              "rank=\"0\"} 3"));
  EXPECT_THAT(text, HasSubstr("gift_layer_gain{job_id=\"job\",layer=\"fc1\","
                              "node=\"test\"} 0.5"));
  // The same handle on the next use.
  EXPECT_EQ(&core.series.Rank(0), &r);
  EXPECT_EQ(core.series.Rank(0).layers[1].upper, r.layers[1].upper);
}

// A path's round trip, an audit or a probe exists once it has a value.
TEST(SeriesCacheTest, PathSeriesAppearOnFirstUse) {
  CoreParts core("serieslazy");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.series.Rank(0);
  core.series.Layer(0);
  EXPECT_THAT(core.Text(), Not(HasSubstr("gift_quantization_rel_l2{")));
  EXPECT_THAT(core.Text(), Not(HasSubstr("gift_layer_audit_rel_l2{")));
  core.series.Rank(0).layers[0].rel_l2[1]->Set(0.25);
  core.series.Layer(0).audit_drift[0]->Set(0.125);
  const std::string text = core.Text();
  EXPECT_THAT(text,
              HasSubstr("gift_quantization_rel_l2{job_id=\"job\",layer=\"fc1\","
                        "node=\"test\",path=\"gift\",rank=\"0\"} 0.25"));
  EXPECT_THAT(text,
              Not(HasSubstr("gift_quantization_rel_l2{job_id=\"job\",layer="
                            "\"fc1\",node=\"test\",path=\"euclid\"")));
  EXPECT_THAT(text,
              HasSubstr("gift_layer_audit_drift{job_id=\"job\",layer=\"fc1\","
                        "node=\"test\",path=\"euclid\"} 0.125"));
}

// A leaving rank's gauges are removed with its session: the cache forgets
// them first, and a rank of the same number gets new series.
TEST(SeriesCacheTest, ALeavingRanksSeriesAreForgottenBeforeTheyAreRemoved) {
  CoreParts core("seriesdrop");
  absl::StatusOr<v1::RegisterResponse> a =
      core.registrar.Register(Request(0, 1));
  ASSERT_OK(a);
  core.series.Rank(0).layers[0].rel_l2[0]->Set(0.5);
  core.gauges.Update();
  ASSERT_THAT(core.Text(), HasSubstr("gift_rank_heartbeat_age_seconds{"));
  v1::DeregisterRequest d;
  d.set_session_id(a->session_id());
  ASSERT_OK(core.registrar.Deregister(d));
  EXPECT_THAT(core.Text(), Not(HasSubstr("gift_quantization_rel_l2{")));
  EXPECT_THAT(core.Text(), Not(HasSubstr("gift_rank_heartbeat_age_seconds{")));
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.series.Rank(0).layers[0].rel_l2[0]->Set(0.75);  // a live series
  EXPECT_THAT(core.Text(),
              HasSubstr("gift_quantization_rel_l2{job_id=\"job\",layer=\"fc1\","
                        "node=\"test\",path=\"euclid\",rank="
                        "\"0\"} 0.75"));
}

// Another job id (a follower taking the leader's) drops every handle: no
// series is set under the old job's labels afterwards.
TEST(SeriesCacheTest, AnotherJobIdTakesNewSeries) {
  CoreParts core("seriesjob");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.series.Layer(1).gain->Set(1);
  core.layout.set_job_id("other");
  core.series.Layer(1).gain->Set(2);
  const std::string text = core.Text();
  EXPECT_THAT(text, HasSubstr("gift_layer_gain{job_id=\"job\",layer=\"fc2\","
                              "node=\"test\"} 1"));
  EXPECT_THAT(text, HasSubstr("gift_layer_gain{job_id=\"other\",layer=\"fc2\","
                              "node=\"test\"} 2"));
}

// One format series per layer; -1 removes it.
TEST(SeriesCacheTest, SetFormatKeepsOneSeries) {
  CoreParts core("seriesfmt");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  const int nvfp4 = kernels::WireFormat::kNvfp4Code;
  core.series.SetFormat(0, nvfp4);
  core.series.SetFormat(0, nvfp4);
  EXPECT_THAT(core.Text(), HasSubstr("gift_layer_format_info{format=\"nvfp4\","
                                     "job_id=\"job\",layer=\"fc1\""));
  core.series.SetFormat(0, kernels::WireFormat::kMxfp4Code);
  std::string text = core.Text();
  EXPECT_THAT(text, Not(HasSubstr("format=\"nvfp4\",job_id=\"job\",layer="
                                  "\"fc1\"")));
  EXPECT_THAT(text, HasSubstr("format=\"mxfp4\",job_id=\"job\",layer=\"fc1\""));
  core.series.SetFormat(0, -1);
  text = core.Text();
  for (const char* f : {"e4m3", "e5m2", "nvfp4", "mxfp4"}) {
    EXPECT_THAT(text, Not(HasSubstr(absl::StrCat(
                          "format=\"", f, "\",job_id=\"job\",layer=\"fc1\""))));
  }
}

}  // namespace
}  // namespace gift::daemon
