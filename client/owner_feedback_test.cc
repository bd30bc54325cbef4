// The owner side of GIFT error feedback across factor version switches
// (AllReduceEngine with error_feedback, Fp8Round::Reduce): at a switch the
// chunk owner's residual is reprojected into the new factor's coordinates
// (whole rows), like the worker residual, instead of being zeroed. Then the
// running sum of the applied gradients stays within about one step's error
// of the exact running sum however many switches there are; zeroing it
// dropped one step's owner-side error at every switch, so the drift grew
// with the number of switches. The figures are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using kernels::Fp4Format;

constexpr int kWorld = 4;

EpochPlan OneGiftLayer(int64_t rows, int64_t cols, int64_t epoch = 1,
                       LayerPath path = LayerPath::kGift) {
  return *EpochPlan::Create(epoch, rows * cols,
                            {{.name = "fc",
                              .shape = {rows, cols},
                              .offset = 0,
                              .path = path,
                              .format = Fp4Format::kNvfp4}});
}

// Rank p's gradient at step t: a constant per rank plus a slowly varying
// part, so the running sum grows and the owner residual stays large.
std::vector<float> Gradient(int p, int t, int64_t n) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = SyntheticGaussian(7 + p, i) +
           0.1f * SyntheticGaussian(1000 * (t / 10) + p + 11, i);
  }
  return g;
}

struct Drift {
  double drift = 0;     // ‖Σ applied − Σ mean‖ (absolute)
  double per_step = 0;  // ‖applied − mean‖, averaged over the steps
  bool same_on_every_rank = true;
};

// One rank's running sums over `steps` steps of n elements: of what the
// engine applied and of the exact mean of every rank's Gradient.
class DriftMeter {
 public:
  DriftMeter(int64_t n, int steps)
      : sum_out_(n, 0.0), sum_mean_(n, 0.0), steps_(steps) {}

  // After step t: `out`, the gradient the engine applied.
  void Add(int t, const std::vector<float>& out) {
    const int64_t n = sum_out_.size();
    std::vector<double> mean(n, 0.0);
    for (int p = 0; p < kWorld; ++p) {
      const std::vector<float> g = Gradient(p, t, n);
      for (int64_t i = 0; i < n; ++i) mean[i] += g[i] / double(kWorld);
    }
    double err = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum_out_[i] += out[i];
      sum_mean_[i] += mean[i];
      err += (out[i] - mean[i]) * (out[i] - mean[i]);
    }
    per_step_ += std::sqrt(err) / steps_;
    last_ = out;
  }

  // Rank 0's figures from every rank's meter (indexed by rank).
  static Drift Figures(const std::vector<DriftMeter>& ranks) {
    const DriftMeter& m = ranks[0];
    Drift r;
    double err = 0;
    for (size_t i = 0; i < m.sum_out_.size(); ++i) {
      err +=
          (m.sum_out_[i] - m.sum_mean_[i]) * (m.sum_out_[i] - m.sum_mean_[i]);
    }
    r.drift = std::sqrt(err);
    r.per_step = m.per_step_;
    for (const DriftMeter& other : ranks) {
      if (other.last_ != m.last_) r.same_on_every_rank = false;
    }
    return r;
  }

 private:
  std::vector<double> sum_out_, sum_mean_;
  int steps_;
  double per_step_ = 0;
  std::vector<float> last_;
};

// `steps` steps on kWorld thread ranks with GIFT error feedback; a new factor
// version every `every` steps (0: one version throughout), the first at step
// `first` (before it the layer goes Euclidean, with Euclidean feedback);
// a new plan epoch (same layout) every `epochs` steps (0: none), which with
// `toggle` takes the layer off the GIFT path and back in turn. Rank 0's
// figures.
Drift RunSteps(int64_t rows, int64_t cols, int steps, int every, int first = 0,
               int epochs = 0, bool toggle = false) {
  const int64_t n = rows * cols;
  std::vector<DriftMeter> meters(kWorld, DriftMeter(n, steps));
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.error_feedback = true;
    auto ar = AllReduceEngine::Create(&comm, OneGiftLayer(rows, cols), o);
    ASSERT_OK(ar);
    VersionedFactors f;
    for (int t = 0; t < steps; ++t) {
      if (t == first || (t > first && every > 0 && t % every == 0)) {
        const int64_t v = every > 0 ? 1 + t / every : 1;
        ASSERT_OK(f.Put("fc", SyntheticLowRank(v, cols, 8, 100 + v)));
      }
      const bool off = toggle && epochs > 0 && (t / epochs) % 2 == 1;
      if (epochs > 0 && t > 0 && t % epochs == 0) {
        ASSERT_OK((*ar)->AddPlan(
            OneGiftLayer(rows, cols, 1 + t / epochs,
                         off ? LayerPath::kEuclid : LayerPath::kGift)));
      }
      std::vector<float> x = Gradient(comm.rank(), t, n);
      StepTelemetry tel;
      ASSERT_OK((*ar)->Run(x.data(), f, &tel));
      ASSERT_EQ(tel.layers[0].path,
                t < first || off ? LayerPath::kEuclid : LayerPath::kGift);
      meters[comm.rank()].Add(t, x);
    }
  });
  return DriftMeter::Figures(meters);
}

// 64 × 128 over 4 ranks: every chunk is whole rows, so the owner residual is
// carried whole. 60 steps, a switch every 5: 11 switches.
TEST(OwnerFeedbackTest, DriftStaysWithinAStepsErrorAcrossSwitches) {
  const Drift fixed = RunSteps(64, 128, 60, 0);
  const Drift switching = RunSteps(64, 128, 60, 5);
  std::cout << "nvfp4 W=" << kWorld << " 64x128, 60 steps: per-step error "
            << switching.per_step << ", drift " << switching.drift
            << " with a switch every 5 steps, " << fixed.drift
            << " with one version" << std::endl;
  EXPECT_TRUE(fixed.same_on_every_rank);
  EXPECT_TRUE(switching.same_on_every_rank);
  EXPECT_LT(fixed.drift, switching.per_step);
  EXPECT_LT(switching.drift, switching.per_step);
  EXPECT_LT(switching.drift, 1.5 * fixed.drift);
}

// 50 × 100 over 4 ranks: chunks start and end inside rows, whose partial
// rows are zeroed at a switch; the whole rows still carry the residual.
TEST(OwnerFeedbackTest, PartialRowsAtChunkEdgesAreDroppedOnly) {
  const Drift fixed = RunSteps(50, 100, 60, 0);
  const Drift switching = RunSteps(50, 100, 60, 5);
  std::cout << "nvfp4 W=" << kWorld << " 50x100, 60 steps: per-step error "
            << switching.per_step << ", drift " << switching.drift
            << " with a switch every 5 steps, " << fixed.drift
            << " with one version" << std::endl;
  EXPECT_TRUE(switching.same_on_every_rank);
  EXPECT_LT(switching.drift, switching.per_step);
}

// A GIFT layer without a factor yet (the job's first steps) goes Euclidean
// with Euclidean feedback; its first GIFT step whitens the Euclidean owner
// residual's whole rows with the factor (R T) instead of dropping it.
TEST(OwnerFeedbackTest, TheEuclideanOwnerResidualIsWhitenedIntoTheGiftPath) {
  const Drift from_start = RunSteps(64, 128, 60, 0);
  const Drift late = RunSteps(64, 128, 60, 0, /*first=*/7);
  std::cout << "nvfp4 W=" << kWorld << " 64x128, 60 steps, one version "
            << "from step 7 (Euclidean before): per-step error "
            << late.per_step << ", drift " << late.drift << " ("
            << from_start.drift << " with the factor from step 0)" << std::endl;
  EXPECT_TRUE(late.same_on_every_rank);
  EXPECT_LT(late.drift, late.per_step);
  EXPECT_LT(late.drift, 1.5 * from_start.drift);
}

// A new plan epoch keeps the owner residuals (every plan has the same
// layout, so each owner holds the same elements): the drift with an epoch
// every 3 steps, on the Euclidean path (steps 0-29) and then on the GIFT
// path, stays that of one epoch. Zeroing them at every epoch, as before,
// dropped one step's owner-side error each time (drift 26.6 against 9.1).
TEST(OwnerFeedbackTest, ANewPlanEpochKeepsTheOwnerResidual) {
  const Drift one = RunSteps(64, 128, 60, 0, /*first=*/30);
  const Drift many = RunSteps(64, 128, 60, 0, /*first=*/30, /*epochs=*/3);
  std::cout << "nvfp4 W=" << kWorld << " 64x128, 60 steps (GIFT from step "
            << "30): drift " << many.drift << " with a plan epoch every 3 "
            << "steps, " << one.drift << " with one; per-step error "
            << many.per_step << std::endl;
  EXPECT_TRUE(many.same_on_every_rank);
  EXPECT_LT(many.drift, many.per_step);
  EXPECT_LT(many.drift, 1.5 * one.drift);
}

// Two Euclidean NVFP4 layers (error feedback on by default) sent in bucket
// layouts that change every `every` steps (0: never): two buckets of one
// layer each, then one bucket with both in the other order, as DDP's
// rebuild after its first step. Rank 0's figures.
Drift RunBucketSteps(int steps, int every) {
  constexpr int64_t kRows = 32, kCols = 128, kN = kRows * kCols;
  const EpochPlan plan = *EpochPlan::Create(1, 2 * kN,
                                            {{.name = "a",
                                              .shape = {kRows, kCols},
                                              .offset = 0,
                                              .path = LayerPath::kEuclid,
                                              .format = Fp4Format::kNvfp4},
                                             {.name = "b",
                                              .shape = {kRows, kCols},
                                              .offset = kN,
                                              .path = LayerPath::kEuclid,
                                              .format = Fp4Format::kNvfp4}});
  const BucketGroup a = {.layers = {0}, .offsets = {0}, .elements = kN};
  const BucketGroup b = {.layers = {1}, .offsets = {0}, .elements = kN};
  const BucketGroup both = {
      .layers = {1, 0}, .offsets = {0, kN}, .elements = 2 * kN};
  std::vector<DriftMeter> meters(kWorld, DriftMeter(2 * kN, steps));
  RunThreadRanks(kWorld, [&](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, plan, {});
    ASSERT_OK(ar);
    std::vector<float> out(2 * kN);
    const VersionedFactors none;  // read until EndStep
    for (int t = 0; t < steps; ++t) {
      // Layer a is elements [0, kN) of x, layer b [kN, 2kN).
      std::vector<float> x = Gradient(comm.rank(), t, 2 * kN);
      ASSERT_OK((*ar)->BeginStep(none));
      if (every > 0 && (t / every) % 2 == 1) {
        std::vector<float> buf(x.begin() + kN, x.end());
        buf.insert(buf.end(), x.begin(), x.begin() + kN);
        ASSERT_OK((*ar)->RunBucket(both, buf.data()));
        std::copy(buf.begin() + kN, buf.end(), out.begin());
        std::copy(buf.begin(), buf.begin() + kN, out.begin() + kN);
      } else {
        ASSERT_OK((*ar)->RunBucket(a, x.data()));
        ASSERT_OK((*ar)->RunBucket(b, x.data() + kN));
        out = x;
      }
      ASSERT_OK((*ar)->EndStep(nullptr));
      meters[comm.rank()].Add(t, out);
    }
  });
  return DriftMeter::Figures(meters);
}

// A bucket layout that no step uses any more hands its owner residuals to
// the worker residuals (sum units: the next sum carries them): the drift
// with a layout change every 3 steps stays that of one layout. Dropping them
// with the layout, as before, lost one step's owner-side error at each
// change, and at DDP's rebuild the first step's, in every run.
TEST(OwnerFeedbackTest, ABucketLayoutChangeKeepsTheOwnerResidual) {
  const Drift one = RunBucketSteps(60, 0);
  const Drift many = RunBucketSteps(60, 3);
  std::cout << "nvfp4 W=" << kWorld << " 2 x 32x128, 60 steps: drift "
            << many.drift << " with a bucket layout change every 3 steps, "
            << one.drift << " with one layout; per-step error " << many.per_step
            << std::endl;
  EXPECT_TRUE(one.same_on_every_rank);
  EXPECT_TRUE(many.same_on_every_rank);
  EXPECT_LT(many.drift, many.per_step);
  EXPECT_LT(many.drift, 1.5 * one.drift);
}

// A plan that takes the layer off the GIFT path un-whitens its owner
// residual's whole rows into the Euclidean path (R T⁻¹, as for a GIFT layer
// without an agreed factor), and the plan that puts it back whitens them
// again: the drift with the layer off and on every 3 steps stays that of one
// path. Zeroing it at each removal, as before, lost one step's owner-side
// error each time.
TEST(OwnerFeedbackTest, ALayerTakenOffTheGiftPathKeepsTheOwnerResidual) {
  const Drift one = RunSteps(64, 128, 60, 0);
  const Drift toggled =
      RunSteps(64, 128, 60, 0, /*first=*/0, /*epochs=*/3, /*toggle=*/true);
  std::cout << "nvfp4 W=" << kWorld << " 64x128, 60 steps: drift "
            << toggled.drift << " with the layer off and on the GIFT path "
            << "every 3 steps, " << one.drift << " on it throughout; per-step "
            << "error " << toggled.per_step << std::endl;
  EXPECT_TRUE(toggled.same_on_every_rank);
  EXPECT_LT(toggled.drift, toggled.per_step);
  EXPECT_LT(toggled.drift, 1.5 * one.drift);
}

// The same hand-over step by step: the first GIFT step equals that of an
// engine given x + r (the Euclidean worker residual) that holds only the
// owner residuals, and differs from one without them.
TEST(OwnerFeedbackTest, EuclideanToGiftStepUsesTheOwnerResidual) {
  constexpr int64_t kRows = 64, kCols = 128, kN = kRows * kCols;
  RunThreadRanks(2, [&](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(ar);
    VersionedFactors f;
    for (int t = 0; t < 3; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t, kN);
      ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
    }
    absl::StatusOr<AllReduceState> before = (*ar)->ExportState();
    ASSERT_OK(before);
    ASSERT_EQ(before->euclid_layers.size(), 1u);
    ASSERT_TRUE(before->euclid_layers[0].owner_live);
    ASSERT_OK(f.Put("fc", SyntheticLowRank(1, kCols, 8, 101)));
    std::vector<float> got = Gradient(comm.rank(), 3, kN), want = got;
    for (int64_t i = 0; i < kN; ++i) {
      want[i] += before->euclid_layers[0].residual[i];
    }
    std::vector<float> cold = want;
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(got.data(), f, &t));
    ASSERT_EQ(t.layers[0].path, LayerPath::kGift);
    AllReduceState owner_only = *before;
    owner_only.euclid_layers[0].residual.clear();
    auto other = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(other);
    ASSERT_OK((*other)->ImportState(owner_only));
    ASSERT_OK((*other)->Run(want.data(), f, nullptr));
    EXPECT_EQ(got, want);
    auto fresh = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(fresh);
    ASSERT_OK((*fresh)->Run(cold.data(), f, nullptr));
    EXPECT_NE(cold, got);
  });
}

// A GIFT layer without an agreed factor for a step (e.g. its newest factor
// not accepted on every rank) goes Euclidean: that step un-whitens the GIFT
// owner residual's whole rows (R T⁻¹). It equals the step of an engine
// holding only the owner-side state, and differs from a fresh engine's.
TEST(OwnerFeedbackTest, AGiftLayerSentEuclideanUnwhitensTheOwnerResidual) {
  constexpr int64_t kRows = 64, kCols = 128, kN = kRows * kCols;
  RunThreadRanks(2, [&](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(ar);
    VersionedFactors f, none;
    ASSERT_OK(f.Put("fc", SyntheticLowRank(1, kCols, 8, 101)));
    for (int t = 0; t < 3; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t, kN);
      ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
    }
    absl::StatusOr<AllReduceState> before = (*ar)->ExportState();
    ASSERT_OK(before);
    ASSERT_EQ(before->gift_layers.size(), 1u);
    std::vector<float> got = Gradient(comm.rank(), 3, kN), want = got,
                       cold = got;
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(got.data(), none, &t));
    ASSERT_EQ(t.layers[0].path, LayerPath::kEuclid);
    AllReduceState owner_only = *before;
    owner_only.gift_layers[0].residual.clear();  // unused by this step
    auto other = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(other);
    ASSERT_OK((*other)->ImportState(owner_only));
    ASSERT_OK((*other)->Run(want.data(), none, nullptr));
    EXPECT_EQ(got, want);
    auto fresh = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), {});
    ASSERT_OK(fresh);
    ASSERT_OK((*fresh)->Run(cold.data(), none, nullptr));
    EXPECT_NE(cold, got);
  });
}

// The checkpoint needs nothing new: a state exported just before a switch
// and imported into a fresh engine gives the same bits at the switch (the
// owner residual is reprojected from the restored worker factor) as the
// engine that went on.
TEST(OwnerFeedbackTest, ARestoredStateCarriesTheOwnerResidualAtTheSwitch) {
  constexpr int64_t kRows = 64, kCols = 128;
  RunThreadRanks(kWorld, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.error_feedback = true;
    auto ar = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), o);
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("fc", SyntheticLowRank(1, kCols, 8, 101)));
    for (int t = 0; t < 3; ++t) {
      std::vector<float> x = Gradient(comm.rank(), t, kRows * kCols);
      ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
    }
    absl::StatusOr<AllReduceState> state = (*ar)->ExportState();
    ASSERT_OK(state);
    ASSERT_OK(f.Put("fc", SyntheticLowRank(2, kCols, 8, 102)));
    std::vector<float> want = Gradient(comm.rank(), 3, kRows * kCols);
    std::vector<float> got = want, cold = want;
    ASSERT_OK((*ar)->Run(want.data(), f, nullptr));
    auto restored =
        AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), o);
    ASSERT_OK(restored);
    ASSERT_OK((*restored)->ImportState(*state));
    ASSERT_OK((*restored)->Run(got.data(), f, nullptr));
    EXPECT_EQ(got, want);
    // A fresh engine (no residuals at all) differs.
    auto fresh = AllReduceEngine::Create(&comm, OneGiftLayer(kRows, kCols), o);
    ASSERT_OK(fresh);
    ASSERT_OK((*fresh)->Run(cold.data(), f, nullptr));
    EXPECT_NE(cold, want);
  });
}

}  // namespace
}  // namespace gift::client
