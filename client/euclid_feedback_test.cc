// Euclidean error feedback of AllReduceEngine (options.euclid_error_feedback):
// the running sum of the applied gradients tracks the sum of the true means
// with it and drifts without it (Gaussian gradients, 4 thread ranks, each
// format; the figures are printed), the checkpoint carries its residuals,
// and a layer that changes format or path hands its residual over exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using kernels::Fp4Format;
using kernels::Fp8Format;
using kernels::WireFormat;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr int64_t kRows = 64, kCols = 128, kN = kRows * kCols;

EpochPlan OneLayer(int64_t epoch, WireFormat f,
                   LayerPath path = LayerPath::kEuclid) {
  return *EpochPlan::Create(epoch, kN,
                            {{.name = "fc",
                              .shape = {kRows, kCols},
                              .offset = 0,
                              .path = path,
                              .format = f}});
}

// Rank p's gradient at step t: a persistent per-element mean (the signal a
// training run accumulates) plus Gaussian noise of the same size.
std::vector<float> Gradient(int p, int t) {
  std::vector<float> g(kN);
  for (int64_t i = 0; i < kN; ++i) {
    g[i] = SyntheticGaussian(7, i) + SyntheticGaussian(100 * t + p + 11, i);
  }
  return g;
}

struct DriftResult {
  double drift = 0;        // ‖Σ applied − Σ mean‖ / ‖Σ mean‖
  double mean_rel_l2 = 0;  // per step ‖applied − mean‖ / ‖mean‖, averaged
};

// `steps` steps of the format on kWorld ranks; the figures are rank 0's
// (every rank applies the same bits).
DriftResult Drift(WireFormat f, EuclidFeedback ef, int steps) {
  DriftResult r;
  absl::Mutex mu;
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.euclid_error_feedback = ef;
    auto ar = AllReduceEngine::Create(&comm, OneLayer(1, f), o);
    ASSERT_OK(ar);
    std::vector<double> sum_out(kN, 0.0), sum_mean(kN, 0.0);
    double rel = 0;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t);
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), nullptr));
      std::vector<double> mean(kN, 0.0);
      for (int p = 0; p < kWorld; ++p) {
        const std::vector<float> g = Gradient(p, t);
        for (int64_t i = 0; i < kN; ++i) mean[i] += g[i] / double(kWorld);
      }
      double err = 0, ref = 0;
      for (int64_t i = 0; i < kN; ++i) {
        sum_out[i] += x[i];
        sum_mean[i] += mean[i];
        err += (x[i] - mean[i]) * (x[i] - mean[i]);
        ref += mean[i] * mean[i];
      }
      rel += std::sqrt(err / ref) / steps;
    }
    if (comm.rank() != 0) return;
    double err = 0, ref = 0;
    for (int64_t i = 0; i < kN; ++i) {
      err += (sum_out[i] - sum_mean[i]) * (sum_out[i] - sum_mean[i]);
      ref += sum_mean[i] * sum_mean[i];
    }
    absl::MutexLock lock(&mu);
    r.drift = std::sqrt(err / ref);
    r.mean_rel_l2 = rel;
  });
  return r;
}

TEST(EuclidFeedbackTest, RunningSumTracksTheTrueMeansOnlyWithFeedback) {
  constexpr int kSteps = 40;
  double rel_e4m3 = 0;
  for (WireFormat f :
       {WireFormat(Fp8Format::kE4M3), WireFormat(Fp4Format::kNvfp4),
        WireFormat(Fp4Format::kMxfp4)}) {
    const DriftResult on = Drift(f, EuclidFeedback::kOn, kSteps);
    const DriftResult off = Drift(f, EuclidFeedback::kOff, kSteps);
    std::cout << kernels::WireFormatName(f) << " W=" << kWorld << " " << kSteps
              << " steps: RelL2 per step " << off.mean_rel_l2 << " (EF "
              << on.mean_rel_l2 << "), drift of the running sum " << off.drift
              << " (EF " << on.drift << ")" << std::endl;
    EXPECT_GT(off.drift, 0.0);
    EXPECT_LT(3 * on.drift, off.drift) << kernels::WireFormatName(f);
    if (f == Fp8Format::kE4M3) {
      rel_e4m3 = off.mean_rel_l2;
    } else {
      EXPECT_GT(off.mean_rel_l2, 2 * rel_e4m3);  // 4 bits err more than 8
    }
  }
}

TEST(EuclidFeedbackTest, DefaultIsOnForFourBitLayersOnly) {
  // Identical bits: auto = on for nvfp4, auto = off for e4m3.
  for (WireFormat f :
       {WireFormat(Fp4Format::kNvfp4), WireFormat(Fp8Format::kE4M3)}) {
    const DriftResult a = Drift(f, EuclidFeedback::kAuto, 3);
    const DriftResult b =
        Drift(f, f.is_fp4() ? EuclidFeedback::kOn : EuclidFeedback::kOff, 3);
    EXPECT_EQ(a.drift, b.drift) << kernels::WireFormatName(f);
    EXPECT_EQ(a.mean_rel_l2, b.mean_rel_l2);
  }
}

TEST(EuclidFeedbackTest, NamesAndOptionsAgreedAcrossRanks) {
  EXPECT_EQ(*ParseEuclidFeedback("ON"), EuclidFeedback::kOn);
  EXPECT_EQ(EuclidFeedbackName(EuclidFeedback::kAuto), "auto");
  EXPECT_THAT(ParseEuclidFeedback("maybe"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  RunThreadRanks(2, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.euclid_error_feedback =
        comm.rank() == 0 ? EuclidFeedback::kAuto : EuclidFeedback::kOn;
    auto ar = AllReduceEngine::Create(&comm, OneLayer(1, Fp4Format::kNvfp4), o);
    EXPECT_THAT(ar, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(ar.status().message(), HasSubstr("euclid_error_feedback"));
    o.euclid_error_feedback = static_cast<EuclidFeedback>(5);
    EXPECT_THAT(
        AllReduceEngine::Create(&comm, OneLayer(1, Fp8Format::kE4M3), o),
        StatusIs(absl::StatusCode::kInvalidArgument));
  });
}

TEST(EuclidFeedbackTest, CheckpointCarriesTheResiduals) {
  RunThreadRanks(2, [](Transport& comm) {
    const EpochPlan plan = OneLayer(1, Fp4Format::kMxfp4);
    auto ar = AllReduceEngine::Create(&comm, plan, {});
    ASSERT_OK(ar);
    for (int t = 0; t < 3; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t);
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), nullptr));
    }
    absl::StatusOr<AllReduceState> state = (*ar)->ExportState();
    ASSERT_OK(state);
    ASSERT_EQ(state->euclid_layers.size(), 1u);
    EXPECT_EQ(state->euclid_layers[0].name, "fc");
    EXPECT_EQ(state->euclid_layers[0].residual.size(), size_t{kN});
    EXPECT_TRUE(state->euclid_layers[0].owner_live);
    ASSERT_EQ(state->owner_residuals.size(), 1u);
    std::vector<float> want = Gradient(comm.rank(), 3);
    const std::vector<float> next = want;
    ASSERT_OK((*ar)->Run(want.data(), VersionedFactors(), nullptr));

    auto restored = AllReduceEngine::Create(&comm, plan, {});
    ASSERT_OK(restored);
    ASSERT_OK((*restored)->ImportState(*state));
    std::vector<float> got = next;
    ASSERT_OK((*restored)->Run(got.data(), VersionedFactors(), nullptr));
    EXPECT_EQ(got, want);

    // A state from before Euclidean feedback (none) still loads: the
    // residuals restart at zero, so the step differs.
    AllReduceState old = *state;
    old.euclid_layers.clear();
    auto legacy = AllReduceEngine::Create(&comm, plan, {});
    ASSERT_OK(legacy);
    ASSERT_OK((*legacy)->ImportState(old));
    std::vector<float> cold = next;
    ASSERT_OK((*legacy)->Run(cold.data(), VersionedFactors(), nullptr));
    EXPECT_NE(cold, want);

    AllReduceState bad = *state;
    bad.euclid_layers[0].residual.resize(5);
    EXPECT_THAT((*legacy)->ImportState(bad),
                StatusIs(absl::StatusCode::kInvalidArgument));
  });
}

// A layer with a Euclidean residual whose next epoch is (a) FP8, where the
// default turns its feedback off, or (b) the GIFT path with an agreed
// factor: that step adds the residual to the gradient and drops it, so the
// step equals that of an engine holding only the owner-side state (which a
// new epoch keeps: unused in (a), whitened in (b)) given x + r.
TEST(EuclidFeedbackTest, FormatOrPathChangeHandsTheResidualOver) {
  struct Case {
    WireFormat format;
    LayerPath path;
  };
  for (const Case& c : {Case{Fp8Format::kE4M3, LayerPath::kEuclid},
                        Case{Fp4Format::kNvfp4, LayerPath::kGift}}) {
    RunThreadRanks(2, [&](Transport& comm) {
      VersionedFactors f;
      ASSERT_OK(f.Put("fc", SyntheticLowRank(1, kCols, 8, 3)));
      auto ar =
          AllReduceEngine::Create(&comm, OneLayer(1, Fp4Format::kNvfp4), {});
      ASSERT_OK(ar);
      for (int t = 0; t < 2; ++t) {
        std::vector<float> x = Gradient(comm.rank(), t);
        ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
      }
      absl::StatusOr<AllReduceState> before = (*ar)->ExportState();
      ASSERT_OK(before);
      ASSERT_EQ(before->euclid_layers.size(), 1u);
      const std::vector<float>& r = before->euclid_layers[0].residual;
      const EpochPlan next = OneLayer(2, c.format, c.path);
      ASSERT_OK((*ar)->AddPlan(next));
      std::vector<float> got = Gradient(comm.rank(), 2);
      std::vector<float> want = got;
      for (int64_t i = 0; i < kN; ++i) want[i] = want[i] + r[i];
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(got.data(), f, &t));
      EXPECT_EQ(t.plan_epoch, 2);
      EXPECT_EQ(t.layers[0].path, c.path);
      AllReduceState owner_only = *before;
      owner_only.euclid_layers[0].residual.clear();
      auto other =
          AllReduceEngine::Create(&comm, OneLayer(1, Fp4Format::kNvfp4), {});
      ASSERT_OK(other);
      ASSERT_OK((*other)->ImportState(owner_only));
      ASSERT_OK((*other)->AddPlan(next));
      ASSERT_OK((*other)->Run(want.data(), f, nullptr));
      EXPECT_EQ(got, want);
      absl::StatusOr<AllReduceState> after = (*ar)->ExportState();
      ASSERT_OK(after);
      EXPECT_TRUE(after->euclid_layers.empty());
    });
  }
}

}  // namespace
}  // namespace gift::client
