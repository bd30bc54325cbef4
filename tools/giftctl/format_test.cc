#include "tools/giftctl/format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace gift::giftctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

gift::v1::LayerStatus Layer(const std::string& name, bool selected) {
  gift::v1::LayerStatus l;
  l.set_name(name);
  l.set_d_out(4096);
  l.set_d_in(1024);
  l.set_candidate(true);
  l.set_selected(selected);
  l.set_reason(selected ? "selected: gain 0.31 >= 0.05" : "gain unmeasured");
  l.set_vulnerability(0.01234);
  l.set_gain(selected ? 0.3125 : std::nan(""));
  l.set_factor_version(selected ? 7 : -1);
  l.set_factor_age_steps(12);
  const double none = std::nan("");
  l.set_audit_rel_l2_euclid(selected ? 0.035 : none);
  l.set_audit_rel_l2_gift(selected ? 0.0123456 : none);
  l.set_audit_drift_euclid(none);
  l.set_audit_drift_gift(selected ? 0.002 : none);
  l.set_audit_path(selected ? "gift" : "");
  gift::v1::LayerSettings* s = l.mutable_settings();
  s->set_pin(selected ? gift::v1::PIN_IN : gift::v1::PIN_AUTO);
  s->set_transform(gift::v1::TRANSFORM_LOWRANK);
  s->set_rank(32);
  s->set_beta(1.0);
  s->set_format(selected ? gift::v1::WIRE_FORMAT_NVFP4
                         : gift::v1::WIRE_FORMAT_E4M3);
  l.set_bytes_sent(selected ? 3 * 1024 * 1024 + 512 * 1024 : 0);
  if (!selected) l.set_format_reason("e4m3, not the job's nvfp4: d_in 40");
  l.set_sketch_period(selected ? 3 : 1);
  l.set_sketched(false);
  l.set_sketch_reason(selected ? "GIFT path, factor subspace steady: "
                                 "sketched every 3rd window"
                               : "candidate: sketched every window");
  return l;
}

TEST(FormatTableTest, PadsColumnsByDisplayWidth) {
  std::string t = FormatTable({{"a", "×b", "c"}, {"long", "x", "d"}});
  EXPECT_EQ(t,
            "a     ×b  c\n"
            "long  x   d\n");
}

TEST(FormatTableTest, LastColumnIsNotPadded) {
  EXPECT_EQ(FormatTable({{"k", ""}, {"key", "v"}}), "k\nkey  v\n");
}

TEST(FormatLayersTest, OneAlignedRowPerLayer) {
  gift::v1::ListLayersResponse r;
  *r.add_layers() = Layer("blocks.0.mlp.fc2", true);
  *r.add_layers() = Layer("blocks.11.attn.qkv", false);
  std::string t = FormatLayers(r.layers());
  std::vector<std::string> lines = absl::StrSplit(t, '\n');
  ASSERT_EQ(lines.size(), 4u);  // header, two rows, ""
  EXPECT_THAT(lines[0], HasSubstr("LAYER"));
  EXPECT_THAT(lines[0], HasSubstr("REASON"));
  // Every column starts at the same offset in each row: "SHAPE" and the
  // shapes line up.
  size_t shape = lines[0].find("SHAPE");
  EXPECT_EQ(lines[1].find("4096×1024"), shape);
  EXPECT_EQ(lines[2].find("4096×1024"), shape);
  EXPECT_THAT(
      lines[1],
      HasSubstr("yes  yes   in    lowrank    32  1     nvfp4  3.5 MiB"));
  EXPECT_THAT(lines[0], HasSubstr("FMT    BYTES"));
  // The format's reason follows the selector's.
  EXPECT_THAT(lines[2], HasSubstr("gain unmeasured; format e4m3, not the "
                                  "job's nvfp4: d_in 40"));
  EXPECT_THAT(lines[1], HasSubstr("0.0123  0.312  7       12   1/3 off"));
  // Which windows are sketched, and why when not every one.
  EXPECT_THAT(lines[1], HasSubstr("; sketch: GIFT path, factor subspace "
                                  "steady: sketched every 3rd window"));
  EXPECT_THAT(lines[2], Not(HasSubstr("sketch:")));
  // The newest audit and its path.
  EXPECT_THAT(lines[1], HasSubstr("0.0123 gift  0.0020 gift"));
  EXPECT_THAT(lines[1], HasSubstr("selected: gain 0.31 >= 0.05"));
  // No gain measured and no factor yet: dashes, not NaN / -1.
  EXPECT_THAT(lines[2],
              HasSubstr("0.0123  -      -       -    every    -            -  "
                        "          gain unmeasured"));
  EXPECT_THAT(t, Not(HasSubstr("nan")));
  // β auto shows the β in use.
  r.mutable_layers(0)->mutable_settings()->set_beta_auto(true);
  r.mutable_layers(0)->mutable_settings()->set_beta(0.3);
  EXPECT_THAT(FormatLayers(r.layers()), HasSubstr("32  auto:0.3  nvfp4"));
}

TEST(FormatLayersTest, SketchNamesTheWindowOwnerInAMultiNodeJob) {
  gift::v1::ListLayersResponse r;
  *r.add_layers() = Layer("blocks.0.mlp.fc2", true);
  *r.add_layers() = Layer("blocks.1.mlp.fc2", true);
  r.mutable_layers(0)->set_owner("node-b");
  r.mutable_layers(1)->set_sketch_period(1);
  r.mutable_layers(1)->set_owner("node-a");
  std::string t = FormatLayers(r.layers());
  EXPECT_THAT(t, HasSubstr(" 1/3 off@node-b "));
  EXPECT_THAT(t, HasSubstr(" every@node-a "));
  // Not a candidate: no windows, no owner shown.
  r.mutable_layers(1)->set_candidate(false);
  EXPECT_THAT(FormatLayers(r.layers()), Not(HasSubstr("node-a")));
}

TEST(FormatStatusTest, KeyValueLines) {
  gift::v1::GetStatusResponse s;
  s.set_node("node-a");
  s.set_uptime_seconds(3725);
  s.set_ranks_registered(3);
  s.set_world_size(4);
  s.set_refresh_interval(50);
  s.set_sketch_stride(3);
  s.set_plan_epoch(12);
  s.mutable_policy()->set_kind(gift::v1::SELECTION_KIND_TOP_K);
  s.mutable_policy()->set_top_k(8);
  s.set_layers(24);
  s.set_selected_layers(6);
  std::string t = FormatStatus(s);
  EXPECT_THAT(t, HasSubstr("node              node-a\n"));
  EXPECT_THAT(t, HasSubstr("uptime            1h02m05s\n"));
  EXPECT_THAT(t, HasSubstr("ranks             3/4 registered, 0 reaped\n"));
  EXPECT_THAT(t, HasSubstr("refresh_interval  50 steps\n"));
  EXPECT_THAT(t, HasSubstr("sketch_stride     every 3 steps\n"));
  EXPECT_THAT(t, HasSubstr("policy            top-k k=8 "));
  EXPECT_THAT(t, HasSubstr("layers            24 (6 selected)\n"));
}

TEST(FormatStatusTest, PeerRoleAndMembers) {
  gift::v1::GetStatusResponse s;
  s.mutable_peer()->set_role(gift::v1::PEER_ROLE_STANDALONE);
  EXPECT_THAT(FormatStatus(s), HasSubstr("peer              standalone"));
  gift::v1::PeerStatus* p = s.mutable_peer();
  p->set_role(gift::v1::PEER_ROLE_LEADER);
  p->set_job_id("job7");
  p->set_leader_address("10.0.0.1:50152");
  gift::v1::PeerMemberStatus* m = p->add_members();
  m->set_node("n0");
  m->set_address("10.0.0.1:50152");
  m->set_instance("aa");
  m->set_self(true);
  m = p->add_members();
  m->set_node("n1");
  m->set_address("10.0.0.2:50152");
  m->set_instance("bb");
  m->set_seconds_since_seen(0.26);
  std::string t = FormatStatus(s);
  EXPECT_THAT(t, HasSubstr("peer              leader of job job7 at "
                           "10.0.0.1:50152\n"));
  EXPECT_THAT(t, HasSubstr("member            n0 at 10.0.0.1:50152 (instance "
                           "aa), this daemon\n"));
  EXPECT_THAT(t, HasSubstr("member            n1 at 10.0.0.2:50152 (instance "
                           "bb), seen 0.3 s ago\n"));
  p->set_role(gift::v1::PEER_ROLE_FOLLOWER);
  p->set_connected(false);
  p->set_seconds_since_leader(-1);
  EXPECT_EQ(FormatPeer(*p),
            "follower of 10.0.0.1:50152 in job job7, NOT connected (never "
            "answered)");
  p->set_connected(true);
  p->set_leader_instance("aa");
  p->set_seconds_since_leader(1.5);
  EXPECT_EQ(FormatPeer(*p),
            "follower of 10.0.0.1:50152 in job job7, connected to leader "
            "instance aa (answered 1.5 s ago)");
}

TEST(FormatPolicyTest, NamesEveryField) {
  gift::v1::SelectionPolicy p;
  p.set_kind(gift::v1::SELECTION_KIND_THRESHOLD);
  p.set_threshold(0.02);
  p.set_hysteresis(0.1);
  p.set_window_steps(50);
  p.set_max_extra_flops(1e12);
  p.set_min_gain(0.05);
  p.set_entry_gain(0.15);
  p.set_entry_probes(3);
  p.set_top_k_4bit(12);
  p.set_gain_hold(2);
  p.set_warmup_steps(100);
  p.set_plan_interval_steps(200);
  p.set_audit_window(3);
  p.set_audit_margin(0.1);
  EXPECT_EQ(
      FormatPolicy(p),
      "threshold k=0 k_4bit=12 threshold=0.02 hysteresis=0.1 window=50 "
      "max_layers=0 max_flops=1e+12 min_gain=0.05 entry_gain=0.15 "
      "entry_probes=3 gain_hold=2 warmup=100 plan_interval=200 audit_window=3 "
      "audit_margin=0.1");
}

TEST(EnumNamesTest, UnspecifiedIsDash) {
  EXPECT_EQ(KindName(gift::v1::SELECTION_KIND_ELBOW), "elbow");
  EXPECT_EQ(KindName(gift::v1::SELECTION_KIND_UNSPECIFIED), "-");
  EXPECT_EQ(TransformName(gift::v1::TRANSFORM_FULL), "full");
  EXPECT_EQ(FormatName(gift::v1::WIRE_FORMAT_E5M2), "e5m2");
  EXPECT_EQ(FormatName(gift::v1::WIRE_FORMAT_NVFP4), "nvfp4");
  EXPECT_EQ(FormatName(gift::v1::WIRE_FORMAT_MXFP4), "mxfp4");
  EXPECT_EQ(FormatName(gift::v1::WIRE_FORMAT_UNSPECIFIED), "-");
  EXPECT_EQ(FormatName(static_cast<gift::v1::WireFormat>(7)), "-");
  EXPECT_EQ(Bytes(0), "-");
  EXPECT_EQ(Bytes(512), "512 B");
  EXPECT_EQ(Bytes(1536), "1.5 KiB");
  EXPECT_EQ(PinName(gift::v1::PIN_OUT), "out");
  EXPECT_EQ(PinName(gift::v1::PIN_UNSPECIFIED), "-");
}

TEST(FormatTelemetryTest, SummaryLineThenTable) {
  gift::v1::TelemetryUpdate u;
  u.mutable_status()->set_step(1200);
  u.mutable_status()->set_plan_epoch(3);
  *u.add_layers() = Layer("fc2", true);
  std::string t = FormatTelemetry(u);
  EXPECT_EQ(t.rfind("step 1200  plan_epoch 3  ", 0), 0u) << t;
  EXPECT_THAT(t, HasSubstr("\nLAYER"));
  EXPECT_THAT(t, HasSubstr("\nfc2  "));
}

TEST(ToJsonTest, ProtoFieldNamesAndZeros) {
  gift::v1::GetStatusResponse s;
  s.set_node("n");
  s.set_refresh_interval(50);
  std::string compact = ToJson(s, /*pretty=*/false);
  EXPECT_THAT(compact, HasSubstr("\"refresh_interval\":50"));
  EXPECT_THAT(compact, HasSubstr("\"ranks_registered\":0"));  // zeros shown
  EXPECT_THAT(compact, Not(HasSubstr("refreshInterval")));
  EXPECT_EQ(compact.find('\n'), std::string::npos);
  std::string pretty = ToJson(s, /*pretty=*/true);
  EXPECT_THAT(pretty, HasSubstr("\n"));
  EXPECT_NE(pretty.back(), '\n');
}

TEST(ToJsonTest, NanGainIsValidJsonString) {
  gift::v1::LayerStatus l = Layer("fc1", false);
  EXPECT_THAT(ToJson(l, false), HasSubstr("\"gain\":\"NaN\""));
  EXPECT_THAT(ToJson(l, false), HasSubstr("\"pin\":\"PIN_AUTO\""));
}

}  // namespace
}  // namespace gift::giftctl
