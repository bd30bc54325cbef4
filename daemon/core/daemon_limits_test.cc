// giftd's limits on what ranks and operators send (issue 13.5): Register,
// Heartbeat, the store and Control are checked against documented,
// configurable limits (limits.h) before anything is allocated, with errors
// that name the limit; strings a caller sent come back clipped.
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/core/daemon_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kMegabyte(1 << 20, 'x');

DaemonConfig Config() { return TestDaemonConfig("ltest"); }

class DaemonLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(Config()); }
  void Start(const DaemonConfig& c) {
    daemon_.reset();
    registry_ = std::make_unique<metrics::Registry>();  // one daemon each
    auto d = Daemon::Create(c, registry_.get());
    ASSERT_OK(d);
    daemon_ = *std::move(d);
  }
  size_t ShmObjects() { return daemon::ShmObjects(Config()); }
  // Refused with `code`, a message naming `what`, and nothing allocated.
  void ExpectRefused(const v1::RegisterRequest& r, absl::StatusCode code,
                     const std::string& what) {
    absl::Status s = daemon_->Register(r).status();
    EXPECT_THAT(s, StatusIs(code, HasSubstr(what)));
    EXPECT_LT(s.message().size(), 400u) << what;
    EXPECT_EQ(ShmObjects(), 0u) << what;
  }

  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonLimitsTest, RegisterIsCheckedBeforeAnythingIsAllocated) {
  v1::RegisterRequest r = Request(0);
  r.mutable_layers(0)->set_d_in(int64_t{1} << 40);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "max_layer_d_in");
  r = Request(0);
  r.mutable_layers(0)->set_d_in(1 << 20);  // 64 x 2^20
  r.mutable_layers(0)->set_d_out(64);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "max_layer_d_in");
  r = Request(0);
  r.mutable_layers(0)->set_d_out(int64_t{1} << 62);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "max_layer_d_out");
  r = Request(0);
  r.set_job_id(kMegabyte);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "max_job_id_bytes");
  r = Request(0);
  r.set_job_id("job with \"quotes\"\n");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "job_id");
  r = Request(0);
  r.mutable_layers(0)->set_name(kMegabyte);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "max_layer_name_bytes");
  r = Request(0);
  r.mutable_layers(0)->set_name("fc\x01");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "printable");
  r = Request(0);
  r.set_pid(std::numeric_limits<int64_t>::max());  // kill(-1, 0) succeeded
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "pid");
  r = Request(0);
  r.set_last_plan_epoch(std::numeric_limits<int64_t>::max());
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "last_plan_epoch");
  r = Request(0);
  (*r.mutable_last_factor_version())["fc1"] =
      std::numeric_limits<int64_t>::max();
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "last_factor_version");
  r = Request(0);
  r.set_step(-5);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "step");
  r = Request(0);
  r.set_world_size(std::numeric_limits<int32_t>::max());
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "world size");
  r = Request(0);
  while (r.layers_size() <= 4096) {
    v1::LayerShape* l = r.add_layers();
    l->set_name(absl::StrCat("extra.", r.layers_size()));
    l->set_d_out(1);
    l->set_d_in(1);
  }
  ExpectRefused(r, absl::StatusCode::kResourceExhausted, "max_layers");
  ASSERT_OK(daemon_->Register(Request(0)));
}

TEST_F(DaemonLimitsTest, SessionsPerProcessAndPerNodeAreBounded) {
  int registered = 0;
  absl::Status last;
  for (int rank = 0; rank < 200 && last.ok(); ++rank) {
    last = daemon_->Register(Request(rank, /*world=*/200)).status();
    if (last.ok()) ++registered;
  }
  EXPECT_EQ(registered, 64);
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kResourceExhausted,
                             HasSubstr("max_sessions_per_pid")));
  auto s = daemon_->GetStatus({});
  ASSERT_OK(s);
  EXPECT_EQ(s->ranks_registered(), 64);
}

TEST_F(DaemonLimitsTest, HeartbeatAndStoreAreChecked) {
  auto resp = daemon_->Register(Request(0));
  ASSERT_OK(resp);
  v1::HeartbeatRequest hb;
  hb.set_session_id(resp->session_id());
  hb.set_step(-1);
  EXPECT_THAT(daemon_->Heartbeat(hb).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step")));
  hb.set_session_id(kMegabyte);
  hb.set_step(1);
  absl::Status unknown = daemon_->Heartbeat(hb).status();
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_LT(unknown.message().size(), 400u);

  v1::StoreSetRequest set;
  set.set_job_id(kMegabyte);
  set.set_key("k");
  set.set_value("v");
  absl::Status bad_job = daemon_->StoreSet(set);
  EXPECT_THAT(bad_job, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("max_job_id_bytes")));
  EXPECT_LT(bad_job.message().size(), 400u);
  // A job that never registered gets no more than a job's share.
  set.set_job_id("never-registered");
  absl::Status full;
  for (int i = 0; i < 80 && full.ok(); ++i) {
    set.set_key(absl::StrCat("k", i));
    set.set_value(kMegabyte);
    full = daemon_->StoreSet(set);
  }
  EXPECT_THAT(full, StatusIs(absl::StatusCode::kResourceExhausted,
                             HasSubstr("max_store_job_bytes")));
  v1::StoreAddRequest add;
  add.set_job_id("job");
  add.set_key("n");
  add.set_delta(std::numeric_limits<int64_t>::max());
  ASSERT_OK(daemon_->StoreAdd(add));
  add.set_delta(1);
  EXPECT_THAT(daemon_->StoreAdd(add).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
}

// Issue 13: a 1 MB layer name came back in the error, which the client then
// saw as RESOURCE_EXHAUSTED (the status outgrew gRPC's metadata limit).
TEST_F(DaemonLimitsTest, StringsInErrorsAreClipped) {
  ASSERT_OK(daemon_->Register(Request(0)));
  v1::SetLayerPolicyRequest p;
  p.set_layer(kMegabyte);
  absl::Status s = daemon_->SetLayerPolicy(p).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          AllOf(HasSubstr("unknown layer 'xxxx"),
                                HasSubstr("(1048576 bytes)"))));
  EXPECT_LT(s.message().size(), 400u);
  v1::TriggerRefreshRequest t;
  t.set_layer(kMegabyte);
  s = daemon_->TriggerRefresh(t).status();
  EXPECT_LT(s.message().size(), 400u);
  v1::RegisterRequest r = Request(1);
  r.add_resumed_gift_layers("nope\x7f" + kMegabyte.substr(0, 100));
  s = daemon_->Register(r).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_LT(s.message().size(), 400u);
}

// The limits are giftd options, checked like the others.
TEST_F(DaemonLimitsTest, LimitsAreOptions) {
  auto c =
      LoadConfigFromString("max_layers: 7\nmax_store_jobs: 2\n", "giftd.yaml",
                           {"--max-rank-shm-bytes=1000000", "--max-local-ranks",
                            "2", "--max-layer-d-in=100"});
  ASSERT_OK(c);
  EXPECT_EQ(c->limits.max_layers, 7);
  EXPECT_EQ(c->limits.max_store_jobs, 2);
  EXPECT_EQ(c->limits.max_rank_shm_bytes, 1000000);
  EXPECT_EQ(c->limits.max_local_ranks, 2);
  EXPECT_EQ(c->limits.max_layer_d_in, 100);
  EXPECT_EQ(c->limits.max_sessions_per_pid, 64);  // the default
  for (const char* bad :
       {"--max-layers=0", "--max-layer-d-in=16777217", "--max-store-jobs=-1",
        "--max-layer-name-bytes=128", "--beta=1e308", "--full-beta=5e-324",
        "--refresh-interval=1000001", "--max-rank=4097"}) {
    auto b = LoadConfigFromString("", "", {bad});
    EXPECT_THAT(b, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(LoadConfigFromString("", "", {"--beta=1e308"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("beta must be in [1e-08, 1e+08]")));
}

TEST_F(DaemonLimitsTest, ConfiguredLimitsApply) {
  DaemonConfig c = Config();
  // fc1 and fc2 low-rank take about 85 kB, fc2 full 37 kB more.
  c.limits.max_rank_shm_bytes = 100000;
  c.limits.max_local_ranks = 2;
  Start(c);
  ASSERT_OK(daemon_->Register(Request(0, /*world=*/4)));
  v1::RegisterRequest other = Request(1, 4);
  other.set_pid(1);  // another process (init: alive)
  ASSERT_OK(daemon_->Register(other));
  EXPECT_THAT(daemon_->Register(Request(2, 4)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_local_ranks")));
  // The full transform would give every rank a full region too.
  v1::SetLayerPolicyRequest p;
  p.set_layer("fc2");
  p.mutable_settings()->set_transform(v1::TRANSFORM_FULL);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_rank_shm_bytes")));
  auto layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_EQ(layers->layers(1).settings().transform(), v1::TRANSFORM_LOWRANK);

  c.limits.max_rank_shm_bytes = 50000;
  Start(c);
  EXPECT_THAT(daemon_->Register(Request(0)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_rank_shm_bytes")));
  EXPECT_EQ(ShmObjects(), 0u);
}

}  // namespace
}  // namespace gift::daemon
