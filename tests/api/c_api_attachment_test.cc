// The C ABI's daemon attachment (include/gift/c_api.h), linked against
// libgift.so alone: without a daemon it never stops training, handles may be
// destroyed in any order, and one attachment serves one allreduce of its
// layout.
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
using gift::testing::Gradient;
using gift::testing::kBucket;
using gift::testing::kCols;
using gift::testing::kRows;
using gift::testing::RelL2;
using gift::testing::TempDir;
using gift::testing::TestPlan;

// Without a daemon the attachment never stops training: the allreduce
// steps Euclidean, sketches are checked and taken (or skipped), and the
// handles may be destroyed in any order.
TEST(CApiTest, AttachmentWithoutDaemon) {
  TempDir dir("gift_api_test");
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
  TempDir dir("gift_api_test");
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

}  // namespace
