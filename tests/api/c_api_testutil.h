// Helpers of the C ABI's tests (tests/api/c_api_*_test.cc): the checks of
// a gift_status_t and the thread's last error message, the two-layer plan
// the multi-rank tests reduce, a communicator over a store directory, and
// the exact average to compare against. Uses only the public headers, as a
// consumer of libgift would.
//
// Thread safety: every helper may run on the rank threads of RunRanks.
#ifndef GIFT_TESTS_API_C_API_TESTUTIL_H_
#define GIFT_TESTS_API_C_API_TESTUTIL_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gift/c_api.h"
#include "tests/api/api_testutil.h"

namespace gift::testing {

// The layout of the multi-rank tests: a 16 x 24 matrix, a gap of 8, a bias
// of 16, a trailing gap of 4.
inline constexpr int64_t kRows = 16, kCols = 24;
inline constexpr int64_t kFcOffset = 0, kBiasOffset = kRows * kCols + 8;
inline constexpr int64_t kBucket = kBiasOffset + kRows + 4;

inline std::string LastError() { return gift_last_error_message(); }

// Expects `call` to return `code` with a message naming `fn` and `needle`.
#define EXPECT_GIFT_ERROR(call, code, fn, needle)                  \
  do {                                                             \
    const gift_status_t gift_s_ = (call);                          \
    EXPECT_EQ(gift_s_, code) << gift_status_name(gift_s_);         \
    const std::string gift_m_ = ::gift::testing::LastError();      \
    EXPECT_NE(gift_m_.find(fn), std::string::npos) << gift_m_;     \
    EXPECT_NE(gift_m_.find(needle), std::string::npos) << gift_m_; \
  } while (0)

#define ASSERT_GIFT_OK(call)                                                  \
  do {                                                                        \
    const gift_status_t gift_s_ = (call);                                     \
    ASSERT_EQ(gift_s_, GIFT_OK)                                               \
        << gift_status_name(gift_s_) << ": " << ::gift::testing::LastError(); \
    ASSERT_EQ(::gift::testing::LastError(), "");                              \
  } while (0)

inline gift_plan_builder_t* TestBuilder() {
  gift_plan_builder_t* b = gift_plan_builder_create();
  const int64_t fc[2] = {kRows, kCols};
  const int64_t bias[1] = {kRows};
  EXPECT_EQ(gift_plan_builder_add_layer(b, "fc", fc, 2, kFcOffset), GIFT_OK);
  EXPECT_EQ(gift_plan_builder_add_layer(b, "bias", bias, 1, kBiasOffset),
            GIFT_OK);
  return b;
}

inline gift_plan_t* TestPlan(int64_t epoch = 0) {
  gift_plan_builder_t* b = TestBuilder();
  gift_plan_t* plan = nullptr;
  EXPECT_EQ(gift_plan_create(b, epoch, kBucket, &plan), GIFT_OK) << LastError();
  gift_plan_builder_destroy(b);
  return plan;
}

// A communicator of rank `rank` of `world` over `dir`, or null (with a
// gtest failure).
inline gift_communicator_t* Connect(int rank, int world,
                                    const std::string& dir) {
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
inline std::vector<float> ExactAverage(int world, size_t n, uint32_t seed = 1) {
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
inline bool SameLayers(const std::vector<float>& a,
                       const std::vector<float>& b) {
  if (a.size() != static_cast<size_t>(kBucket) || b.size() != a.size()) {
    return false;
  }
  return std::memcmp(a.data() + kFcOffset, b.data() + kFcOffset,
                     kRows * kCols * sizeof(float)) == 0 &&
         std::memcmp(a.data() + kBiasOffset, b.data() + kBiasOffset,
                     kRows * sizeof(float)) == 0;
}

}  // namespace gift::testing

#endif  // GIFT_TESTS_API_C_API_TESTUTIL_H_
