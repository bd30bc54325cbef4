#include "daemon/core/gauges.h"

#include <string>

#include "common/status_matchers.h"
#include "daemon/core/core_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(GaugesTest, UpdateSetsTheJobsLayersAndRanksGauges) {
  CoreParts core("gauges");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.layout.layers()[0].selected = true;
  core.layout.layers()[0].candidate = true;
  core.layout.layers()[1].score.gain = 0.25;
  core.gauges.Update();
  const std::string text = core.Text();
  EXPECT_THAT(text, HasSubstr("gift_selected_layers{job_id=\"job\",node="
                              "\"test\"} 1"));
  EXPECT_THAT(text, HasSubstr("gift_layer_selected{job_id=\"job\",layer="
                              "\"fc1\",node=\"test\"} 1"));
  EXPECT_THAT(text, HasSubstr("gift_layer_gain{job_id=\"job\",layer=\"fc2\","
                              "node=\"test\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("gift_factor_version{job_id=\"job\",layer="
                              "\"fc1\",node=\"test\"} -1"));
  EXPECT_THAT(text, HasSubstr("gift_rank_heartbeat_age_seconds{job_id="
                              "\"job\",node=\"test\",rank=\"0\"}"));
  // Without peers no election gauges.
  EXPECT_THAT(text, Not(HasSubstr("gift_peer_term{")));
}

// One series per layer, for the format it uses: a change removes the old.
TEST(GaugesTest, EachLayersFormatIsOneInfoSeries) {
  CoreParts core("gaugefmt");
  ASSERT_OK(core.registrar.Register(Request(0, 1)));
  core.gauges.Update();
  EXPECT_THAT(core.Text(), HasSubstr("gift_layer_format_info{format=\"e4m3\","
                                     "job_id=\"job\",layer=\"fc2\",node="
                                     "\"test\"} 1"));
  v1::SetLayerPolicyRequest r;
  r.set_layer("fc2");
  r.mutable_settings()->set_format(v1::WIRE_FORMAT_NVFP4);
  ASSERT_OK(core.control.SetLayerPolicy(r));
  core.gauges.Update();
  const std::string text = core.Text();
  EXPECT_THAT(text, HasSubstr("gift_layer_format_info{format=\"nvfp4\","
                              "job_id=\"job\",layer=\"fc2\",node="
                              "\"test\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("gift_layer_format_info{format=\"e4m3\","
                                  "job_id=\"job\",layer=\"fc2\"")));
  EXPECT_THAT(text, HasSubstr("gift_layer_format_info{format=\"e4m3\","
                              "job_id=\"job\",layer=\"fc1\",node="
                              "\"test\"} 1"));
}

TEST(GaugesTest, PeerGaugesShowTheTermAndRole) {
  CoreParts core("gaugepeer");
  core.peers.RaiseTerm(3);
  core.gauges.UpdatePeer();
  const std::string text = core.Text();
  EXPECT_THAT(text, HasSubstr("gift_peer_term{job_id=\"\",node=\"test\"} 3"));
  EXPECT_THAT(text, HasSubstr("gift_peer_leader{job_id=\"\",node=\"test\"} 0"));
  EXPECT_THAT(text,
              HasSubstr("gift_peer_coordinated{job_id=\"\",node=\"test\"} 0"));
}

}  // namespace
}  // namespace gift::daemon
