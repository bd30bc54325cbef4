// The C ABI of libgift (include/gift/c_api.h), linked against libgift.so
// alone: status names and the version, error codes and messages for bad
// input of every kind, communicator options, plan builders and plans,
// barrier and broadcast on 2 ranks, and the per-thread message. The
// allreduce and the attachment: c_api_allreduce_test.cc,
// c_api_attachment_test.cc.
#include "gift/c_api.h"

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

#include "tests/api/api_testutil.h"
#include "tests/api/c_api_testutil.h"

namespace {

using gift::testing::Connect;
using gift::testing::kBucket;
using gift::testing::kCols;
using gift::testing::kRows;
using gift::testing::LastError;
using gift::testing::RunRanks;
using gift::testing::TempDir;
using gift::testing::TestBuilder;
using gift::testing::TestPlan;

TEST(CApiTest, StatusNamesAndVersion) {
  EXPECT_STREQ(gift_status_name(GIFT_OK), "OK");
  EXPECT_STREQ(gift_status_name(GIFT_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(gift_status_name(GIFT_UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(gift_status_name(static_cast<gift_status_t>(99)), "UNKNOWN");
  EXPECT_STREQ(gift_status_name(static_cast<gift_status_t>(-1)), "UNKNOWN");
  const std::string v = gift_version();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_NE(gift_last_error_message(), nullptr);
}

TEST(CApiTest, NullHandlesAreInvalidArgumentsNotCrashes) {
  EXPECT_GIFT_ERROR(gift_communicator_options_set_rank(nullptr, 0),
                    GIFT_INVALID_ARGUMENT, "gift_communicator_options_set_rank",
                    "options is NULL");
  gift_communicator_t* comm = reinterpret_cast<gift_communicator_t*>(1);
  EXPECT_GIFT_ERROR(gift_communicator_create(nullptr, &comm),
                    GIFT_INVALID_ARGUMENT, "gift_communicator_create",
                    "options is NULL");
  EXPECT_EQ(comm, nullptr);  // out is reset on failure
  gift_communicator_options_t* o = gift_communicator_options_create();
  EXPECT_GIFT_ERROR(gift_communicator_create(o, nullptr), GIFT_INVALID_ARGUMENT,
                    "gift_communicator_create", "out is NULL");
  EXPECT_GIFT_ERROR(gift_communicator_options_set_store_dir(o, nullptr),
                    GIFT_INVALID_ARGUMENT,
                    "gift_communicator_options_set_store_dir", "dir is NULL");
  EXPECT_GIFT_ERROR(gift_communicator_options_set_daemon_store(o, nullptr, ""),
                    GIFT_INVALID_ARGUMENT,
                    "gift_communicator_options_set_daemon_store",
                    "job_id is empty");
  gift_communicator_options_destroy(o);
  EXPECT_GIFT_ERROR(gift_communicator_barrier(nullptr), GIFT_INVALID_ARGUMENT,
                    "gift_communicator_barrier", "comm is NULL");
  EXPECT_GIFT_ERROR(gift_communicator_broadcast(nullptr, nullptr, 0, 0),
                    GIFT_INVALID_ARGUMENT, "gift_communicator_broadcast",
                    "comm is NULL");
  float x = 0;
  EXPECT_GIFT_ERROR(gift_allreduce_step(nullptr, &x, 1), GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_step", "allreduce is NULL");
  EXPECT_GIFT_ERROR(gift_allreduce_begin_step(nullptr), GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_begin_step", "allreduce is NULL");
  EXPECT_GIFT_ERROR(gift_allreduce_end_step(nullptr), GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_end_step", "allreduce is NULL");
  EXPECT_GIFT_ERROR(
      gift_allreduce_reduce_bucket(nullptr, nullptr, nullptr, 0, nullptr, 0),
      GIFT_INVALID_ARGUMENT, "gift_allreduce_reduce_bucket",
      "allreduce is NULL");
  EXPECT_GIFT_ERROR(gift_allreduce_add_plan(nullptr, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_add_plan",
                    "allreduce is NULL");
  EXPECT_GIFT_ERROR(gift_allreduce_attach(nullptr, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_attach",
                    "allreduce is NULL");
  gift_step_info_t info;
  info.struct_size = sizeof(info);
  EXPECT_GIFT_ERROR(gift_allreduce_last_step(nullptr, &info),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_last_step",
                    "allreduce is NULL");
  gift_allreduce_t* ar = reinterpret_cast<gift_allreduce_t*>(1);
  EXPECT_GIFT_ERROR(gift_allreduce_create(nullptr, nullptr, nullptr, &ar),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_create",
                    "comm is NULL");
  EXPECT_EQ(ar, nullptr);
  EXPECT_GIFT_ERROR(gift_allreduce_put_low_rank_factor(nullptr, "fc", 0, 1, 1,
                                                       &x, 1, &x, 1, &x, 1),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_put_low_rank_factor",
                    "allreduce is NULL");
  EXPECT_GIFT_ERROR(gift_plan_create(nullptr, 0, 0, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_plan_create",
                    "builder is NULL");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(nullptr, "a", nullptr, 1, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "builder is NULL");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_path(nullptr, "a", GIFT_PATH_GIFT),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_path",
                    "builder is NULL");
  EXPECT_GIFT_ERROR(gift_attachment_create(nullptr, nullptr, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_create",
                    "options is NULL");
  EXPECT_GIFT_ERROR(gift_attachment_sketch(nullptr, "fc", &x, 1, 1, nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_sketch",
                    "attachment is NULL");
  gift_attachment_info_t ainfo;
  ainfo.struct_size = sizeof(ainfo);
  EXPECT_GIFT_ERROR(gift_attachment_get_info(nullptr, &ainfo),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_get_info",
                    "attachment is NULL");
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_mode(nullptr, GIFT_MODE_FP32),
                    GIFT_INVALID_ARGUMENT, "gift_allreduce_options_set_mode",
                    "options is NULL");
  EXPECT_GIFT_ERROR(gift_attachment_options_set_job_id(nullptr, "j"),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_options_set_job_id",
                    "options is NULL");

  // Getters: the documented neutral values.
  EXPECT_EQ(gift_communicator_rank(nullptr), -1);
  EXPECT_EQ(gift_communicator_world_size(nullptr), 0);
  EXPECT_EQ(gift_communicator_device_memory(nullptr), 0);
  EXPECT_EQ(gift_communicator_bytes_sent(nullptr), 0u);
  EXPECT_EQ(gift_plan_epoch(nullptr), 0);
  EXPECT_EQ(gift_plan_bucket_elements(nullptr), 0);
  EXPECT_EQ(gift_plan_communicated_elements(nullptr), 0);
  EXPECT_EQ(gift_plan_num_layers(nullptr), 0u);
  EXPECT_EQ(gift_plan_fingerprint(nullptr), 0u);
  EXPECT_EQ(gift_allreduce_current_epoch(nullptr), 0);
  EXPECT_EQ(gift_allreduce_steps(nullptr), 0);
  EXPECT_EQ(gift_allreduce_stream(nullptr), nullptr);
  EXPECT_EQ(gift_attachment_wants_sketch(nullptr, "fc"), 0);
  EXPECT_EQ(gift_attachment_sketch_stream(nullptr), nullptr);

  // Destroying NULL is a no-op.
  gift_communicator_options_destroy(nullptr);
  gift_communicator_destroy(nullptr);
  gift_plan_builder_destroy(nullptr);
  gift_plan_destroy(nullptr);
  gift_allreduce_options_destroy(nullptr);
  gift_allreduce_destroy(nullptr);
  gift_attachment_options_destroy(nullptr);
  gift_attachment_destroy(nullptr);
}

TEST(CApiTest, EnumValuesOutOfRangeAreRejected) {
  gift_communicator_options_t* o = gift_communicator_options_create();
  EXPECT_GIFT_ERROR(
      gift_communicator_options_set_backend(o, static_cast<gift_backend_t>(7)),
      GIFT_INVALID_ARGUMENT, "gift_communicator_options_set_backend",
      "unknown backend");
  EXPECT_EQ(gift_communicator_options_set_backend(o, GIFT_BACKEND_GLOO),
            GIFT_OK);
  EXPECT_EQ(LastError(), "");  // cleared by the successful call
  gift_communicator_options_destroy(o);

  gift_allreduce_options_t* a = gift_allreduce_options_create();
  EXPECT_GIFT_ERROR(
      gift_allreduce_options_set_mode(a, static_cast<gift_allreduce_mode_t>(4)),
      GIFT_INVALID_ARGUMENT, "gift_allreduce_options_set_mode", "unknown mode");
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_piece_bytes(a, 3),
                    GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_options_set_piece_bytes", ">= 4");
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_probe_interval(a, -1),
                    GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_options_set_probe_interval", ">= 0");
  gift_allreduce_options_destroy(a);

  gift_plan_builder_t* b = TestBuilder();
  EXPECT_GIFT_ERROR(
      gift_plan_builder_set_path(b, "fc", static_cast<gift_layer_path_t>(2)),
      GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_path", "unknown path");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_format(
                        b, "fc", static_cast<gift_wire_format_t>(-3), 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_format",
                    "unknown wire format -3");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_format(
                        b, "fc", static_cast<gift_wire_format_t>(4), 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_format",
                    "unknown wire format 4");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_format(b, "fc", GIFT_FP8_E5M2, -1),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_format",
                    "negative block size");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_transform(
                        b, "fc", static_cast<gift_transform_t>(9)),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_transform",
                    "unknown transform");
  gift_plan_builder_destroy(b);
}

TEST(CApiTest, EuclidErrorFeedbackOption) {
  gift_allreduce_options_t* a = gift_allreduce_options_create();
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_euclid_error_feedback(
                        a, static_cast<gift_euclid_feedback_t>(3)),
                    GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_options_set_euclid_error_feedback",
                    "unknown Euclidean error feedback");
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_euclid_error_feedback(
                        nullptr, GIFT_EUCLID_FEEDBACK_ON),
                    GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_options_set_euclid_error_feedback",
                    "options is NULL");
  for (gift_euclid_feedback_t f :
       {GIFT_EUCLID_FEEDBACK_AUTO, GIFT_EUCLID_FEEDBACK_OFF,
        GIFT_EUCLID_FEEDBACK_ON}) {
    EXPECT_EQ(gift_allreduce_options_set_euclid_error_feedback(a, f), GIFT_OK);
  }
  gift_allreduce_options_destroy(a);
}

TEST(CApiTest, OwnerReleaseCapOption) {
  gift_allreduce_options_t* a = gift_allreduce_options_create();
  for (float cap : {-1.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    EXPECT_GIFT_ERROR(gift_allreduce_options_set_owner_release_cap(a, cap),
                      GIFT_INVALID_ARGUMENT,
                      "gift_allreduce_options_set_owner_release_cap",
                      "owner release cap must be finite and >= 0");
  }
  EXPECT_GIFT_ERROR(gift_allreduce_options_set_owner_release_cap(nullptr, 0),
                    GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_options_set_owner_release_cap",
                    "options is NULL");
  EXPECT_EQ(gift_allreduce_options_set_owner_release_cap(a, 0.0f), GIFT_OK);
  EXPECT_EQ(gift_allreduce_options_set_owner_release_cap(a, 0.5f), GIFT_OK);
  gift_allreduce_options_destroy(a);
}

TEST(CApiTest, CommunicatorOptionsAreCheckedAtCreate) {
  TempDir dir("gift_api_test");
  struct Case {
    int rank, world;
    bool store;
    double timeout;
    const char* needle;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Case& c : {Case{-1, 0, true, 30, "rank -1 of world size 0"},
                        Case{2, 2, true, 30, "rank 2 of world size 2"},
                        Case{0, 1, false, 30, "no rendezvous store"},
                        Case{0, 1, true, 0, "timeout_seconds"},
                        Case{0, 1, true, nan, "timeout_seconds"},
                        Case{0, 1, true, INFINITY, "timeout_seconds"}}) {
    gift_communicator_options_t* o = gift_communicator_options_create();
    if (c.rank != -1) gift_communicator_options_set_rank(o, c.rank);
    if (c.world != 0) gift_communicator_options_set_world_size(o, c.world);
    if (c.store) gift_communicator_options_set_store_dir(o, dir.path().c_str());
    gift_communicator_options_set_timeout_seconds(o, c.timeout);
    gift_communicator_t* comm = nullptr;
    EXPECT_GIFT_ERROR(gift_communicator_create(o, &comm), GIFT_INVALID_ARGUMENT,
                      "gift_communicator_create", c.needle);
    EXPECT_EQ(comm, nullptr);
    gift_communicator_options_destroy(o);
  }
  // A daemon store overrides the directory, and needs a job.
  gift_communicator_options_t* o = gift_communicator_options_create();
  gift_communicator_options_set_rank(o, 0);
  gift_communicator_options_set_world_size(o, 1);
  gift_communicator_options_set_device(o, -1);
  gift_communicator_options_set_store_dir(o, dir.path().c_str());
  gift_communicator_t* comm = nullptr;
  EXPECT_GIFT_ERROR(gift_communicator_create(o, &comm), GIFT_INVALID_ARGUMENT,
                    "gift_communicator_create", "negative device");
  gift_communicator_options_destroy(o);
}

TEST(CApiTest, PlanBuilderRejectsBadLayers) {
  gift_plan_builder_t* b = gift_plan_builder_create();
  const int64_t good[2] = {4, 8};
  const int64_t negative[2] = {4, -8};
  const int64_t huge[2] = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, nullptr, good, 2, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "name is NULL");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "", good, 2, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "name is empty");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", good, 0, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "ndim must be 1 or 2, is 0");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", good, 3, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "ndim must be 1 or 2, is 3");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", nullptr, 2, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "shape is NULL");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", negative, 2, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "negative dimension -8");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", huge, 2, 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "overflows");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", good, 2, -1),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "negative offset");
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(
                        b, "w", good, 2, std::numeric_limits<int64_t>::max()),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_add_layer",
                    "offset + elements overflows");
  ASSERT_GIFT_OK(gift_plan_builder_add_layer(b, "w", good, 2, 0));
  EXPECT_GIFT_ERROR(gift_plan_builder_add_layer(b, "w", good, 2, 32),
                    GIFT_ALREADY_EXISTS, "gift_plan_builder_add_layer",
                    "'w' was already added");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_path(b, "nope", GIFT_PATH_GIFT),
                    GIFT_NOT_FOUND, "gift_plan_builder_set_path",
                    "no layer 'nope'");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_path(b, nullptr, GIFT_PATH_GIFT),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_path",
                    "layer is NULL");

  // What only the whole plan shows.
  gift_plan_t* plan = reinterpret_cast<gift_plan_t*>(1);
  EXPECT_GIFT_ERROR(gift_plan_create(b, 0, 31, &plan), GIFT_INVALID_ARGUMENT,
                    "gift_plan_create", "end past the bucket");
  EXPECT_EQ(plan, nullptr);
  EXPECT_GIFT_ERROR(gift_plan_create(b, -1, 32, &plan), GIFT_INVALID_ARGUMENT,
                    "gift_plan_create", "negative epoch");
  EXPECT_GIFT_ERROR(
      gift_plan_create(b, 0, std::numeric_limits<int64_t>::max(), &plan),
      GIFT_INVALID_ARGUMENT, "gift_plan_create", "too large");
  const int64_t bias[1] = {8};
  ASSERT_GIFT_OK(gift_plan_builder_add_layer(b, "bias", bias, 1, 16));
  EXPECT_GIFT_ERROR(gift_plan_create(b, 0, 64, &plan), GIFT_INVALID_ARGUMENT,
                    "gift_plan_create", "'bias': offset 16 overlaps");
  gift_plan_builder_destroy(b);

  b = gift_plan_builder_create();
  ASSERT_GIFT_OK(gift_plan_builder_add_layer(b, "bias", bias, 1, 0));
  ASSERT_GIFT_OK(gift_plan_builder_set_path(b, "bias", GIFT_PATH_GIFT));
  EXPECT_GIFT_ERROR(gift_plan_create(b, 0, 8, &plan), GIFT_INVALID_ARGUMENT,
                    "gift_plan_create", "2-D");
  gift_plan_builder_destroy(b);
}

TEST(CApiTest, PlanGettersAndFingerprint) {
  gift_plan_t* a = TestPlan();
  gift_plan_t* a2 = TestPlan();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a2, nullptr);
  EXPECT_EQ(gift_plan_epoch(a), 0);
  EXPECT_EQ(gift_plan_bucket_elements(a), kBucket);
  EXPECT_EQ(gift_plan_communicated_elements(a), kRows * kCols + kRows);
  EXPECT_EQ(gift_plan_num_layers(a), 2u);
  EXPECT_EQ(gift_plan_fingerprint(a), gift_plan_fingerprint(a2));
  EXPECT_NE(gift_plan_fingerprint(a), 0u);

  gift_plan_builder_t* b = TestBuilder();
  ASSERT_GIFT_OK(gift_plan_builder_set_path(b, "fc", GIFT_PATH_GIFT));
  gift_plan_t* g = nullptr;
  ASSERT_GIFT_OK(gift_plan_create(b, 0, kBucket, &g));
  EXPECT_NE(gift_plan_fingerprint(g), gift_plan_fingerprint(a));
  ASSERT_GIFT_OK(gift_plan_builder_set_path(b, "fc", GIFT_PATH_EUCLID));
  ASSERT_GIFT_OK(gift_plan_builder_set_format(b, "bias", GIFT_FP8_E5M2, 4));
  gift_plan_t* f = nullptr;
  ASSERT_GIFT_OK(gift_plan_create(b, 0, kBucket, &f));
  EXPECT_NE(gift_plan_fingerprint(f), gift_plan_fingerprint(a));
  EXPECT_NE(gift_plan_fingerprint(f), gift_plan_fingerprint(g));
  gift_plan_builder_destroy(b);
  gift_plan_destroy(a);
  gift_plan_destroy(a2);
  gift_plan_destroy(g);
  gift_plan_destroy(f);
}

// The wire formats, 4-bit included, have stable values (those of
// gift::WireFormat and giftd's plans) and travel in the plan.
TEST(CApiTest, WireFormatsHaveStableValuesAndTravelInThePlan) {
  static_assert(GIFT_FORMAT_E4M3 == 0 && GIFT_FORMAT_E5M2 == 1 &&
                GIFT_FORMAT_NVFP4 == 2 && GIFT_FORMAT_MXFP4 == 3);
  static_assert(GIFT_FP8_E4M3 == GIFT_FORMAT_E4M3 &&
                GIFT_FP8_E5M2 == GIFT_FORMAT_E5M2);
  const int64_t w[2] = {8, 32}, bias[1] = {20};
  gift_plan_builder_t* b = gift_plan_builder_create();
  ASSERT_GIFT_OK(gift_plan_builder_add_layer(b, "w", w, 2, 0));
  ASSERT_GIFT_OK(gift_plan_builder_add_layer(b, "bias", bias, 1, 256));
  gift_plan_t* e4m3 = nullptr;
  ASSERT_GIFT_OK(gift_plan_create(b, 0, 276, &e4m3));
  gift_wire_format_t f = GIFT_FORMAT_MXFP4;
  ASSERT_GIFT_OK(gift_plan_layer_format(e4m3, "w", &f));
  EXPECT_EQ(f, GIFT_FORMAT_E4M3);

  const gift_wire_format_t four_bit[2] = {GIFT_FORMAT_NVFP4, GIFT_FORMAT_MXFP4};
  uint64_t prints[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_GIFT_OK(gift_plan_builder_set_format(b, "w", four_bit[i], 0));
    // A 1-D layer may end in a ragged block (20 = 16 + 4, or < 32).
    ASSERT_GIFT_OK(gift_plan_builder_set_format(b, "bias", four_bit[i], 0));
    gift_plan_t* p = nullptr;
    ASSERT_GIFT_OK(gift_plan_create(b, 0, 276, &p));
    ASSERT_GIFT_OK(gift_plan_layer_format(p, "w", &f));
    EXPECT_EQ(f, four_bit[i]);
    ASSERT_GIFT_OK(gift_plan_layer_format(p, "bias", &f));
    EXPECT_EQ(f, four_bit[i]);
    prints[i] = gift_plan_fingerprint(p);
    EXPECT_NE(prints[i], gift_plan_fingerprint(e4m3));
    gift_plan_destroy(p);
  }
  EXPECT_NE(prints[0], prints[1]);

  // Blocks run along the rows: d_in 24 takes neither 4-bit format.
  gift_plan_builder_t* narrow = TestBuilder();
  gift_plan_t* p = nullptr;
  ASSERT_GIFT_OK(
      gift_plan_builder_set_format(narrow, "fc", GIFT_FORMAT_NVFP4, 0));
  EXPECT_GIFT_ERROR(gift_plan_create(narrow, 0, kBucket, &p),
                    GIFT_INVALID_ARGUMENT, "gift_plan_create",
                    "multiple of 16");
  ASSERT_GIFT_OK(
      gift_plan_builder_set_format(narrow, "fc", GIFT_FORMAT_MXFP4, 0));
  EXPECT_GIFT_ERROR(gift_plan_create(narrow, 0, kBucket, &p),
                    GIFT_INVALID_ARGUMENT, "gift_plan_create",
                    "multiple of 32");
  EXPECT_EQ(p, nullptr);
  gift_plan_builder_destroy(narrow);
  // A 4-bit format has its own block.
  ASSERT_GIFT_OK(gift_plan_builder_set_format(b, "w", GIFT_FORMAT_NVFP4, 8));
  EXPECT_GIFT_ERROR(gift_plan_create(b, 0, 276, &p), GIFT_INVALID_ARGUMENT,
                    "gift_plan_create", "blocks of 16");

  EXPECT_GIFT_ERROR(gift_plan_layer_format(e4m3, "nope", &f), GIFT_NOT_FOUND,
                    "gift_plan_layer_format", "no layer 'nope'");
  EXPECT_GIFT_ERROR(gift_plan_layer_format(nullptr, "w", &f),
                    GIFT_INVALID_ARGUMENT, "gift_plan_layer_format",
                    "plan is NULL");
  EXPECT_GIFT_ERROR(gift_plan_layer_format(e4m3, "w", nullptr),
                    GIFT_INVALID_ARGUMENT, "gift_plan_layer_format",
                    "out is NULL");
  gift_plan_destroy(e4m3);
  gift_plan_builder_destroy(b);
}

TEST(CApiTest, BarrierAndBroadcast) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<std::vector<int32_t>> got(kWorld);
  std::vector<uint64_t> sent(kWorld);
  RunRanks(kWorld, [&](int rank) {
    gift_communicator_t* comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    ASSERT_GIFT_OK(gift_communicator_barrier(comm));
    std::vector<int32_t> v(5, rank == 1 ? 7 : -1);
    EXPECT_GIFT_ERROR(gift_communicator_broadcast(comm, v.data(), 20, 2),
                      GIFT_INVALID_ARGUMENT, "gift_communicator_broadcast",
                      "root 2 outside [0, 2)");
    EXPECT_GIFT_ERROR(gift_communicator_broadcast(comm, nullptr, 20, 0),
                      GIFT_INVALID_ARGUMENT, "gift_communicator_broadcast",
                      "data is null");
    ASSERT_GIFT_OK(gift_communicator_broadcast(comm, v.data(),
                                               v.size() * sizeof(int32_t), 1));
    got[rank] = v;
    sent[rank] = gift_communicator_bytes_sent(comm);
    gift_communicator_destroy(comm);
  });
  for (const auto& v : got) EXPECT_EQ(v, std::vector<int32_t>(5, 7));
  EXPECT_EQ(sent[1], 5 * sizeof(int32_t));  // the root sent its 20 bytes
  EXPECT_EQ(sent[0], 0u);
}

// The message belongs to the thread whose call failed.
TEST(CApiTest, LastErrorIsPerThread) {
  EXPECT_EQ(gift_communicator_barrier(nullptr), GIFT_INVALID_ARGUMENT);
  std::string other = "unset";
  std::thread([&] { other = gift_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(LastError().find("gift_communicator_barrier"), std::string::npos);
}

}  // namespace
