// giftd's Control values and the factors it publishes (issue 13.4): every
// numeric field an operator sets has a documented range (INVALID_ARGUMENT
// naming the field, the value and the range; nothing changes), and no
// factor reaches a rank unless it is finite and within its bounds — a bad
// one is dropped with a counter and the layer keeps its previous factor.
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
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

class DaemonControlTest : public OneRankDaemonTest {
 protected:
  DaemonControlTest() : OneRankDaemonTest("ctest") {}

  // Everything an operator can change, as giftctl would show it.
  std::string State() {
    auto s = daemon_->GetStatus({});
    auto l = daemon_->ListLayers({});
    EXPECT_OK(s);
    EXPECT_OK(l);
    if (!s.ok() || !l.ok()) return "";
    v1::GetStatusResponse st = *s;
    st.clear_uptime_seconds();
    return st.ShortDebugString() + l->ShortDebugString();
  }

  // A low-rank factor of fc2 (d_in 48, r 4) that meets every bound.
  static v1::PublishFactorRequest GoodFactor(int64_t version) {
    v1::PublishFactorRequest r;
    r.set_owner("peer");
    v1::PeerFactor* f = r.mutable_factor();
    f->set_layer("fc2");
    f->set_version(version);
    f->set_kind(0);
    f->set_r(4);
    f->set_sigma2(0.5);
    f->set_beta(1.0);
    f->set_window(10);
    for (int i = 0; i < 48 * 4; ++i) f->add_u(i % 49 == 0 ? 1.0f : 0.0f);
    for (int i = 0; i < 4; ++i) {
      f->add_c(-0.5f);
      f->add_c_inv(1.0f);
      f->add_lambda(2.0f);
    }
    for (int i = 0; i < 48 * 48; ++i) f->add_omega(i % 49 == 0 ? 1.0f : 0.0f);
    f->set_omega_cols(48);  // all of k_cap: no column of Ω₀ kept
    return r;
  }

  double Rejected() {
    const std::string text = metrics::Serialize(registry_);
    const std::string series =
        "gift_factor_rejected_total{job_id=\"job\",layer=\"fc2\",node="
        "\"test\"} ";
    const size_t at = text.find(series);
    return at == std::string::npos ? 0
                                   : std::stod(text.substr(at + series.size()));
  }
};

// Issue 13: β = 1e308 (and 5e-324) was accepted and made every factor NaN.
TEST_F(DaemonControlTest, LayerPolicyOutsideItsRangesIsRefused) {
  const std::string before = State();
  for (double beta :
       {1e308, 5e-324, 1e-9, 2e8, -1.0, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN()}) {
    v1::SetLayerPolicyRequest p;
    p.set_layer("fc2");
    p.mutable_settings()->set_beta(beta);
    EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("beta"), HasSubstr("[1e-08, 1e+08]"))))
        << beta;
  }
  v1::SetLayerPolicyRequest p;
  p.set_layer("fc2");
  p.mutable_settings()->set_rank(49);  // > r_cap 48
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("rank"), HasSubstr("49"))));
  p.mutable_settings()->set_rank(-1);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(State(), before);
  // The ends of the range are fine.
  p.mutable_settings()->set_rank(0);
  p.mutable_settings()->set_beta(1e-8);
  EXPECT_OK(daemon_->SetLayerPolicy(p));
  p.mutable_settings()->set_beta(1e8);
  EXPECT_OK(daemon_->SetLayerPolicy(p));
}

TEST_F(DaemonControlTest,
       IntervalRankAndSelectionOutsideTheirRangesAreRefused) {
  const std::string before = State();
  v1::SetRefreshIntervalRequest k;
  for (int steps : {0, -5, 1000001, std::numeric_limits<int32_t>::max()}) {
    k.set_steps(steps);
    EXPECT_THAT(daemon_->SetRefreshInterval(k).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("K"), HasSubstr(absl::StrCat(steps)),
                               HasSubstr("[1, 1000000]"))))
        << steps;
  }
  v1::SetRankRequest r;
  for (int rank : {0, 65, std::numeric_limits<int32_t>::max()}) {
    r.set_rank(rank);
    EXPECT_THAT(daemon_->SetRank(r).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("rank"), HasSubstr("max_rank"))))
        << rank;
  }
  struct Case {
    const char* field;
    std::function<void(v1::SelectionPolicy*)> set;
  };
  const Case cases[] = {
      {"top_k", [](v1::SelectionPolicy* p) { p->set_top_k(1 << 30); }},
      {"window_steps",
       [](v1::SelectionPolicy* p) { p->set_window_steps(1 << 30); }},
      {"max_layers", [](v1::SelectionPolicy* p) { p->set_max_layers(-1); }},
      {"threshold", [](v1::SelectionPolicy* p) { p->set_threshold(1e308); }},
      {"hysteresis", [](v1::SelectionPolicy* p) { p->set_hysteresis(-2); }},
      {"max_extra_flops",
       [](v1::SelectionPolicy* p) { p->set_max_extra_flops(-1); }},
      {"min_gain", [](v1::SelectionPolicy* p) { p->set_min_gain(1.5); }},
      {"entry_gain", [](v1::SelectionPolicy* p) { p->set_entry_gain(1); }},
      {"entry_probes", [](v1::SelectionPolicy* p) { p->set_entry_probes(1); }},
      {"gain_hold", [](v1::SelectionPolicy* p) { p->set_gain_hold(0.5); }},
      {"gain_hold", [](v1::SelectionPolicy* p) { p->set_gain_hold(1001); }},
      {"warmup_steps", [](v1::SelectionPolicy* p) { p->set_warmup_steps(-1); }},
      {"plan_interval_steps",
       [](v1::SelectionPolicy* p) { p->set_plan_interval_steps(1 << 30); }},
      {"audit_window", [](v1::SelectionPolicy* p) { p->set_audit_window(0); }},
      {"audit_margin", [](v1::SelectionPolicy* p) { p->set_audit_margin(-1); }},
  };
  for (const Case& c : cases) {
    v1::SetSelectionPolicyRequest sp;
    c.set(sp.mutable_policy());
    EXPECT_THAT(
        daemon_->SetSelectionPolicy(sp).status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << c.field;
  }
  EXPECT_EQ(State(), before);
}

// Presence, not value, decides which policy fields a request sets: a
// present 0 is applied (max_layers 0 lifts the budget, min_gain 0 drops the
// guard, hysteresis 0), an absent field keeps its value (issue 14).
TEST_F(DaemonControlTest, PolicyFieldsSetToZeroAreApplied) {
  v1::SetSelectionPolicyRequest set;
  set.mutable_policy()->set_max_layers(3);
  set.mutable_policy()->set_min_gain(0.2);
  set.mutable_policy()->set_hysteresis(0.1);
  set.mutable_policy()->set_top_k(2);
  ASSERT_OK(daemon_->SetSelectionPolicy(set));
  v1::SetSelectionPolicyRequest zero;
  zero.mutable_policy()->set_max_layers(0);
  zero.mutable_policy()->set_min_gain(0);
  zero.mutable_policy()->set_hysteresis(0);
  absl::StatusOr<v1::SetSelectionPolicyResponse> r =
      daemon_->SetSelectionPolicy(zero);
  ASSERT_OK(r);
  EXPECT_EQ(r->policy().max_layers(), 0);
  EXPECT_EQ(r->policy().min_gain(), 0);
  EXPECT_EQ(r->policy().hysteresis(), 0);
  EXPECT_EQ(r->policy().top_k(), 2);  // absent: kept
  absl::StatusOr<v1::GetStatusResponse> s = daemon_->GetStatus({});
  ASSERT_OK(s);
  EXPECT_EQ(s->policy().max_layers(), 0);
  EXPECT_EQ(s->policy().top_k(), 2);
  // An empty request changes nothing and answers the policy.
  r = daemon_->SetSelectionPolicy({});
  ASSERT_OK(r);
  EXPECT_EQ(r->policy().ShortDebugString(), s->policy().ShortDebugString());
  // The plan pace and the audit rule: a present 0 turns the pace off.
  v1::SetSelectionPolicyRequest pace;
  pace.mutable_policy()->set_plan_interval_steps(0);
  pace.mutable_policy()->set_warmup_steps(0);
  pace.mutable_policy()->set_gain_hold(1.5);
  pace.mutable_policy()->set_entry_gain(0);
  pace.mutable_policy()->set_audit_window(5);
  pace.mutable_policy()->set_audit_margin(0.2);
  r = daemon_->SetSelectionPolicy(pace);
  ASSERT_OK(r);
  EXPECT_EQ(r->policy().plan_interval_steps(), 0);
  EXPECT_EQ(r->policy().warmup_steps(), 0);
  EXPECT_EQ(r->policy().gain_hold(), 1.5);
  EXPECT_EQ(r->policy().entry_gain(), 0);  // the entry level is min_gain
  EXPECT_EQ(r->policy().audit_window(), 5);
  EXPECT_EQ(r->policy().audit_margin(), 0.2);
  EXPECT_EQ(r->policy().top_k(), 2);  // absent: kept
  // A present 0 where 0 is out of range is refused, not ignored.
  v1::SetSelectionPolicyRequest bad;
  bad.mutable_policy()->set_top_k(0);
  EXPECT_THAT(daemon_->SetSelectionPolicy(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_k")));
}

// A factor that would turn the ranks' gradients into NaN or Inf never
// reaches them; the layer keeps its previous factor.
TEST_F(DaemonControlTest, NonFiniteOrUnboundedFactorsAreDropped) {
  ASSERT_OK(daemon_->OnFactor(GoodFactor(1)));
  shm::FactorData held;
  ASSERT_OK(
      shm::ReadNewestFactor(*rank_.entry(1), *rank_.data[1], nullptr, &held));
  ASSERT_EQ(held.version, 1);
  struct Case {
    const char* what;
    std::function<void(v1::PeerFactor*)> edit;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {"U", [&](v1::PeerFactor* f) { f->set_u(3, nan); }},
      {"omega", [&](v1::PeerFactor* f) { f->set_omega(0, inf); }},
      {"c", [&](v1::PeerFactor* f) { f->set_c(0, nan); }},
      {"c_inv", [&](v1::PeerFactor* f) { f->set_c_inv(1, 1e30f); }},
      {"lambda", [&](v1::PeerFactor* f) { f->set_lambda(2, -1.0f); }},
      {"sigma2", [&](v1::PeerFactor* f) { f->set_sigma2(std::nan("")); }},
      {"beta", [&](v1::PeerFactor* f) { f->set_beta(1e308); }},
      {"U", [&](v1::PeerFactor* f) { f->set_u(0, 7.0f); }},
      {"window",
       [&](v1::PeerFactor* f) {
         f->set_window(std::numeric_limits<int64_t>::min());
       }},
  };
  int64_t version = 2;
  for (const Case& c : cases) {
    v1::PublishFactorRequest bad = GoodFactor(version++);
    c.edit(bad.mutable_factor());
    EXPECT_THAT(daemon_->OnFactor(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.what)))
        << c.what;
    ASSERT_OK(
        shm::ReadNewestFactor(*rank_.entry(1), *rank_.data[1], nullptr, &held));
    EXPECT_EQ(held.version, 1) << c.what;
  }
  EXPECT_EQ(Rejected(), static_cast<double>(std::size(cases)));
  auto layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_EQ(layers->layers(1).factor_version(), 1);
  // A good one after them is published.
  ASSERT_OK(daemon_->OnFactor(GoodFactor(version)));
  ASSERT_OK(
      shm::ReadNewestFactor(*rank_.entry(1), *rank_.data[1], nullptr, &held));
  EXPECT_EQ(held.version, version);
}

// β auto (issue 15.4): a low-rank layer's policy; its factors carry tr A
// and the unclipped λ for the ranks' grid probes, and the probes' grid sums
// move the β of the layer's next factor when one β clearly wins.
TEST_F(DaemonControlTest, BetaAutoPicksTheNextFactorsBetaFromTheGridProbes) {
  const std::string before = State();
  v1::SetLayerPolicyRequest p;
  p.set_layer("fc2");
  p.mutable_settings()->set_beta_auto(true);
  p.mutable_settings()->set_beta(2);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("beta 2 and beta auto together")));
  p.mutable_settings()->set_beta(0);
  p.mutable_settings()->set_transform(v1::TRANSFORM_FULL);
  EXPECT_THAT(daemon_->SetLayerPolicy(p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("beta auto is for the low-rank transform")));
  EXPECT_EQ(State(), before);
  p.mutable_settings()->clear_transform();
  ASSERT_OK(daemon_->SetLayerPolicy(p));
  auto layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  const v1::LayerStatus& l = layers->layers(1);
  EXPECT_TRUE(l.settings().beta_auto());
  EXPECT_EQ(l.settings().beta(), 1.0);  // where auto starts
  EXPECT_THAT(l.beta_grid(), ::testing::ElementsAre(0.3, 1.0, 3.0));
  EXPECT_FALSE(layers->layers(0).settings().beta_auto());

  // A factor for the grid reaches the rank's slot with its trace and flag.
  v1::PublishFactorRequest f = GoodFactor(1);
  f.mutable_factor()->set_trace_mean(96);
  f.mutable_factor()->set_beta_auto(true);
  ASSERT_OK(daemon_->OnFactor(f));
  shm::FactorData held;
  ASSERT_OK(
      shm::ReadNewestFactor(*rank_.entry(1), *rank_.data[1], nullptr, &held));
  EXPECT_TRUE(held.beta_auto);
  EXPECT_EQ(held.trace_mean, 96);
  // beta_auto without a trace is refused like any factor out of bounds.
  f = GoodFactor(2);
  f.mutable_factor()->set_beta_auto(true);
  EXPECT_THAT(daemon_->OnFactor(f), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("trace_mean")));

  // The rank's probes: β = 3 clearly beats the factor in use (0.030 vs
  // 0.040), β = 0.3 is worse.
  shm::LayerCounters c{};
  auto report = [&](int64_t probes) {
    c.steps += 10 * probes;
    c.n += 768 * 10 * probes;
    c.probes += probes;
    c.probe_euclid_sum += 0.05 * probes;
    c.probe_gift_sum += 0.04 * probes;
    c.probe_version = 1;
    c.version_probes += probes;
    c.beta_probes += probes;
    c.probe_beta_sum[0] += 0.045 * probes;
    c.probe_beta_sum[1] += 0.04 * probes;
    c.probe_beta_sum[2] += 0.03 * probes;
    c.factor_version = 1;
    shm::WriteTelemetry(rank_.entry(1), c);
    daemon_->PollOnce();
  };
  report(1);  // too few probe steps to move β
  report(1);
  layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_EQ(layers->layers(1).settings().beta(), 1.0);
  EXPECT_EQ(layers->layers(1).beta_probes(), 2);
  report(1);
  layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  const v1::LayerStatus& m = layers->layers(1);
  EXPECT_EQ(m.settings().beta(), 3.0);
  EXPECT_TRUE(m.settings().beta_auto());
  EXPECT_EQ(m.factor_beta(), 1.0);  // the newest factor: still β = 1
  EXPECT_NEAR(m.probe_gift_rel_l2(), 0.04, 1e-12);
  ASSERT_EQ(m.beta_grid_rel_l2_size(), 3);
  EXPECT_NEAR(m.beta_grid_rel_l2(2), 0.03, 1e-12);
  EXPECT_EQ(m.beta_probes(), 3);
  // A β of its own ends auto.
  v1::SetLayerPolicyRequest fixed;
  fixed.set_layer("fc2");
  fixed.mutable_settings()->set_beta(0.5);
  ASSERT_OK(daemon_->SetLayerPolicy(fixed));
  layers = daemon_->ListLayers({});
  ASSERT_OK(layers);
  EXPECT_FALSE(layers->layers(1).settings().beta_auto());
  EXPECT_EQ(layers->layers(1).settings().beta(), 0.5);
}

// Probation counts a version's probe steps, not its reports: one probe step
// whose two ranks' telemetry reaches giftd in two polls (one rank wrote it
// before the poll, the other after) is one probe step, and the layer stays
// on probation until the next (CI, 2026-12-07: a layer entered the GIFT
// path on one probe step, counted once per rank).
TEST_F(DaemonControlTest, AProbeStepPolledOnEitherSideCountsOnce) {
  auto d = Daemon::Create(TestDaemonConfig("ctest2"), &registry_);
  ASSERT_OK(d);
  FakeRank ranks[2];
  for (int r = 0; r < 2; ++r) {
    auto resp = (*d)->Register(Request(r, /*world=*/2));
    ASSERT_OK(resp);
    ranks[r] = FakeRank::Map(*resp);
  }
  ASSERT_OK((*d)->OnFactor(GoodFactor(1)));
  shm::LayerCounters c[2] = {};
  // Rank `r`'s probe step `k` of fc2's v1, gaining 0.5, in 10 steps with
  // boundary hits (so that fc2 is a candidate).
  auto probe_step = [&](int r, int k) {
    shm::LayerCounters& x = c[r];
    x.steps = 10 * k;
    x.n = 768 * 10 * k;
    x.upper = 100 * k;
    x.probes = x.version_probes = k;
    x.probe_version = 1;
    x.probe_euclid_sum = 0.05 * k;
    x.probe_gift_sum = 0.025 * k;
    x.factor_version = 1;
    shm::WriteTelemetry(ranks[r].entry(1), x);
  };
  auto fc2 = [&] {
    auto layers = (*d)->ListLayers({});
    EXPECT_OK(layers);
    return layers.ok() ? layers->layers(1) : v1::LayerStatus();
  };
  probe_step(0, 1);
  (*d)->PollOnce();
  probe_step(1, 1);
  (*d)->PollOnce();
  EXPECT_FALSE(fc2().selected());
  EXPECT_THAT(fc2().reason(), HasSubstr("factor v1 on probation (1 of 2"));
  probe_step(0, 2);
  probe_step(1, 2);
  (*d)->PollOnce();
  EXPECT_TRUE(fc2().selected()) << fc2().reason();
  EXPECT_THAT(fc2().reason(), HasSubstr("(2 probe steps"));
}

}  // namespace
}  // namespace gift::daemon
