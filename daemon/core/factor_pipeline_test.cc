#include "daemon/core/factor_pipeline.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

JobLayer Layer(int64_t d_in, int32_t r_cap, int32_t k_cap) {
  JobLayer l;
  l.name = "fc1";
  l.d_out = 16;
  l.d_in = d_in;
  l.r_cap = r_cap;
  l.k_cap = k_cap;
  return l;
}

// A low-rank factor of rank r for `l`, seeded values (never zeros).
shm::FactorData LowRank(const JobLayer& l, int r) {
  shm::FactorData f;
  f.version = 3;
  f.kind = 0;
  f.r = r;
  f.sigma2 = 0.5;
  f.beta = 0.75;
  f.window = 40;
  f.trace_mean = 1.25;
  f.beta_auto = true;
  for (int64_t i = 0; i < l.d_in * r; ++i) f.u.push_back(0.01f * (i + 1));
  for (int i = 0; i < r; ++i) {
    f.c.push_back(1.0f + i);
    f.c_inv.push_back(1.0f / (1.0f + i));
    f.lambda.push_back(2.0f + i);
  }
  for (int64_t i = 0; i < l.d_in * l.k_cap; ++i) f.omega.push_back(-0.5f + i);
  return f;
}

TEST(FactorPipelineTest, AFactorCrossesThePeersUnchanged) {
  const JobLayer l = Layer(8, 4, 6);
  const shm::FactorData f = LowRank(l, 3);
  const v1::PublishFactorRequest m =
      FactorToMessage("job", "n1", 7, l, f, 0.02);
  EXPECT_EQ(m.job_id(), "job");
  EXPECT_EQ(m.owner(), "n1");
  EXPECT_EQ(m.term(), 7);
  EXPECT_EQ(m.factor().layer(), "fc1");
  EXPECT_DOUBLE_EQ(m.factor().seconds(), 0.02);
  absl::StatusOr<std::unique_ptr<shm::FactorData>> back =
      FactorFromMessage(l, m);
  ASSERT_OK(back);
  const shm::FactorData& g = **back;
  EXPECT_EQ(g.version, f.version);
  EXPECT_EQ(g.kind, f.kind);
  EXPECT_EQ(g.r, f.r);
  EXPECT_EQ(g.sigma2, f.sigma2);
  EXPECT_EQ(g.beta, f.beta);
  EXPECT_EQ(g.window, f.window);
  EXPECT_EQ(g.trace_mean, f.trace_mean);
  EXPECT_EQ(g.beta_auto, f.beta_auto);
  EXPECT_EQ(g.u, f.u);
  EXPECT_EQ(g.c, f.c);
  EXPECT_EQ(g.c_inv, f.c_inv);
  EXPECT_EQ(g.lambda, f.lambda);
  EXPECT_EQ(g.omega, f.omega);
  EXPECT_TRUE(g.t.empty());
}

TEST(FactorPipelineTest, APeersFactorIsCheckedLikeARanksSlot) {
  const JobLayer l = Layer(8, 4, 6);
  v1::PublishFactorRequest m =
      FactorToMessage("job", "n1", 1, l, LowRank(l, 3), 0);
  v1::PublishFactorRequest bad = m;
  bad.mutable_factor()->set_r(5);  // above r_cap
  EXPECT_THAT(
      FactorFromMessage(l, bad),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("r 5 (r_cap 4)")));
  bad = m;
  bad.mutable_factor()->set_version(0);
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad = m;
  bad.mutable_factor()->mutable_u()->RemoveLast();
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("U has 23 values, expected 24")));
  bad = m;
  bad.mutable_factor()->add_omega(1.0f);
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("omega has 49 values, expected 48")));
  bad = m;
  bad.mutable_factor()->set_kind(1);  // full: T and T_inv are d_in²
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("T has 0 values, expected 64")));
}

// A layer with d_in 8, r_cap 4 and k_cap 6 whose Ω₀ differs from every
// LowRank() factor's Ω and U.
JobLayer LayerWithOmega0() {
  JobLayer l = Layer(8, 4, 6);
  for (int64_t i = 0; i < l.d_in * l.k_cap; ++i) {
    l.omega0.push_back(0.25f - 0.01f * i);
  }
  return l;
}

// f's Ω crosses the peers as columns u_cols..cols, and the receiver
// rebuilds it bit for bit.
void ExpectOmegaTravels(const JobLayer& l, const shm::FactorData& f, int cols,
                        int u_cols) {
  const v1::PublishFactorRequest m = FactorToMessage("job", "n1", 1, l, f, 0);
  EXPECT_EQ(m.factor().omega_cols(), cols);
  EXPECT_EQ(m.factor().omega_u_cols(), u_cols);
  EXPECT_EQ(m.factor().omega_size(), l.d_in * (cols - u_cols));
  absl::StatusOr<std::unique_ptr<shm::FactorData>> back =
      FactorFromMessage(l, m);
  ASSERT_OK(back);
  EXPECT_EQ((*back)->omega, f.omega);
}

// Ω is built r + p wide and kept k_cap wide with Ω₀'s columns after it
// (FactorOf): only the columns before Ω₀'s travel, and the receiver, which
// holds the same Ω₀, completes the same bytes.
TEST(FactorPipelineTest, OnlyTheColumnsBeforeOmega0Travel) {
  const JobLayer l = LayerWithOmega0();
  shm::FactorData f = LowRank(l, 3);
  f.omega = shm::ColumnsThenRest(shm::FirstColumns(f.omega, 8, 6, 4), l.omega0,
                                 8, 6, 4);
  ExpectOmegaTravels(l, f, 4, 0);
  {
    SCOPED_TRACE("column 2 equal to Ω₀'s before a column 3 that is not");
    for (int64_t i = 0; i < l.d_in; ++i) {
      f.omega[i * 6 + 2] = l.omega0[i * 6 + 2];
    }
    ExpectOmegaTravels(l, f, 4, 0);
  }
  {
    SCOPED_TRACE("column 3 equal to Ω₀'s but in one row");
    for (int64_t i = 0; i < l.d_in; ++i) {
      f.omega[i * 6 + 3] = l.omega0[i * 6 + 3];
    }
    f.omega[5 * 6 + 3] = 2.0f;
    ExpectOmegaTravels(l, f, 4, 0);
  }
  {
    SCOPED_TRACE("columns 2.. all Ω₀'s");
    f.omega[5 * 6 + 3] = l.omega0[5 * 6 + 3];
    ExpectOmegaTravels(l, f, 2, 0);
  }
  {
    SCOPED_TRACE("Ω₀ itself (a full factor's basis) sends nothing");
    f.omega = l.omega0;
    ExpectOmegaTravels(l, f, 0, 0);
  }
}

// Ω = [U | new columns | Ω₀'s] (FinishLowRank, FactorOf): U's columns do
// not travel twice, and the receiver rebuilds the same bytes from the U it
// gets in the same message.
TEST(FactorPipelineTest, OmegasLeadingUColumnsTravelOnlyAsU) {
  const JobLayer l = LayerWithOmega0();
  shm::FactorData f = LowRank(l, 3);
  const std::vector<float> built = shm::SideBySide(
      f.u, 3, shm::ColumnRange(f.omega, 8, 6, 3, 4), 1, 8);  // [U | 1 new]
  f.omega = shm::ColumnsThenRest(built, l.omega0, 8, 6, 4);
  ExpectOmegaTravels(l, f, 4, 3);
  {
    SCOPED_TRACE("U's column 1 differs from Ω's in one row, by one ulp");
    f.omega[6 * 6 + 1] = std::nextafter(f.omega[6 * 6 + 1], 1.0f);
    ExpectOmegaTravels(l, f, 4, 1);
  }
  {
    SCOPED_TRACE("never more of U than Ω sends: Ω = [U | Ω₀'s columns 2..]");
    f.omega = shm::ColumnsThenRest(f.u, l.omega0, 8, 6, 3);
    for (int64_t i = 0; i < l.d_in; ++i) {
      f.omega[i * 6 + 2] = l.omega0[i * 6 + 2];
    }
    ExpectOmegaTravels(l, f, 2, 2);
  }
}

TEST(FactorPipelineTest, APeersOmegaColumnsAreChecked) {
  JobLayer l = Layer(8, 4, 6);
  l.omega0.assign(static_cast<size_t>(l.d_in * l.k_cap), 0.5f);
  shm::FactorData f = LowRank(l, 3);
  f.omega = shm::ColumnsThenRest(shm::FirstColumns(f.omega, 8, 6, 3), l.omega0,
                                 8, 6, 3);
  const v1::PublishFactorRequest m = FactorToMessage("job", "n1", 1, l, f, 0);
  ASSERT_EQ(m.factor().omega_cols(), 3);
  v1::PublishFactorRequest bad = m;
  bad.mutable_factor()->set_omega_cols(7);
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("omega_cols 7 (0..k_cap 6)")));
  bad.mutable_factor()->set_omega_cols(-1);
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad.mutable_factor()->set_omega_cols(4);  // 24 values, not 32
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("omega has 24 values, expected 32")));
  // omega_u_cols: at most r and omega_cols, and the columns sent are the
  // others.
  bad = m;
  bad.mutable_factor()->set_omega_u_cols(4);  // r 3
  EXPECT_THAT(
      FactorFromMessage(l, bad),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("omega_u_cols 4 (0..min(omega_cols 3, r 3))")));
  bad.mutable_factor()->set_omega_u_cols(-1);
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad.mutable_factor()->set_omega_cols(1);
  bad.mutable_factor()->set_omega_u_cols(2);  // more than Ω sends
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("omega_u_cols 2")));
  bad = m;
  bad.mutable_factor()->set_omega_u_cols(1);  // 24 values, not 16
  EXPECT_THAT(FactorFromMessage(l, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("omega has 24 values, expected 16")));
  // A layer without Ω₀ (no local rank yet) cannot complete the columns.
  JobLayer bare = Layer(8, 4, 6);
  EXPECT_THAT(
      FactorFromMessage(bare, m),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no Ω₀")));
}

}  // namespace
}  // namespace gift::daemon
