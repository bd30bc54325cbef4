// The C ABI's quantized allreduce (include/gift/c_api.h), linked against
// libgift.so alone: the FP8 allreduce on 2 ranks (threads, each with its own
// communicator) against the exact average, the step info's struct_size,
// fp32 exactly, overlapped steps, the GIFT path with a factor given by hand,
// audit steps, and a plan mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gift/c_api.h"
#include "tests/api/api_testutil.h"
#include "tests/api/c_api_testutil.h"

namespace {

using gift::testing::Connect;
using gift::testing::ExactAverage;
using gift::testing::Gradient;
using gift::testing::kBiasOffset;
using gift::testing::kBucket;
using gift::testing::kCols;
using gift::testing::kFcOffset;
using gift::testing::kRows;
using gift::testing::LastError;
using gift::testing::RelL2;
using gift::testing::RunRanks;
using gift::testing::SameLayers;
using gift::testing::TempDir;
using gift::testing::TestBuilder;
using gift::testing::TestPlan;

// Two ranks, FP8: each result within FP8 error of the exact average (and
// not equal to it: it was quantized), bit-identical across ranks, gaps
// untouched; argument errors change nothing and break nothing.
TEST(CApiTest, Fp8AllReduceOnTwoRanks) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  const std::vector<float> exact = ExactAverage(kWorld, kBucket);
  std::vector<std::vector<float>> results(kWorld);
  std::vector<gift_step_info_t> infos(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(gift_communicator_rank(comm), rank);
    EXPECT_EQ(gift_communicator_world_size(comm), kWorld);
    EXPECT_EQ(gift_communicator_device_memory(comm), 0);
    gift_plan_t* plan = TestPlan();
    gift_allreduce_t* ar = nullptr;
    ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &ar));

    std::vector<float> grad = Gradient(rank, kBucket);
    const std::vector<float> before = grad;
    EXPECT_GIFT_ERROR(gift_allreduce_step(ar, grad.data(), kBucket - 1),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_step",
                      "the bucket has 411 floats, the plan needs 412");
    EXPECT_GIFT_ERROR(gift_allreduce_step(ar, grad.data(), SIZE_MAX),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_step",
                      "the plan needs 412");
    EXPECT_GIFT_ERROR(gift_allreduce_step(ar, nullptr, kBucket),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_step",
                      "bucket is null");
    EXPECT_EQ(grad, before);
    gift_step_info_t info;
    info.struct_size = sizeof(info);
    ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &info));
    EXPECT_EQ(info.step, -1);  // no step yet
    EXPECT_EQ(info.num_layers, 0);
    EXPECT_EQ(gift_allreduce_steps(ar), 0);

    ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
    EXPECT_EQ(gift_allreduce_steps(ar), 1);
    infos[rank].struct_size = sizeof(gift_step_info_t);
    ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &infos[rank]));
    gift_layer_info_t layer;
    layer.struct_size = sizeof(layer);
    ASSERT_GIFT_OK(gift_allreduce_last_layer(ar, 0, &layer));
    EXPECT_STREQ(layer.name, "fc");
    EXPECT_EQ(layer.path, GIFT_PATH_EUCLID);
    EXPECT_EQ(layer.elements, kRows * kCols);
    EXPECT_EQ(layer.factor_version, -1);
    EXPECT_GT(layer.err_sq, 0);
    EXPECT_GT(layer.x_sq, layer.err_sq);
    EXPECT_GIFT_ERROR(gift_allreduce_last_layer(ar, 2, &layer),
                      GIFT_OUT_OF_RANGE, "gift_allreduce_last_layer",
                      "layer index 2 >= the last step's 2 layers");
    layer.struct_size = 3;
    EXPECT_GIFT_ERROR(gift_allreduce_last_layer(ar, 0, &layer),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_last_layer",
                      "struct_size");
    results[rank] = grad;
    gift_allreduce_destroy(ar);
    gift_plan_destroy(plan);
    gift_communicator_destroy(comm);
  });
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBucket));
  ASSERT_EQ(results[1].size(), static_cast<size_t>(kBucket));
  EXPECT_TRUE(SameLayers(results[0], results[1])) << "ranks differ";
  for (const auto& [begin, end] :
       {std::pair<int64_t, int64_t>{kFcOffset, kFcOffset + kRows * kCols},
        {kBiasOffset, kBiasOffset + kRows}}) {
    const double e = RelL2(results[0], exact, begin, end);
    EXPECT_GT(e, 1e-4) << "layer at " << begin << " was not quantized";
    EXPECT_LT(e, 0.06) << "layer at " << begin;
  }
  // The gaps are neither sent nor written.
  const std::vector<float> own = Gradient(0, kBucket);
  for (int64_t i = kRows * kCols; i < kBiasOffset; ++i) {
    EXPECT_EQ(results[0][i], own[i]) << i;
  }
  for (int64_t i = kBiasOffset + kRows; i < kBucket; ++i) {
    EXPECT_EQ(results[0][i], own[i]) << i;
  }
  for (const gift_step_info_t& info : infos) {
    EXPECT_EQ(info.step, 0);
    EXPECT_EQ(info.plan_epoch, 0);
    EXPECT_EQ(info.num_layers, 2);
    EXPECT_EQ(info.gift_layers, 0);
    EXPECT_EQ(info.nonfinite_layers, 0);
    EXPECT_GT(info.bytes_euclid, 0u);
    // FP8 payload: at most about a quarter of the FP32 ring's bytes
    // (2 (W-1)/W of the bucket) plus scales.
    EXPECT_LT(info.bytes_euclid,
              (kRows * kCols + kRows) * sizeof(float) / 2 + 256);
    EXPECT_GT(info.seconds, 0);
  }
}

// A smaller struct_size (an older header) gets only its fields.
TEST(CApiTest, StepInfoHonoursStructSize) {
  TempDir dir("gift_api_test");
  gift_communicator_t* comm = Connect(0, 1, dir.path());
  ASSERT_NE(comm, nullptr);
  gift_plan_t* plan = TestPlan();
  gift_allreduce_t* ar = nullptr;
  ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &ar));
  std::vector<float> grad = Gradient(0, kBucket);
  ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
  ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
  gift_step_info_t info;
  std::memset(&info, 0xAB, sizeof(info));
  info.struct_size = offsetof(gift_step_info_t, plan_epoch);
  ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &info));
  EXPECT_EQ(info.struct_size, offsetof(gift_step_info_t, plan_epoch));
  EXPECT_EQ(info.step, 1);
  int64_t untouched;
  std::memset(&untouched, 0xAB, sizeof(untouched));
  EXPECT_EQ(info.plan_epoch, untouched);
  info.struct_size = 0;
  EXPECT_GIFT_ERROR(gift_allreduce_last_step(ar, &info), GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_last_step", "struct_size");
  EXPECT_GIFT_ERROR(gift_allreduce_last_step(ar, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_last_step",
                    "info is NULL");
  gift_allreduce_destroy(ar);
  gift_plan_destroy(plan);
  gift_communicator_destroy(comm);
}

// fp32 mode is the exact average: (a + b) / 2 in float, bit for bit.
TEST(CApiTest, Fp32ModeIsExact) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> results(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    gift_plan_t* plan = TestPlan();
    gift_allreduce_options_t* o = gift_allreduce_options_create();
    ASSERT_GIFT_OK(gift_allreduce_options_set_mode(o, GIFT_MODE_FP32));
    gift_allreduce_t* ar = nullptr;
    ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, o, &ar));
    gift_allreduce_options_destroy(o);
    std::vector<float> grad = Gradient(rank, kBucket);
    ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
    results[rank] = grad;
    gift_allreduce_destroy(ar);
    gift_plan_destroy(plan);
    gift_communicator_destroy(comm);
  });
  const std::vector<float> a = Gradient(0, kBucket), b = Gradient(1, kBucket);
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBucket));
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    EXPECT_EQ(results[0][i], (a[i] + b[i]) / 2.0f) << i;
  }
  for (int64_t i = kBiasOffset; i < kBiasOffset + kRows; ++i) {
    EXPECT_EQ(results[0][i], (a[i] + b[i]) / 2.0f) << i;
  }
  EXPECT_TRUE(SameLayers(results[0], results[1]));
}

// An overlapped step over two buckets (the bias first, in its own
// buffer), against the exact average; and the step state machine.
TEST(CApiTest, OverlappedStepOverTwoBuckets) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  const std::vector<float> exact = ExactAverage(kWorld, kBucket);
  std::vector<std::vector<float>> fcs(kWorld), biases(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    gift_plan_t* plan = TestPlan();
    gift_allreduce_t* ar = nullptr;
    ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &ar));
    const std::vector<float> grad = Gradient(rank, kBucket);
    std::vector<float> bias(grad.begin() + kBiasOffset,
                            grad.begin() + kBiasOffset + kRows);
    std::vector<float> fc(grad.begin(), grad.begin() + kRows * kCols);

    EXPECT_GIFT_ERROR(gift_allreduce_end_step(ar), GIFT_FAILED_PRECONDITION,
                      "gift_allreduce_end_step", "without BeginStep");
    const int32_t bias_layer[1] = {1};
    const int64_t zero[1] = {0};
    EXPECT_GIFT_ERROR(gift_allreduce_reduce_bucket(ar, bias_layer, zero, 1,
                                                   bias.data(), bias.size()),
                      GIFT_FAILED_PRECONDITION, "gift_allreduce_reduce_bucket",
                      "outside BeginStep");
    ASSERT_GIFT_OK(gift_allreduce_begin_step(ar));
    EXPECT_GIFT_ERROR(gift_allreduce_begin_step(ar), GIFT_FAILED_PRECONDITION,
                      "gift_allreduce_begin_step", "has not ended");
    std::vector<float> whole = grad;
    EXPECT_GIFT_ERROR(gift_allreduce_step(ar, whole.data(), whole.size()),
                      GIFT_FAILED_PRECONDITION, "gift_allreduce_step",
                      "inside an overlapped step");
    // Local argument errors, before anything is sent.
    EXPECT_GIFT_ERROR(gift_allreduce_reduce_bucket(ar, bias_layer, zero, 3,
                                                   bias.data(), bias.size()),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket",
                      "num_layers 3 exceeds the plan's 2 layers");
    EXPECT_GIFT_ERROR(gift_allreduce_reduce_bucket(ar, nullptr, zero, 1,
                                                   bias.data(), bias.size()),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket",
                      "layers is NULL");
    EXPECT_GIFT_ERROR(gift_allreduce_reduce_bucket(ar, bias_layer, zero, 1,
                                                   bias.data(), SIZE_MAX),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket",
                      "is too large");
    EXPECT_GIFT_ERROR(
        gift_allreduce_reduce_bucket(ar, bias_layer, zero, 1, nullptr, 16),
        GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket", "data is null");
    ASSERT_GIFT_OK(gift_allreduce_reduce_bucket(ar, bias_layer, zero, 1,
                                                bias.data(), bias.size()));
    const int32_t fc_layer[1] = {0};
    ASSERT_GIFT_OK(gift_allreduce_reduce_bucket(ar, fc_layer, zero, 1,
                                                fc.data(), fc.size()));
    ASSERT_GIFT_OK(gift_allreduce_end_step(ar));
    EXPECT_EQ(gift_allreduce_steps(ar), 1);
    gift_step_info_t info;
    info.struct_size = sizeof(info);
    ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &info));
    EXPECT_EQ(info.step, 0);
    EXPECT_EQ(info.num_layers, 2);

    // A step with a layer in no bucket fails at its end, on every rank.
    ASSERT_GIFT_OK(gift_allreduce_begin_step(ar));
    std::vector<float> scratch = bias;
    ASSERT_GIFT_OK(gift_allreduce_reduce_bucket(
        ar, bias_layer, zero, 1, scratch.data(), scratch.size()));
    EXPECT_GIFT_ERROR(gift_allreduce_end_step(ar), GIFT_FAILED_PRECONDITION,
                      "gift_allreduce_end_step", "1 of 2 layers");
    // A layout the plan does not allow fails the step (the bias does not
    // fit 15 floats), reported again by end_step.
    ASSERT_GIFT_OK(gift_allreduce_begin_step(ar));
    EXPECT_GIFT_ERROR(gift_allreduce_reduce_bucket(ar, bias_layer, zero, 1,
                                                   scratch.data(), 15),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket",
                      "bad bucket layout");
    EXPECT_GIFT_ERROR(gift_allreduce_end_step(ar), GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_end_step", "bad bucket layout");
    EXPECT_EQ(gift_allreduce_steps(ar), 3);
    fcs[rank] = fc;
    biases[rank] = bias;
    gift_allreduce_destroy(ar);
    gift_plan_destroy(plan);
    gift_communicator_destroy(comm);
  });
  ASSERT_EQ(fcs[0].size(), static_cast<size_t>(kRows * kCols));
  EXPECT_EQ(fcs[0], fcs[1]);
  EXPECT_EQ(biases[0], biases[1]);
  std::vector<float> got(kBucket, 0), want(kBucket, 0);
  for (int64_t i = 0; i < kRows * kCols; ++i) got[i] = fcs[0][i];
  for (int64_t i = 0; i < kRows; ++i) got[kBiasOffset + i] = biases[0][i];
  const double e_fc = RelL2(got, exact, 0, kRows * kCols);
  const double e_bias = RelL2(got, exact, kBiasOffset, kBiasOffset + kRows);
  EXPECT_GT(e_fc, 1e-4);
  EXPECT_LT(e_fc, 0.06);
  EXPECT_GT(e_bias, 1e-4);
  EXPECT_LT(e_bias, 0.06);
}

// The GIFT path without a daemon: a plan epoch with fc on it and a
// low-rank factor given by hand on every rank.
TEST(CApiTest, GiftPathWithFactorByHand) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  constexpr int64_t kR = 2;
  const std::vector<float> exact = ExactAverage(kWorld, kBucket);
  std::vector<std::vector<float>> results(kWorld);
  std::vector<gift_layer_info_t> fc_info(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    gift_plan_t* plan = TestPlan();
    gift_allreduce_t* ar = nullptr;
    ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &ar));
    // Orthonormal U (two coordinate axes): T shrinks them by 1/4.
    std::vector<float> u(kCols * kR, 0);
    u[0 * kR + 0] = 1;
    u[1 * kR + 1] = 1;
    const std::vector<float> c = {-0.75f, -0.75f}, c_inv = {3.0f, 3.0f};
    EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(
                          ar, "bias", 1, kCols, kR, u.data(), u.size(),
                          c.data(), 2, c_inv.data(), 2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_put_low_rank_factor", "not a 2-D layer");
    EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(
                          ar, "fc", 1, kCols + 1, kR, u.data(), u.size(),
                          c.data(), 2, c_inv.data(), 2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_put_low_rank_factor", "has d_in 24");
    EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(
                          ar, "fc", 1, kCols, kR, u.data(), u.size() - 1,
                          c.data(), 2, c_inv.data(), 2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_put_low_rank_factor",
                      "u has 47 floats, the factor needs 48");
    EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(
                          ar, "fc", 1, kCols, kR, u.data(), u.size(), nullptr,
                          2, c_inv.data(), 2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_put_low_rank_factor", "c is NULL");
    EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(
                          ar, "fc", -1, kCols, kR, u.data(), u.size(), c.data(),
                          2, c_inv.data(), 2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_put_low_rank_factor", "negative version");
    EXPECT_GIFT_ERROR(
        gift_allreduce_put_full_factor(ar, "fc", 1, kCols, u.data(), u.size(),
                                       u.data(), u.size()),
        GIFT_INVALID_ARGUMENT, "gift_allreduce_put_full_factor",
        "t has 48 floats, the factor needs 576");
    ASSERT_GIFT_OK(gift_allreduce_put_low_rank_factor(
        ar, "fc", 1, kCols, kR, u.data(), u.size(), c.data(), c.size(),
        c_inv.data(), c_inv.size()));

    gift_plan_builder_t* b = TestBuilder();
    ASSERT_GIFT_OK(gift_plan_builder_set_path(b, "fc", GIFT_PATH_GIFT));
    gift_plan_t* epoch1 = nullptr;
    ASSERT_GIFT_OK(gift_plan_create(b, 1, kBucket, &epoch1));
    gift_plan_t* other = nullptr;
    ASSERT_GIFT_OK(gift_plan_create(b, 2, kBucket + 1, &other));
    EXPECT_GIFT_ERROR(gift_allreduce_add_plan(ar, other), GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_add_plan", "layout");
    ASSERT_GIFT_OK(gift_allreduce_add_plan(ar, epoch1));
    EXPECT_GIFT_ERROR(gift_allreduce_add_plan(ar, epoch1),
                      GIFT_INVALID_ARGUMENT, "gift_allreduce_add_plan",
                      "must exceed 1");
    gift_plan_destroy(epoch1);
    gift_plan_destroy(other);
    gift_plan_builder_destroy(b);

    std::vector<float> grad = Gradient(rank, kBucket);
    ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
    EXPECT_EQ(gift_allreduce_current_epoch(ar), 1);
    gift_step_info_t info;
    info.struct_size = sizeof(info);
    ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &info));
    EXPECT_EQ(info.plan_epoch, 1);
    EXPECT_EQ(info.gift_layers, 1);
    EXPECT_GT(info.bytes_gift, 0u);
    fc_info[rank].struct_size = sizeof(gift_layer_info_t);
    ASSERT_GIFT_OK(gift_allreduce_last_layer(ar, 0, &fc_info[rank]));
    results[rank] = grad;
    gift_allreduce_destroy(ar);
    gift_plan_destroy(plan);
    gift_communicator_destroy(comm);
  });
  for (const gift_layer_info_t& l : fc_info) {
    EXPECT_EQ(l.path, GIFT_PATH_GIFT);
    EXPECT_EQ(l.factor_version, 1);
  }
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBucket));
  EXPECT_TRUE(SameLayers(results[0], results[1])) << "ranks differ";
  const double e = RelL2(results[0], exact, 0, kRows * kCols);
  EXPECT_GT(e, 1e-4);
  EXPECT_LT(e, 0.06);
}

// Audit steps: with an interval of 1 the second step also runs the FP32
// allreduce and reports the error of what it applied against that average,
// which is what this test computes itself.
TEST(CApiTest, AuditStepReportsTheErrorAgainstFp32) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<gift_step_info_t> steps(kWorld);
  std::vector<gift_layer_info_t> fc(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    gift_plan_t* plan = TestPlan();
    gift_allreduce_options_t* o = gift_allreduce_options_create();
    EXPECT_GIFT_ERROR(gift_allreduce_options_set_audit_interval(o, -1),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_options_set_audit_interval", ">= 0");
    ASSERT_GIFT_OK(gift_allreduce_options_set_audit_interval(o, 1));
    ASSERT_GIFT_OK(gift_allreduce_options_set_audit_drift(o, 1));
    gift_allreduce_t* ar = nullptr;
    ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, o, &ar));
    gift_allreduce_options_destroy(o);
    EXPECT_GIFT_ERROR(gift_allreduce_set_audit_interval(ar, -2),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_set_audit_interval", "negative");
    for (int step = 0; step < 2; ++step) {
      std::vector<float> grad = Gradient(rank, kBucket, 10 + step);
      ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
      gift_step_info_t info;
      info.struct_size = sizeof(info);
      ASSERT_GIFT_OK(gift_allreduce_last_step(ar, &info));
      EXPECT_EQ(info.audit_step, step == 1 ? 1 : 0) << step;
      results[rank] = grad;
      steps[rank] = info;
    }
    fc[rank].struct_size = sizeof(gift_layer_info_t);
    ASSERT_GIFT_OK(gift_allreduce_last_layer(ar, 0, &fc[rank]));
    gift_allreduce_destroy(ar);
    gift_plan_destroy(plan);
    gift_communicator_destroy(comm);
  });
  const std::vector<float> exact = ExactAverage(kWorld, kBucket, 11);
  ASSERT_TRUE(SameLayers(results[0], results[1]));
  const double e = RelL2(results[0], exact, 0, kRows * kCols);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_GT(steps[r].bytes_audit, 0u);
    EXPECT_EQ(fc[r].audited, 1);
    EXPECT_NEAR(fc[r].audit_rel_l2, e, 1e-3 * e) << r;
    EXPECT_GT(fc[r].audit_cosine, 0.99);
    EXPECT_LT(fc[r].audit_cosine, 1.0);
  }
  EXPECT_EQ(fc[0].audit_rel_l2, fc[1].audit_rel_l2);
}

TEST(CApiTest, PlanMismatchFailsOnEveryRank) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<gift_status_t> codes(kWorld, GIFT_OK);
  std::vector<std::string> messages(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    gift_plan_builder_t* b = TestBuilder();
    if (rank == 1) gift_plan_builder_set_format(b, "bias", GIFT_FP8_E5M2, 0);
    gift_plan_t* plan = nullptr;
    ASSERT_GIFT_OK(gift_plan_create(b, 0, kBucket, &plan));
    gift_allreduce_t* ar = nullptr;
    codes[rank] = gift_allreduce_create(comm, plan, nullptr, &ar);
    messages[rank] = LastError();
    EXPECT_EQ(ar, nullptr);
    gift_plan_destroy(plan);
    gift_plan_builder_destroy(b);
    gift_communicator_destroy(comm);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(codes[r], GIFT_FAILED_PRECONDITION) << r;
    EXPECT_NE(messages[r].find("gift_allreduce_create: bucket plan mismatch"),
              std::string::npos)
        << messages[r];
  }
}

}  // namespace
