// giftd's core driven directly (no gRPC): registration and its validation,
// the shared memory it creates and frees, Control validation, and a full
// sketch-window → refresh → factor-slot round trip with a simulated rank.
#include "daemon/core/daemon.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/core/daemon_testutil.h"
#include "daemon/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

DaemonConfig TestConfig() { return TestDaemonConfig("dtest", 10); }

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = Daemon::Create(TestConfig(), &registry_);
    ASSERT_OK(d);
    daemon_ = *std::move(d);
  }
  size_t ShmObjects() { return daemon::ShmObjects(TestConfig()); }

  metrics::Registry registry_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, RegisterValidates) {
  v1::RegisterRequest r = Request(0);
  r.set_rank(2);
  EXPECT_THAT(daemon_->Register(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  r = Request(0);
  r.set_layout_version(shm::kLayoutVersion + 1);
  EXPECT_THAT(daemon_->Register(r).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("layout version")));
  r = Request(0);
  r.mutable_layers(1)->set_name("fc1");
  EXPECT_THAT(daemon_->Register(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  r = Request(0);
  r.mutable_layers(0)->set_d_in(0);
  EXPECT_THAT(daemon_->Register(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ShmObjects(), 0u);

  ASSERT_OK(daemon_->Register(Request(0)));
  r = Request(1);
  r.set_job_id("other");
  EXPECT_THAT(
      daemon_->Register(r).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("serves job")));
  r = Request(1);
  r.mutable_layers(0)->set_d_out(17);
  EXPECT_THAT(
      daemon_->Register(r).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("layer list")));
}

TEST_F(DaemonTest, SharedMemoryLifecycle) {
  auto resp = daemon_->Register(Request(0));
  ASSERT_OK(resp);
  // Control block + one data region per layer.
  EXPECT_EQ(ShmObjects(), 3u);
  FakeRank rank = FakeRank::Map(*resp);
  shm::PlanView plan;
  ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
  EXPECT_GE(plan.plan_epoch, 1);
  EXPECT_EQ(plan.refresh_interval, 25);
  ASSERT_EQ(plan.layers.size(), 2u);
  EXPECT_STREQ(rank.entry(1)->name, "fc2");
  std::vector<float> omega;
  ASSERT_OK(shm::ReadOmega0(*rank.entry(1), *rank.data[1], &omega));
  double norm = 0;
  for (float v : omega) norm += double{v} * v;
  EXPECT_NEAR(norm, rank.entry(1)->k_cap, 1e-3);  // orthonormal columns

  v1::DeregisterRequest bye;
  bye.set_session_id(resp->session_id());
  ASSERT_OK(daemon_->Deregister(bye));
  EXPECT_EQ(ShmObjects(), 0u);
  EXPECT_THAT(daemon_->Deregister(bye), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DaemonTest, ResumedRankKeepsItsGiftLayersAndEpochs) {
  v1::RegisterRequest r = Request(0);
  r.add_resumed_gift_layers("nope");
  EXPECT_THAT(daemon_->Register(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nope")));
  EXPECT_EQ(ShmObjects(), 0u);
  r = Request(0);
  r.set_last_plan_epoch(41);
  (*r.mutable_last_factor_version())["fc2"] = 7;
  r.add_resumed_gift_layers("fc2");
  auto resp = daemon_->Register(r);
  ASSERT_OK(resp);
  FakeRank rank = FakeRank::Map(*resp);
  shm::PlanView plan;
  ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
  EXPECT_GT(plan.plan_epoch, 41);
  EXPECT_EQ(plan.layers[0].path, 0);       // Euclidean
  EXPECT_EQ(plan.layers[1].path, 1);       // GIFT
  EXPECT_EQ(plan.layers[1].candidate, 1);  // so it gets fresh factors
  // The second rank of the job sees the same plan; polls without telemetry
  // change nothing.
  auto second = daemon_->Register(Request(1));
  ASSERT_OK(second);
  daemon_->PollOnce();
  FakeRank other = FakeRank::Map(*second);
  shm::PlanView plan1;
  ASSERT_TRUE(shm::ReadPlan(other.control->data(), &plan1));
  EXPECT_EQ(plan1.plan_epoch, plan.plan_epoch);
  EXPECT_EQ(plan1.layers[1].path, 1);
}

TEST_F(DaemonTest, DeadRankIsReaped) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  v1::RegisterRequest r = Request(0);
  r.set_pid(child);  // already gone
  ASSERT_OK(daemon_->Register(r));
  daemon_->PollOnce();
  auto s = daemon_->GetStatus({});
  ASSERT_OK(s);
  EXPECT_EQ(s->ranks_registered(), 0);
  EXPECT_EQ(s->ranks_reaped(), 1);
  EXPECT_EQ(ShmObjects(), 0u);
  // No peers configured: a one-node job, no members.
  EXPECT_EQ(s->peer().role(), v1::PEER_ROLE_STANDALONE);
  EXPECT_EQ(s->peer().members_size(), 0);
}

TEST_F(DaemonTest, ControlValidatesAndChangesNothingOnError) {
  auto registered = daemon_->Register(Request(0));
  ASSERT_OK(registered);
  FakeRank rank = FakeRank::Map(*registered);
  auto before = daemon_->GetStatus({});
  ASSERT_OK(before);
  v1::SetRefreshIntervalRequest k;
  k.set_steps(0);
  EXPECT_THAT(daemon_->SetRefreshInterval(k).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("K")));
  v1::SetRankRequest r;
  r.set_rank(40);  // > d_in 24 of fc1
  EXPECT_THAT(daemon_->SetRank(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fc1")));
  r.set_rank(0);
  EXPECT_THAT(daemon_->SetRank(r).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  v1::SetLayerPolicyRequest p;
  p.set_layer("nope");
  EXPECT_THAT(
      daemon_->SetLayerPolicy(p).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown layer")));
  p.set_layer("fc2");
  p.mutable_settings()->set_beta(-1);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  p.mutable_settings()->set_beta(0);
  p.mutable_settings()->set_rank(49);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  v1::SetSelectionPolicyRequest sp;
  sp.mutable_policy()->set_top_k(-3);
  EXPECT_THAT(daemon_->SetSelectionPolicy(sp).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  v1::SetAuditIntervalRequest audit;
  audit.set_steps(-1);
  EXPECT_THAT(daemon_->SetAuditInterval(audit).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("audit")));
  audit.set_steps(kMaxAuditInterval + 1);
  EXPECT_THAT(daemon_->SetAuditInterval(audit).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto after = daemon_->GetStatus({});
  ASSERT_OK(after);
  EXPECT_EQ(after->plan_epoch(), before->plan_epoch());
  EXPECT_EQ(after->refresh_interval(), before->refresh_interval());
  EXPECT_EQ(after->audit_interval(), 100);
  EXPECT_EQ(after->rank(), before->rank());
  EXPECT_EQ(after->policy().top_k(), before->policy().top_k());

  k.set_steps(7);
  auto ok = daemon_->SetRefreshInterval(k);
  ASSERT_OK(ok);
  EXPECT_GT(ok->plan_epoch(), before->plan_epoch());
  // The audit interval reaches the ranks' plan, 0 (off) included.
  for (int steps : {25, 0}) {
    audit.set_steps(steps);
    auto a = daemon_->SetAuditInterval(audit);
    ASSERT_OK(a);
    shm::PlanView plan;
    ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
    EXPECT_EQ(plan.audit_interval, steps);
    EXPECT_EQ(plan.plan_epoch, a->plan_epoch());
    EXPECT_EQ(daemon_->GetStatus({})->audit_interval(), steps);
  }
}

// Issue 13: a second giftd with the same shm prefix removed the first one's
// objects as "left by an earlier giftd". Now it fails before touching any.
TEST_F(DaemonTest, ASecondDaemonWithTheSamePrefixTouchesNothing) {
  ASSERT_OK(daemon_->Register(Request(0)));
  const size_t objects = ShmObjects();
  ASSERT_EQ(objects, 3u);
  metrics::Registry other_registry;
  auto second = Daemon::Create(TestConfig(), &other_registry);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("in use by another giftd")));
  EXPECT_EQ(ShmObjects(), objects);
  auto status = daemon_->GetStatus({});
  ASSERT_OK(status);
  EXPECT_EQ(status->ranks_registered(), 1);
  // Once the first is gone, the prefix is free again.
  daemon_.reset();
  metrics::Registry third_registry;
  EXPECT_OK(Daemon::Create(TestConfig(), &third_registry));
}

// A rank sketches a known second moment A (Y = count · A Ω) in the first
// `ks` columns of Ω₀; the daemon refreshes the pinned layer into *f.
void RefreshFromKnownWindow(Daemon& daemon, FakeRank& rank, int64_t ks,
                            shm::FactorData* f) {
  shm::LayerEntry* e = rank.entry(1);
  const int64_t d = e->d_in, k = e->k_cap;
  // A = diag(decaying spectrum): the top eigenvectors are the first axes.
  std::vector<double> lambda(d);
  for (int64_t i = 0; i < d; ++i) lambda[i] = std::pow(0.7, i);
  std::vector<float> omega;
  ASSERT_OK(shm::ReadOmega0(*e, *rank.data[1], &omega));
  const int64_t count = 1000;
  std::vector<float> y(d * ks);
  double trace = 0;
  for (int64_t i = 0; i < d; ++i) {
    trace += lambda[i] * count;
    for (int64_t j = 0; j < ks; ++j) {
      y[i * ks + j] = static_cast<float>(count * lambda[i] * omega[i * k + j]);
    }
  }
  auto began = shm::BeginWindow(e, rank.data[1].get(), nullptr, 0, false);
  ASSERT_OK(began);
  ASSERT_TRUE(*began);
  const auto layout = shm::LayerRegionLayout::Compute(d, e->r_cap, k);
  ASSERT_OK(rank.data[1]->Write(layout.sketch[0].y, y.data(), y.size() * 4));
  ASSERT_OK(rank.data[1]->Write(layout.sketch[0].trace, &trace, 8));
  ASSERT_OK(rank.data[1]->Write(layout.sketch[0].count, &count, 8));
  shm::SketchMeta meta{};
  meta.window = 0;
  meta.omega_version = -1;
  meta.k = static_cast<int32_t>(ks);
  meta.start_step = 0;
  meta.end_step = 50;
  shm::CloseWindow(e, meta);

  gift::testing::WaitUntil(
      [&] {
        if (shm::NewestFactorVersion(*e) >= 0) return true;
        daemon.PollOnce();
        return false;
      },
      absl::Seconds(20), absl::Milliseconds(5));
  ASSERT_GE(shm::NewestFactorVersion(*e), 1);
  EXPECT_EQ(e->window_consumed.load(), 0);
  ASSERT_OK(shm::ReadNewestFactor(*e, *rank.data[1], nullptr, f));
  EXPECT_EQ(f->kind, 0);
  EXPECT_EQ(f->window, 50);
  // The first factor direction is the first axis (up to sign).
  EXPECT_NEAR(std::abs(f->u[0]), 1.0, 1e-3);
  // Directions above the floor are shrunk: c < 0 for the top one.
  EXPECT_LT(f->c[0], 0);
  // The next windows' Ω has the buffer's k_cap columns, of which they
  // sketch as many as their rank needs.
  EXPECT_EQ(f->omega.size(), static_cast<size_t>(d * k));
}

// A pinned layer of rank r: the plan names it a candidate on the GIFT path
// with rank r.
void PinFc2(Daemon& daemon, FakeRank& rank, int32_t r) {
  v1::SetLayerPolicyRequest pin;
  pin.set_layer("fc2");
  pin.mutable_settings()->set_pin(v1::PIN_IN);
  pin.mutable_settings()->set_rank(r);
  ASSERT_OK(daemon.SetLayerPolicy(pin));
  shm::PlanView plan;
  ASSERT_TRUE(shm::ReadPlan(rank.control->data(), &plan));
  ASSERT_EQ(plan.layers[1].candidate, 1);
  EXPECT_EQ(plan.layers[1].path, 1);  // pinned in: selected
  EXPECT_EQ(plan.layers[1].rank, r);
}

// The poll thread (every 10 ms here) reads the ranks' memory in full only
// when something changed: while the rank does not step, its polls are
// quiet; a step makes one full.
TEST_F(DaemonTest, PollsOfAnIdleRankAreQuietUntilItSteps) {
  auto resp = daemon_->Register(Request(0, /*world=*/1));
  ASSERT_OK(resp);
  FakeRank rank = FakeRank::Map(*resp);
  const auto polls = [&](const char* kind) {
    return SeriesValue(
        registry_,
        absl::StrCat("gift_daemon_polls_total{job_id=\"job\",kind=\"", kind,
                     "\",node=\"test\"}"));
  };
  ASSERT_TRUE(gift::testing::WaitUntil([&] { return polls("quiet") >= 5; },
                                       absl::Seconds(20)));
  // Wait for a quiet poll, then step: the next full poll sees the step.
  const double full = polls("full");
  shm::Header(rank.control->data())->step.store(7);
  ASSERT_TRUE(gift::testing::WaitUntil([&] { return polls("full") > full; },
                                       absl::Seconds(20)));
  ASSERT_TRUE(gift::testing::WaitUntil(
      [&] {
        auto s = daemon_->GetStatus({});
        return s.ok() && s->step() == 7;
      },
      absl::Seconds(20)));
}

TEST_F(DaemonTest, WindowRefreshPublishesFactor) {
  auto resp = daemon_->Register(Request(0, /*world=*/1));
  ASSERT_OK(resp);
  FakeRank rank = FakeRank::Map(*resp);
  ASSERT_NO_FATAL_FAILURE(PinFc2(*daemon_, rank, 32));
  // fc2 (d_in 48): r_cap 48, k_cap 48; rank 32 + 16 sketches all of it.
  ASSERT_EQ(rank.entry(1)->k_cap, 48);
  ASSERT_EQ(shm::SketchColumns(rank.entry(1)->k_cap, 16, 32), 48);
  shm::FactorData f;
  ASSERT_NO_FATAL_FAILURE(RefreshFromKnownWindow(*daemon_, rank, 48, &f));
  EXPECT_EQ(f.r, 32);
  auto layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_EQ(layers->layers(1).factor_version(), f.version);
  EXPECT_EQ(layers->layers(1).refreshes(), 1);
  EXPECT_THAT(metrics::Serialize(registry_),
              HasSubstr("gift_factor_refreshes_total{job_id=\"job\""));
}

// DESIGN §3: a window sketches r + p columns of Ω, fewer than its buffer's
// k_cap when the rank is below r_cap; the daemon builds the factor from
// those columns alone.
TEST_F(DaemonTest, AWindowOfRankPlusOversamplingColumnsRefreshes) {
  auto resp = daemon_->Register(Request(0, /*world=*/1));
  ASSERT_OK(resp);
  FakeRank rank = FakeRank::Map(*resp);
  ASSERT_NO_FATAL_FAILURE(PinFc2(*daemon_, rank, 8));
  const int32_t ks = shm::SketchColumns(rank.entry(1)->k_cap, 16, 8);
  ASSERT_EQ(ks, 24);
  shm::FactorData f;
  ASSERT_NO_FATAL_FAILURE(RefreshFromKnownWindow(*daemon_, rank, ks, &f));
  EXPECT_EQ(f.r, 8);
}

// A window sketched before the layer's rank was raised is narrower than the
// new rank: the refresh builds at most as many directions as it has columns.
TEST_F(DaemonTest, ARankRaisedAfterTheWindowOpenedIsBuiltAtMostItsWidth) {
  auto resp = daemon_->Register(Request(0, /*world=*/1));
  ASSERT_OK(resp);
  FakeRank rank = FakeRank::Map(*resp);
  ASSERT_NO_FATAL_FAILURE(PinFc2(*daemon_, rank, 40));
  shm::FactorData f;
  ASSERT_NO_FATAL_FAILURE(RefreshFromKnownWindow(*daemon_, rank, 24, &f));
  EXPECT_EQ(f.r, 24);
}

}  // namespace
}  // namespace gift::daemon
