#include "client/allreduce_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "client/gift_transform.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "kernels/quantize.h"

namespace gift::client {
namespace {

using ::gift::testing::RelL2;
using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// a: 1-D Euclidean; gap; g: GIFT 6 × 16; b: Euclidean E5M2 blocks of 8.
EpochPlan Plan(int64_t epoch = 1, LayerPath g_path = LayerPath::kGift) {
  return *EpochPlan::Create(
      epoch, 200,
      {{.name = "a", .shape = {37}, .offset = 0},
       {.name = "g", .shape = {6, 16}, .offset = 40, .path = g_path},
       {.name = "b",
        .shape = {3, 21},
        .offset = 136,
        .format = kernels::Fp8Format::kE5M2,
        .block_size = 8}});
}

std::vector<float> Bucket(int rank) {
  std::vector<float> x(200);
  for (size_t i = 0; i < x.size(); ++i) x[i] = SyntheticValue(rank + 1, i);
  return x;
}

TEST(AllReduceEngineTest, ParsesModes) {
  EXPECT_EQ(*ParseAllReduceMode("FP8"), AllReduceMode::kFp8);
  EXPECT_EQ(*ParseAllReduceMode("nccl-fp8"), AllReduceMode::kNcclFp8);
  EXPECT_EQ(AllReduceModeName(AllReduceMode::kBf16), "bf16");
  EXPECT_THAT(ParseAllReduceMode("fp16"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AllReduceEngineTest, RejectsNcclFp8OnGlooAndBadOptions) {
  RunThreadRanks(1, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.mode = AllReduceMode::kNcclFp8;
    absl::StatusOr<std::unique_ptr<AllReduceEngine>> nccl =
        AllReduceEngine::Create(&comm, Plan(), o);
    EXPECT_THAT(nccl, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(nccl.status().message(),
                HasSubstr("nccl-fp8 needs the NCCL backend on sm_90"));
    o.mode = AllReduceMode::kFp8;
    o.piece_bytes = 2;
    EXPECT_THAT(AllReduceEngine::Create(&comm, Plan(), o),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(AllReduceEngine::Create(nullptr, Plan(), {}),
                StatusIs(absl::StatusCode::kInvalidArgument));
    auto ar = AllReduceEngine::Create(&comm, Plan(), {});
    ASSERT_OK(ar);
    EXPECT_THAT((*ar)->Run(nullptr, VersionedFactors(), nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument));
  });
}

TEST(AllReduceEngineTest, PlainModesAverageExactlyAndLeaveGapsAlone) {
  for (AllReduceMode mode : {AllReduceMode::kFp32, AllReduceMode::kBf16}) {
    RunThreadRanks(3, [mode](Transport& comm) {
      AllReduceEngineOptions o;
      o.mode = mode;
      auto ar = AllReduceEngine::Create(&comm, Plan(), o);
      ASSERT_OK(ar);
      // Small integers: every partial sum is exact in bfloat16 too.
      auto value = [](int r, int i) { return float((r + i) % 7 - 3); };
      std::vector<float> x(200);
      for (int i = 0; i < 200; ++i) x[i] = value(comm.rank(), i);
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      for (int i = 0; i < 200; ++i) {
        const bool gap = (i >= 37 && i < 40) || i >= 199;
        const float sum = value(0, i) + value(1, i) + value(2, i);
        EXPECT_EQ(x[i], gap ? value(comm.rank(), i) : sum / 3.0f) << i;
      }
      EXPECT_GT(t.bytes_euclid, 0u);
      EXPECT_EQ(t.bytes_gift, 0u);
    });
  }
}

TEST(AllReduceEngineTest, SingleRankFp8IsTheSegmentRoundTrip) {
  RunThreadRanks(1, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Plan(1, LayerPath::kEuclid), {});
    ASSERT_OK(ar);
    std::vector<float> x = Bucket(0), in = x;
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
    const EpochPlan plan = Plan();
    for (const BucketLayer& l : plan.layers()) {
      const kernels::QuantizeSpec spec{l.format.fp8(), l.block_size};
      std::vector<uint8_t> q(l.size());
      std::vector<float> s(kernels::NumScales(l.size(), l.block_size)),
          want(l.size());
      ASSERT_OK(kernels::Quantize(in.data() + l.offset, l.size(), spec,
                                  q.data(), s.data(), nullptr, nullptr));
      ASSERT_OK(
          kernels::Dequantize(q.data(), s.data(), l.size(), spec, want.data()));
      for (int64_t i = 0; i < l.size(); ++i) {
        EXPECT_EQ(x[l.offset + i], want[i]) << l.name << " " << i;
      }
    }
    EXPECT_EQ(x[38], in[38]);  // gap untouched
    EXPECT_NE(x[0], in[0]);    // quantized (these values are not FP8 grid)
    EXPECT_EQ(t.layers[0].local.n, 37);
    EXPECT_GT(t.layers[0].local.err_sq, 0.0);
  });
}

TEST(AllReduceEngineTest, MoreRanksThanElementsAndEmptyBuckets) {
  RunThreadRanks(3, [](Transport& comm) {
    // Two one-element layers around an empty one: chunk 2 is empty.
    const EpochPlan tiny =
        *EpochPlan::Create(0, 3,
                           {{.name = "x", .shape = {1}, .offset = 0},
                            {.name = "none", .shape = {0, 4}, .offset = 1},
                            {.name = "y", .shape = {1, 1}, .offset = 2}});
    auto ar = AllReduceEngine::Create(&comm, tiny, {});
    ASSERT_OK(ar);
    // 1, 2, 3 and their sum 6 are exact in E4M3: the mean 2 comes out exact.
    const float v = static_cast<float>(comm.rank() + 1);
    std::vector<float> x = {v, -7.0f, -v};
    ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), nullptr));
    EXPECT_EQ(x, (std::vector<float>{2.0f, -7.0f, -2.0f}));
    const EpochPlan empty =
        *EpochPlan::Create(0, 0, {{.name = "none", .shape = {0}, .offset = 0}});
    auto ar0 = AllReduceEngine::Create(&comm, empty, {});
    ASSERT_OK(ar0);
    StepTelemetry t;
    EXPECT_OK((*ar0)->Run(nullptr, VersionedFactors(), &t));
    EXPECT_EQ(t.bytes_euclid + t.bytes_gift, 0u);
  });
}

TEST(AllReduceEngineTest, NonFiniteOnOneRankPoisonsTheWholeLayerEverywhere) {
  for (float bad : {std::nanf(""), INFINITY}) {
    RunThreadRanks(3, [bad](Transport& comm) {
      auto ar = AllReduceEngine::Create(&comm, Plan(), {});
      ASSERT_OK(ar);
      VersionedFactors f;
      ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
      std::vector<float> x = Bucket(comm.rank());
      if (comm.rank() == 1) x[2] = bad;  // layer a, chunk 0 only
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), f, &t));
      for (int i = 0; i < 37; ++i) EXPECT_TRUE(std::isnan(x[i])) << i;
      for (int i = 40; i < 199; ++i) EXPECT_TRUE(std::isfinite(x[i])) << i;
      EXPECT_EQ(t.nonfinite_layers, 1);
      EXPECT_TRUE(t.layers[0].nonfinite_result);
      EXPECT_EQ(t.layers[0].local.nonfinite, comm.rank() == 1 ? 1 : 0);
      // The next step is clean again.
      x = Bucket(comm.rank());
      ASSERT_OK((*ar)->Run(x.data(), f, &t));
      EXPECT_EQ(t.nonfinite_layers, 0);
      for (int i = 0; i < 199; ++i) EXPECT_TRUE(std::isfinite(x[i])) << i;
    });
  }
}

TEST(AllReduceEngineTest, TelemetryReportsPathsProbesAndBytes) {
  RunThreadRanks(2, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.probe_interval = 2;
    auto ar = AllReduceEngine::Create(&comm, Plan(), o);
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(7, 16, 4, 5)));
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = Bucket(comm.rank());
      StepTelemetry t;
      const uint64_t before = comm.bytes_sent().Total();
      ASSERT_OK((*ar)->Run(x.data(), f, &t));
      EXPECT_EQ(t.bytes_euclid + t.bytes_gift + t.bytes_control,
                comm.bytes_sent().Total() - before);
      EXPECT_EQ(t.step, step);
      EXPECT_EQ(t.probe_step, step % 2 == 0);
      EXPECT_EQ(t.plan_epoch, 1);
      ASSERT_EQ(t.layers.size(), 3u);
      EXPECT_EQ(t.layers[1].path, LayerPath::kGift);
      EXPECT_EQ(t.layers[1].factor_version, 7);
      EXPECT_EQ(t.layers[0].path, LayerPath::kEuclid);
      EXPECT_EQ(t.layers[1].probed, step % 2 == 0);
      EXPECT_FALSE(t.layers[0].probed);  // 1-D: not a candidate
      if (step % 2 == 0) {
        EXPECT_GT(t.layers[1].probe_euclid_rel_l2, 0.0);
        EXPECT_GT(t.layers[1].probe_gift_rel_l2, 0.0);
      }
      EXPECT_EQ(t.layers[1].local.n, 96);
      EXPECT_GT(t.bytes_gift, 0u);
      EXPECT_GT(t.bytes_euclid, 0u);
      EXPECT_GT(t.bytes_control, 0u);  // the agreement vector
    }
  });
}

TEST(AllReduceEngineTest, NewPlanEpochIsUsedOnlyOnceEveryRankHasIt) {
  RunThreadRanks(2, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    EXPECT_THAT((*ar)->AddPlan(Plan(1)),
                StatusIs(absl::StatusCode::kInvalidArgument));
    // Epoch 2 sends g down the Euclidean path; rank 1 gets it a step later.
    if (comm.rank() == 0) {
      ASSERT_OK((*ar)->AddPlan(Plan(2, LayerPath::kEuclid)));
    }
    std::vector<float> x = Bucket(comm.rank());
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.plan_epoch, 1);
    EXPECT_EQ(t.layers[1].path, LayerPath::kGift);
    if (comm.rank() == 1) {
      ASSERT_OK((*ar)->AddPlan(Plan(2, LayerPath::kEuclid)));
    }
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.plan_epoch, 2);
    EXPECT_EQ((*ar)->current_epoch(), 2);
    EXPECT_EQ(t.layers[1].path, LayerPath::kEuclid);
  });
}

// A daemon that publishes epochs in quick succession: the ranks' newest
// epochs differ for a while (rank 0 skipped ahead to 3, rank 1 holds 2).
// The job stays on the epoch in use instead of failing, and switches once
// every rank's newest is the same.
TEST(AllReduceEngineTest, DifferentNewestEpochsStayOnTheCurrentOne) {
  RunThreadRanks(2, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    ASSERT_OK((*ar)->AddPlan(Plan(2, LayerPath::kEuclid)));
    if (comm.rank() == 0) {
      ASSERT_OK((*ar)->AddPlan(Plan(3, LayerPath::kEuclid)));
    }
    std::vector<float> x = Bucket(comm.rank());
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.plan_epoch, 1);
    EXPECT_EQ(t.layers[1].path, LayerPath::kGift);
    if (comm.rank() == 1) {
      ASSERT_OK((*ar)->AddPlan(Plan(3, LayerPath::kEuclid)));
    }
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.plan_epoch, 3);
    EXPECT_EQ(t.layers[1].path, LayerPath::kEuclid);
  });
}

// A giftd restarted while rank 1 still held an epoch the job never used
// gives the same number to another plan (rank 0's): the ranks hold
// different plans under epoch 2. Every rank drops it in the same step and
// stays on epoch 1 instead of failing; the next common epoch is taken.
TEST(AllReduceEngineTest, PlansThatDifferUnderOneEpochAreDroppedEverywhere) {
  RunThreadRanks(2, [](Transport& comm) {
    auto ar = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    ASSERT_OK((*ar)->AddPlan(
        Plan(2, comm.rank() == 0 ? LayerPath::kEuclid : LayerPath::kGift)));
    std::vector<float> x = Bucket(comm.rank());
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.dropped_epoch, 2);
    EXPECT_EQ(t.plan_epoch, 1);
    EXPECT_EQ((*ar)->current_epoch(), 1);
    EXPECT_EQ(t.layers[1].path, LayerPath::kGift);
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.dropped_epoch, 0);
    EXPECT_EQ(t.plan_epoch, 1);
    ASSERT_OK((*ar)->AddPlan(Plan(3, LayerPath::kEuclid)));
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    EXPECT_EQ(t.plan_epoch, 3);
    EXPECT_EQ(t.layers[1].path, LayerPath::kEuclid);
  });
}

// A checkpoint: the exported state (residuals, epochs, step) restored into
// a fresh allreduce reproduces the next step bit for bit, and without it
// the step differs (the error-feedback residual matters).
TEST(AllReduceEngineTest, ExportedStateReproducesTheNextStep) {
  RunThreadRanks(2, [](Transport& comm) {
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    auto ar = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(ar);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = Bucket(comm.rank() + step);
      ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
    }
    auto state = (*ar)->ExportState();
    ASSERT_OK(state);
    EXPECT_EQ(state->step, 3);
    std::vector<float> next = Bucket(comm.rank() + 3), want = next;
    ASSERT_OK((*ar)->Run(want.data(), f, nullptr));

    auto restored = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(restored);
    ASSERT_OK((*restored)->ImportState(*state));
    std::vector<float> got = next;
    ASSERT_OK((*restored)->Run(got.data(), f, nullptr));
    EXPECT_EQ(got, want);

    auto fresh = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(fresh);
    std::vector<float> cold = next;
    ASSERT_OK((*fresh)->Run(cold.data(), f, nullptr));
    EXPECT_NE(cold, want);
  });
}

// A layer leaving the GIFT path sends its residual with its first Euclidean
// step: a zero gradient then comes out as the un-whitened residual (within
// FP8 rounding), and the residual is gone. Without the flush the layer would
// come out exactly zero and the residual would wait for the layer's return.
TEST(AllReduceEngineTest, LeavingTheGiftPathFlushesTheResidual) {
  RunThreadRanks(2, [](Transport& comm) {
    VersionedFactors f;
    const LayerFactor factor = SyntheticLowRank(1, 16, 4, 5);
    ASSERT_OK(f.Put("g", factor));
    auto ar = AllReduceEngine::Create(&comm, Plan(1), {});
    ASSERT_OK(ar);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = Bucket(comm.rank() + step);
      ASSERT_OK((*ar)->Run(x.data(), f, nullptr));
    }
    auto before = (*ar)->ExportState();
    ASSERT_OK(before);
    ASSERT_EQ(before->gift_layers.size(), 1u);
    const std::vector<float>& r = before->gift_layers[0].residual;
    // Both ranks' residuals, un-whitened and averaged: what must come out.
    std::vector<float> mine(96), both(96);
    ASSERT_OK(GiftTransformer().Inverse(factor, r.data(), 6, mine.data()));
    ASSERT_OK(comm.AllReduce(mine.data(), both.data(), 96, DataType::kFloat32,
                             ReduceOp::kSum));
    double norm = 0;
    for (float& v : both) {
      v /= 2;
      norm += double{v} * v;
    }
    ASSERT_GT(norm, 0);

    ASSERT_OK((*ar)->AddPlan(Plan(2, LayerPath::kEuclid)));
    std::vector<float> x(200, 0.0f);
    StepTelemetry t;
    ASSERT_OK((*ar)->Run(x.data(), f, &t));
    ASSERT_EQ(t.plan_epoch, 2);
    double err = 0;
    for (int i = 0; i < 96; ++i) {
      const double d = x[40 + i] - both[i];
      err += d * d;
    }
    EXPECT_LT(std::sqrt(err / norm), 0.1);  // FP8 rounding, twice
    auto after = (*ar)->ExportState();
    ASSERT_OK(after);
    for (const auto& l : after->gift_layers) {
      for (float v : l.residual) ASSERT_EQ(v, 0.0f);
    }
  });
}

// ---- audit steps (issue 15) ----

// Rank r's gradient of step `step` (different every step).
std::vector<float> StepBucket(int rank, int step) {
  std::vector<float> x(200);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = SyntheticValue(1000 * step + rank + 1, i);
  }
  return x;
}

// Every audit_interval steps the step audits what it applied against the
// exact FP32 average, and the running sums since the previous audit; other
// steps do not; every rank reports the same figures.
TEST(AllReduceEngineTest, AuditStepsMeasureWhatWasApplied) {
  constexpr int kRanks = 3, kSteps = 9;
  absl::Mutex mu;
  std::map<std::pair<int, int>, StepTelemetry> seen;  // (rank, step)
  RunThreadRanks(kRanks, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.audit_interval = 4;
    o.audit_drift = true;
    auto ar = AllReduceEngine::Create(&comm, Plan(1, LayerPath::kEuclid), o);
    ASSERT_OK(ar);
    const EpochPlan plan = Plan();
    std::vector<double> applied_sum(200), avg_sum(200);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> x = StepBucket(comm.rank(), step);
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      // The exact average and the test's own running sums since the last
      // audit.
      std::vector<double> avg(200), applied(x.begin(), x.end());
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<float> y = StepBucket(r, step);
        for (int i = 0; i < 200; ++i) avg[i] += y[i] / double{kRanks};
      }
      for (int i = 0; i < 200; ++i) {
        applied_sum[i] += applied[i];
        avg_sum[i] += avg[i];
      }
      const bool audit = step > 0 && step % 4 == 0;
      EXPECT_EQ(t.audit_step, audit) << step;
      EXPECT_EQ(t.bytes_audit > 0, audit) << step;
      for (size_t j = 0; j < t.layers.size(); ++j) {
        const LayerTelemetry& l = t.layers[j];
        const BucketLayer& spec = plan.layers()[j];
        EXPECT_EQ(l.audited, audit) << step << " " << l.name;
        EXPECT_EQ(l.drift_audited, audit) << step << " " << l.name;
        if (!audit) continue;
        const double want =
            RelL2(applied, avg, spec.offset, spec.offset + spec.size());
        EXPECT_NEAR(l.audit_rel_l2, want, 1e-4 * want) << l.name;
        EXPECT_GT(l.audit_rel_l2, 0) << l.name;  // FP8 is not exact
        EXPECT_GT(l.audit_cosine, 0.99) << l.name;
        EXPECT_LE(l.audit_cosine, 1.0 + 1e-12) << l.name;
        // Step 4 covers steps 0-4, step 8 covers 5-8.
        EXPECT_EQ(l.drift_steps, step == 4 ? 5 : 4) << l.name;
        const double drift =
            RelL2(applied_sum, avg_sum, spec.offset, spec.offset + spec.size());
        EXPECT_NEAR(l.audit_drift, drift, 1e-3 * drift) << l.name;
      }
      if (audit) {
        std::fill(applied_sum.begin(), applied_sum.end(), 0.0);
        std::fill(avg_sum.begin(), avg_sum.end(), 0.0);
      }
      absl::MutexLock lock(&mu);
      seen[{comm.rank(), step}] = t;
    }
  });
  for (int step : {4, 8}) {
    for (int r = 1; r < kRanks; ++r) {
      for (size_t j = 0; j < 3; ++j) {
        const LayerTelemetry& mine = seen[std::make_pair(r, step)].layers[j];
        const LayerTelemetry& first = seen[std::make_pair(0, step)].layers[j];
        EXPECT_EQ(mine.audit_rel_l2, first.audit_rel_l2);
        EXPECT_EQ(mine.audit_drift, first.audit_drift);
      }
    }
  }
}

// Error feedback on a GIFT layer bounds the drift: its running sum of
// applied gradients stays much closer to the FP32 one than a single step's
// error would suggest, and closer than without error feedback.
TEST(AllReduceEngineTest, AuditedDriftIsBoundedByErrorFeedback) {
  std::map<bool, double> drift;  // by error_feedback
  for (bool ef : {true, false}) {
    RunThreadRanks(2, [&](Transport& comm) {
      AllReduceEngineOptions o;
      o.audit_interval = 20;
      o.audit_drift = true;
      o.error_feedback = ef;
      auto ar = AllReduceEngine::Create(&comm, Plan(), o);
      ASSERT_OK(ar);
      VersionedFactors factors;
      ASSERT_OK(factors.Put("g", SyntheticLowRank(1, 16, 4, 7)));
      for (int step = 0; step <= 20; ++step) {
        std::vector<float> x = StepBucket(comm.rank(), step % 3);
        StepTelemetry t;
        ASSERT_OK((*ar)->Run(x.data(), factors, &t));
        if (step < 20) continue;
        const LayerTelemetry& g = t.layers[1];
        ASSERT_TRUE(g.audited);
        ASSERT_TRUE(g.drift_audited);
        EXPECT_EQ(g.path, LayerPath::kGift);
        EXPECT_EQ(g.drift_steps, 21);  // steps 0-20
        if (comm.rank() == 0) drift[ef] = g.audit_drift;
      }
    });
  }
  EXPECT_LT(drift[true], 0.5 * drift[false])
      << "drift with error feedback " << drift[true] << ", without "
      << drift[false];
}

// Ranks whose intervals differ (one disabled, one changed at run time at
// another step) never disagree about an audit step: the job audits only
// the steps that are audit steps for every rank, and no step hangs.
TEST(AllReduceEngineTest, AuditStepsAreAgreedAcrossRanks) {
  absl::Mutex mu;
  std::map<std::pair<int, int>, bool> audited;
  RunThreadRanks(2, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.audit_interval = comm.rank() == 0 ? 2 : 0;
    o.audit_drift = true;
    auto ar = AllReduceEngine::Create(&comm, Plan(1, LayerPath::kEuclid), o);
    ASSERT_OK(ar);
    EXPECT_THAT((*ar)->set_audit_interval(-1),
                StatusIs(absl::StatusCode::kInvalidArgument));
    for (int step = 0; step < 13; ++step) {
      // Rank 1 starts auditing every 2 steps from step 5; rank 0 switches
      // to every 3 steps from step 8.
      if (comm.rank() == 1 && step == 5) {
        ASSERT_OK((*ar)->set_audit_interval(2));
      }
      if (comm.rank() == 0 && step == 8) {
        ASSERT_OK((*ar)->set_audit_interval(3));
      }
      std::vector<float> x = StepBucket(comm.rank(), step);
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      absl::MutexLock lock(&mu);
      audited[{comm.rank(), step}] = t.audit_step;
      if (t.audit_step) {
        // Rank 1's sums started at step 5, rank 0's at step 0 (and restart
        // at every audit): the first audit (step 6) has no drift.
        EXPECT_EQ(t.layers[0].drift_audited, step != 6) << step;
      }
    }
  });
  for (int step = 0; step < 13; ++step) {
    // Steps 5-7: both every 2; from 8: 3 and 2.
    const bool want = step == 6 || step == 12;
    EXPECT_EQ(audited[std::make_pair(0, step)], want) << step;
    EXPECT_EQ(audited[std::make_pair(1, step)], want) << step;
  }
}

// A layer whose result is non-finite is not audited (the others are), and
// its running sums restart.
TEST(AllReduceEngineTest, NonFiniteLayersAreNotAudited) {
  RunThreadRanks(2, [](Transport& comm) {
    AllReduceEngineOptions o;
    o.audit_interval = 2;
    o.audit_drift = true;
    auto ar = AllReduceEngine::Create(&comm, Plan(1, LayerPath::kEuclid), o);
    ASSERT_OK(ar);
    for (int step = 0; step < 5; ++step) {
      std::vector<float> x = StepBucket(comm.rank(), step);
      if (step == 2 && comm.rank() == 1) x[3] = NAN;  // layer a
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      if (step == 2) {
        EXPECT_TRUE(t.audit_step);
        EXPECT_TRUE(t.layers[0].nonfinite_result);
        EXPECT_FALSE(t.layers[0].audited);
        EXPECT_TRUE(t.layers[1].audited);
        EXPECT_TRUE(t.layers[2].audited);
      }
      if (step == 4) {
        EXPECT_TRUE(t.layers[0].audited);
        EXPECT_TRUE(std::isfinite(t.layers[0].audit_drift));
        EXPECT_TRUE(std::isfinite(t.layers[0].audit_rel_l2));
      }
    }
  });
}

}  // namespace
}  // namespace gift::client
