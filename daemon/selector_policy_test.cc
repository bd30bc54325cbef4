// SelectorPolicy (selector_policy.h): its check names the bad field, and the
// kind names read back.
#include "daemon/selector_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/status_matchers.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SelectorPolicyTest, DefaultsAreValid) {
  EXPECT_OK(SelectorPolicy{}.Validate());
}

TEST(SelectorPolicyTest, ValidateNamesTheBadField) {
  auto check = [](auto mutate, const std::string& message) {
    SelectorPolicy p;
    mutate(p);
    absl::Status s = p.Validate();
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  };
  check([](auto& p) { p.top_k = 0; }, "selection.top_k must be >= 1 (got 0)");
  check([](auto& p) { p.threshold = 1.5; }, "selection.threshold");
  check([](auto& p) { p.threshold = NAN; }, "selection.threshold");
  check([](auto& p) { p.hysteresis = 1; }, "selection.hysteresis");
  check([](auto& p) { p.hysteresis = -0.1; }, "selection.hysteresis");
  check([](auto& p) { p.window_steps = 0; }, "selection.window_steps");
  check([](auto& p) { p.max_layers = -1; }, "selection.max_layers");
  check([](auto& p) { p.max_extra_flops = -1; }, "selection.max_extra_flops");
  check([](auto& p) { p.min_gain = 1; }, "selection.min_gain");
  check([](auto& p) { p.entry_gain = 1; }, "selection.entry_gain");
  check([](auto& p) { p.entry_gain = -0.1; }, "selection.entry_gain");
  check([](auto& p) { p.entry_probes = 1; }, "selection.entry_probes");
  check([](auto& p) { p.entry_probes = 101; }, "selection.entry_probes");
  check([](auto& p) { p.gain_hold = 0.5; }, "selection.gain_hold");
  check([](auto& p) { p.gain_hold = NAN; }, "selection.gain_hold");
  check([](auto& p) { p.warmup_steps = -1; }, "selection.warmup_steps");
  check([](auto& p) { p.plan_interval_steps = -1; },
        "selection.plan_interval_steps");
  check([](auto& p) { p.plan_interval_steps = 2000000; },
        "selection.plan_interval_steps");
  check([](auto& p) { p.audit_window = 0; }, "selection.audit_window");
  check([](auto& p) { p.audit_margin = -0.1; }, "selection.audit_margin");
  check([](auto& p) { p.audit_margin = NAN; }, "selection.audit_margin");
  check([](auto& p) { p.kind = static_cast<SelectionKind>(7); },
        "selection.kind");
}

TEST(SelectorPolicyTest, KindNamesRoundTrip) {
  for (SelectionKind k : {SelectionKind::kTopK, SelectionKind::kElbow,
                          SelectionKind::kThreshold}) {
    auto parsed = ParseSelectionKind(SelectionKindName(k));
    ASSERT_OK(parsed.status());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_STREQ(SelectionKindName(SelectionKind::kTopK), "top-k");
  EXPECT_THAT(ParseSelectionKind("topk"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Validate reads the schema: each member is its field, takes the default,
// accepts both bounds and refuses just outside them.
TEST(SelectorPolicyTest, ValidateFollowsTheSchema) {
  const SelectorPolicy defaults;
  ASSERT_EQ(PolicyMembers().size(), kPolicyFields.size());
  for (size_t i = 0; i < kPolicyFields.size(); ++i) {
    const PolicyMember& m = PolicyMembers()[i];
    const PolicyField& f = kPolicyFields[i];
    ASSERT_EQ(std::string(m.field->name), f.name);
    const bool is_int = f.type == PolicyField::Type::kInt;
    ASSERT_EQ(m.int_member != nullptr, is_int) << f.name;
    ASSERT_EQ(m.double_member != nullptr, !is_int) << f.name;
    EXPECT_EQ(m.Get(defaults), f.default_value) << f.name;
    auto with = [&m](double v) {
      SelectorPolicy p;
      if (m.int_member != nullptr) {
        p.*m.int_member = static_cast<int>(v);
      } else {
        p.*m.double_member = v;
      }
      return p.Validate();
    };
    const std::string field = std::string("selection.") + f.name + " must be";
    EXPECT_OK(with(f.min)) << f.name;
    const double below = is_int ? f.min - 1 : f.min - 0.5;
    EXPECT_THAT(std::string(with(below).message()), HasSubstr(field));
    if (f.HasMax()) {
      if (!f.max_open) {
        EXPECT_OK(with(f.max)) << f.name;
      }
      const double above = f.max_open ? f.max : f.max + 1;
      EXPECT_THAT(std::string(with(above).message()),
                  HasSubstr(field + " in " + PolicyRangeText(f)));
    }
  }
}

}  // namespace
}  // namespace gift::daemon
