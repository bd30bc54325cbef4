// Test helpers of the layer selector's tests (selector_test.cc,
// selector_stages_test.cc, selector_pace_test.cc): samples of a given
// vulnerability and gain, the policy before the plan pace, and fixtures with
// a selector of n layers. Test-only.
//
//   TEST_F(SelectorTest, X) { Make(Classic(), 3); Feed({0.3, 0.2, 0.1}); }
//
// Thread safety: as LayerSelector, not thread-safe.
#ifndef GIFT_DAEMON_SELECTOR_TESTING_H_
#define GIFT_DAEMON_SELECTOR_TESTING_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "daemon/selector.h"

namespace gift::daemon {

// Probe steps that judge a factor version for a newcomer and a layer on the
// path alike under the default policy (entry_probes).
inline constexpr int64_t kJudgedProbes =
    PolicyDefault<int>(policy_field::kEntryProbes);

// `steps` steps of a layer whose vulnerability is `v`, plus `probes` probes
// measuring gain `gain` (none when probes == 0).
inline SelectorSample Sample(double v, int64_t steps = 10, int64_t probes = 0,
                             double gain = 0, int64_t version = -1) {
  SelectorSample s;
  s.steps = steps;
  s.n = 100000 * steps;
  s.upper = static_cast<int64_t>(std::llround(v * s.n * 0.25));
  s.lower = static_cast<int64_t>(std::llround(v * s.n)) - s.upper;
  s.probes = probes;
  s.probe_euclid_sum = 0.05 * probes;
  s.probe_gift_sum = 0.05 * probes * (1 - gain);
  s.factor_version = version;
  s.probe_version = version;  // probes of the newest version
  s.version_probes = probes;  // by one rank, all of them so far
  return s;
}

// The rules before the plan pace and gain_hold: most tests check one rule
// each and feed a window per Decide, which the pace would hold.
inline SelectorPolicy Classic() {
  SelectorPolicy p;
  p.plan_interval_steps = 0;
  p.gain_hold = 1;
  p.entry_gain = 0;  // newcomers enter at min_gain, as the tests were written
  return p;
}

// One rank's count of each layer's probes by version, which samples carry
// (SelectorSample::version_probes): Count(layer, s) is `s` as that rank
// reports it when s.probes are its next probes.
class RankProbeCounts {
 public:
  SelectorSample Count(const std::string& layer, SelectorSample s) {
    if (s.probes > 0 && s.probe_version >= 0) {
      s.version_probes = counts_[{layer, s.probe_version}] += s.probes;
    }
    return s;
  }

 private:
  std::map<std::pair<std::string, int64_t>, int64_t> counts_;
};

class SelectorTest : public ::testing::Test {
 protected:
  // Layers "l0".."l{n-1}", 128 × 128.
  void Make(const SelectorPolicy& policy, int n) {
    selector_ = std::make_unique<LayerSelector>(policy);
    probes_ = {};
    for (int i = 0; i < n; ++i) {
      ASSERT_OK(selector_->AddLayer({Name(i), 128, 128}));
    }
  }
  static std::string Name(int i) { return "l" + std::to_string(i); }
  // Feeds one window (window_steps in one sample) of scores, all with a
  // gain of `gain` measured on kJudgedProbes probes.
  void Feed(const std::vector<double>& scores, double gain = 0.5) {
    const int w = selector_->policy().window_steps;
    for (size_t i = 0; i < scores.size(); ++i) {
      ASSERT_OK(Observe(Name(i), Sample(scores[i], w, kJudgedProbes, gain)));
    }
  }
  SelectionDecision Decide() { return selector_->Decide(settings_); }
  // Feeds `s` to `layer` as one rank's probes reach the selector.
  absl::Status Observe(const std::string& layer, const SelectorSample& s) {
    return selector_->Observe(layer, probes_.Count(layer, s));
  }

  std::unique_ptr<LayerSelector> selector_;
  std::map<std::string, SelectorSettings> settings_;
  RankProbeCounts probes_;
};

// `s` with `ranks` ranks' audits of one step on `path`, each RelL2 `rel`.
inline SelectorSample WithAudit(SelectorSample s, bool gift, double rel,
                                int ranks = 2) {
  (gift ? s.audits_gift : s.audits_euclid) += ranks;
  (gift ? s.audit_gift_rel_l2_sum : s.audit_euclid_rel_l2_sum) += ranks * rel;
  return s;
}

class AuditTest : public SelectorTest {
 protected:
  // One layer, top-1, no pace: l0 selected on a probe gain of 0.5 (probe
  // Euclidean RelL2 0.05, Sample()).
  void SetUp() override {
    SelectorPolicy p = Classic();
    p.top_k = 1;
    Make(p, 1);
    Step();
    ASSERT_THAT(Decide().selected, ::testing::ElementsAre("l0"));
  }
  // 50 steps (one window) with a gain of `gain`, factor `version`, and the
  // given audit (none when rel < 0).
  SelectionDecision Step(double gain = 0.5, bool gift = true, double rel = -1,
                         int64_t version = 1) {
    SelectorSample s = Sample(0.2, 50, 5, gain, version);
    if (rel >= 0) s = WithAudit(s, gift, rel);
    EXPECT_OK(Observe("l0", s));
    return Decide();
  }
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_SELECTOR_TESTING_H_
