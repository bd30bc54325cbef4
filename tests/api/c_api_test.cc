// The C ABI of libgift (include/gift/c_api.h), linked against libgift.so
// alone: error codes and messages for bad input of every kind, the FP8
// allreduce on 2 ranks (threads, each with its own communicator) against
// the exact average, fp32 exactly, overlapped steps, the GIFT path with a
// factor given by hand, a plan mismatch, the attachment without a daemon,
// ownership in any destruction order, and the per-thread message.
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

namespace {

using gift::testing::Gradient;
using gift::testing::RelL2;
using gift::testing::RunRanks;
using gift::testing::TempDir;

// The layout of the multi-rank tests: a 16 x 24 matrix, a gap of 8, a bias
// of 16, a trailing gap of 4.
constexpr int64_t kRows = 16, kCols = 24;
constexpr int64_t kFcOffset = 0, kBiasOffset = kRows * kCols + 8;
constexpr int64_t kBucket = kBiasOffset + kRows + 4;

std::string LastError() { return gift_last_error_message(); }

// Expects `call` to return `code` with a message naming `fn` and `needle`.
#define EXPECT_GIFT_ERROR(call, code, fn, needle)                  \
  do {                                                             \
    const gift_status_t gift_s_ = (call);                          \
    EXPECT_EQ(gift_s_, code) << gift_status_name(gift_s_);         \
    const std::string gift_m_ = LastError();                       \
    EXPECT_NE(gift_m_.find(fn), std::string::npos) << gift_m_;     \
    EXPECT_NE(gift_m_.find(needle), std::string::npos) << gift_m_; \
  } while (0)

#define ASSERT_GIFT_OK(call)                                 \
  do {                                                       \
    const gift_status_t gift_s_ = (call);                    \
    ASSERT_EQ(gift_s_, GIFT_OK)                              \
        << gift_status_name(gift_s_) << ": " << LastError(); \
    ASSERT_EQ(LastError(), "");                              \
  } while (0)

gift_plan_builder_t* TestBuilder() {
  gift_plan_builder_t* b = gift_plan_builder_create();
  const int64_t fc[2] = {kRows, kCols};
  const int64_t bias[1] = {kRows};
  EXPECT_EQ(gift_plan_builder_add_layer(b, "fc", fc, 2, kFcOffset), GIFT_OK);
  EXPECT_EQ(gift_plan_builder_add_layer(b, "bias", bias, 1, kBiasOffset),
            GIFT_OK);
  return b;
}

gift_plan_t* TestPlan(int64_t epoch = 0) {
  gift_plan_builder_t* b = TestBuilder();
  gift_plan_t* plan = nullptr;
  EXPECT_EQ(gift_plan_create(b, epoch, kBucket, &plan), GIFT_OK) << LastError();
  gift_plan_builder_destroy(b);
  return plan;
}

// A communicator of rank `rank` of `world` over `dir`, or null (with a
// gtest failure).
gift_communicator_t* Connect(int rank, int world, const std::string& dir) {
  gift_communicator_options_t* o = gift_communicator_options_create();
  EXPECT_EQ(gift_communicator_options_set_rank(o, rank), GIFT_OK);
  EXPECT_EQ(gift_communicator_options_set_world_size(o, world), GIFT_OK);
  EXPECT_EQ(gift_communicator_options_set_store_dir(o, dir.c_str()), GIFT_OK);
  EXPECT_EQ(gift_communicator_options_set_hostname(o, "127.0.0.1"), GIFT_OK);
  EXPECT_EQ(gift_communicator_options_set_timeout_seconds(o, 30), GIFT_OK);
  gift_communicator_t* comm = nullptr;
  EXPECT_EQ(gift_communicator_create(o, &comm), GIFT_OK) << LastError();
  gift_communicator_options_destroy(o);
  return comm;
}

// The element-wise average of the ranks' gradients, in double, rounded.
std::vector<float> ExactAverage(int world, size_t n, uint32_t seed = 1) {
  std::vector<double> sum(n, 0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> g = Gradient(r, n, seed);
    for (size_t i = 0; i < n; ++i) sum[i] += g[i];
  }
  std::vector<float> avg(n);
  for (size_t i = 0; i < n; ++i) avg[i] = static_cast<float>(sum[i] / world);
  return avg;
}

// The layers' elements of two buckets agree bit for bit (gaps are the
// ranks' own data).
bool SameLayers(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != static_cast<size_t>(kBucket) || b.size() != a.size()) {
    return false;
  }
  return std::memcmp(a.data() + kFcOffset, b.data() + kFcOffset,
                     kRows * kCols * sizeof(float)) == 0 &&
         std::memcmp(a.data() + kBiasOffset, b.data() + kBiasOffset,
                     kRows * sizeof(float)) == 0;
}

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
                        b, "fc", static_cast<gift_fp8_format_t>(-3), 0),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_format",
                    "unknown FP8 format");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_format(b, "fc", GIFT_FP8_E5M2, -1),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_format",
                    "negative block size");
  EXPECT_GIFT_ERROR(gift_plan_builder_set_transform(
                        b, "fc", static_cast<gift_transform_t>(9)),
                    GIFT_INVALID_ARGUMENT, "gift_plan_builder_set_transform",
                    "unknown transform");
  gift_plan_builder_destroy(b);
}

TEST(CApiTest, CommunicatorOptionsAreCheckedAtCreate) {
  TempDir dir;
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

// Two ranks, FP8: each result within FP8 error of the exact average (and
// not equal to it: it was quantized), bit-identical across ranks, gaps
// untouched; argument errors change nothing and break nothing.
TEST(CApiTest, Fp8AllReduceOnTwoRanks) {
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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

// Without a daemon the attachment never stops training: the allreduce
// steps Euclidean, sketches are checked and taken (or skipped), and the
// handles may be destroyed in any order.
TEST(CApiTest, AttachmentWithoutDaemon) {
  TempDir dir;
  gift_communicator_t* comm = Connect(0, 1, dir.Sub("store"));
  ASSERT_NE(comm, nullptr);
  gift_plan_t* plan = TestPlan();
  gift_allreduce_t* ar = nullptr;
  ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &ar));
  gift_communicator_destroy(comm);  // the allreduce keeps it alive

  gift_attachment_options_t* o = gift_attachment_options_create();
  ASSERT_GIFT_OK(gift_attachment_options_set_agent_socket(
      o, dir.Sub("no-daemon.sock").c_str()));
  ASSERT_GIFT_OK(gift_attachment_options_set_rank(o, 0));
  ASSERT_GIFT_OK(gift_attachment_options_set_world_size(o, 1));
  gift_attachment_t* att = reinterpret_cast<gift_attachment_t*>(1);
  EXPECT_GIFT_ERROR(gift_attachment_create(o, plan, &att),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_create", "job_id");
  EXPECT_EQ(att, nullptr);
  ASSERT_GIFT_OK(gift_attachment_options_set_job_id(o, "c-api-test"));
  ASSERT_GIFT_OK(gift_attachment_options_set_retry_interval_seconds(o, -1));
  EXPECT_GIFT_ERROR(gift_attachment_create(o, plan, &att),
                    GIFT_INVALID_ARGUMENT, "gift_attachment_create",
                    "retry_interval_seconds");
  ASSERT_GIFT_OK(gift_attachment_options_set_retry_interval_seconds(o, 3600));
  ASSERT_GIFT_OK(gift_attachment_create(o, plan, &att));
  ASSERT_NE(att, nullptr);

  gift_attachment_info_t info;
  info.struct_size = sizeof(info);
  ASSERT_GIFT_OK(gift_attachment_get_info(att, &info));
  EXPECT_EQ(info.attached, 0);
  EXPECT_EQ(info.attaches, 0);
  EXPECT_EQ(gift_attachment_wants_sketch(att, "fc"), 0);
  EXPECT_EQ(gift_attachment_sketch_stream(att), nullptr);
  const std::vector<float> act = Gradient(3, 4 * kCols);
  EXPECT_GIFT_ERROR(
      gift_attachment_sketch(att, "bias", act.data(), kRows, 1, nullptr),
      GIFT_INVALID_ARGUMENT, "gift_attachment_sketch", "not a 2-D layer");
  EXPECT_GIFT_ERROR(
      gift_attachment_sketch(att, "fc", act.data(), act.size() - 1, 4, nullptr),
      GIFT_INVALID_ARGUMENT, "gift_attachment_sketch",
      "95 floats are not rows (4) x d_in (24)");
  EXPECT_GIFT_ERROR(
      gift_attachment_sketch(att, "fc", act.data(), act.size(), 0, nullptr),
      GIFT_INVALID_ARGUMENT, "gift_attachment_sketch", "rows (0)");
  EXPECT_GIFT_ERROR(
      gift_attachment_sketch(att, "fc", nullptr, act.size(), 4, nullptr),
      GIFT_INVALID_ARGUMENT, "gift_attachment_sketch", "activations is null");
  ASSERT_GIFT_OK(
      gift_attachment_sketch(att, "fc", act.data(), act.size(), 4, nullptr));

  ASSERT_GIFT_OK(gift_allreduce_attach(ar, att));
  ASSERT_GIFT_OK(gift_allreduce_attach(ar, att));  // again: no change
  gift_attachment_destroy(att);  // the allreduce keeps it alive
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grad = Gradient(0, kBucket, step + 1);
    const std::vector<float> before = grad;
    ASSERT_GIFT_OK(gift_allreduce_step(ar, grad.data(), grad.size()));
    // One rank: the FP8 round trip of its own gradient.
    EXPECT_GT(RelL2(grad, before, 0, kRows * kCols), 1e-4);
    EXPECT_LT(RelL2(grad, before, 0, kRows * kCols), 0.06);
  }
  EXPECT_EQ(gift_allreduce_steps(ar), 3);
  ASSERT_GIFT_OK(gift_allreduce_attach(ar, nullptr));  // detach: frees it
  gift_allreduce_destroy(ar);
  gift_attachment_options_destroy(o);
  gift_plan_destroy(plan);
}

TEST(CApiTest, AttachmentServesOneAllReduceOfItsLayout) {
  TempDir dir;
  gift_communicator_t* comm = Connect(0, 1, dir.Sub("store"));
  ASSERT_NE(comm, nullptr);
  gift_plan_t* plan = TestPlan();
  gift_allreduce_t* a = nullptr;
  gift_allreduce_t* b = nullptr;
  ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &a));
  ASSERT_GIFT_OK(gift_allreduce_create(comm, plan, nullptr, &b));

  gift_attachment_options_t* o = gift_attachment_options_create();
  gift_attachment_options_set_agent_socket(o, dir.Sub("none.sock").c_str());
  gift_attachment_options_set_job_id(o, "j");
  gift_attachment_options_set_rank(o, 0);
  gift_attachment_options_set_world_size(o, 1);
  gift_attachment_options_set_retry_interval_seconds(o, 3600);
  gift_attachment_t* att = nullptr;
  ASSERT_GIFT_OK(gift_attachment_create(o, plan, &att));

  gift_plan_builder_t* pb = gift_plan_builder_create();
  const int64_t shape[2] = {kRows, kCols};
  gift_plan_builder_add_layer(pb, "other", shape, 2, 0);
  gift_plan_t* other_plan = nullptr;
  ASSERT_GIFT_OK(gift_plan_create(pb, 0, kRows * kCols, &other_plan));
  gift_attachment_t* other = nullptr;
  ASSERT_GIFT_OK(gift_attachment_create(o, other_plan, &other));
  EXPECT_GIFT_ERROR(gift_allreduce_attach(a, other), GIFT_INVALID_ARGUMENT,
                    "gift_allreduce_attach", "layout");

  ASSERT_GIFT_OK(gift_allreduce_attach(a, att));
  EXPECT_GIFT_ERROR(gift_allreduce_attach(b, att), GIFT_FAILED_PRECONDITION,
                    "gift_allreduce_attach", "serves another allreduce");
  gift_allreduce_destroy(a);  // releases it
  ASSERT_GIFT_OK(gift_allreduce_attach(b, att));
  gift_allreduce_destroy(b);

  gift_attachment_destroy(att);
  gift_attachment_destroy(other);
  gift_plan_destroy(other_plan);
  gift_plan_builder_destroy(pb);
  gift_attachment_options_destroy(o);
  gift_plan_destroy(plan);
  gift_communicator_destroy(comm);
}

TEST(CApiTest, BarrierAndBroadcast) {
  TempDir dir;
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
