#include "daemon/core/kv_store.h"

#include <cstdint>
#include <limits>
#include <string>
#include <thread>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(KvStoreTest, SetGetAdd) {
  KvStore s;
  ASSERT_OK(s.Set("j", "k", "v"));
  auto v = s.Get("j", "k", absl::ZeroDuration());
  ASSERT_OK(v);
  EXPECT_EQ(*v, "v");
  // Jobs are separate namespaces.
  EXPECT_THAT(s.Get("other", "k", absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  auto a = s.Add("j", "n", 3);
  ASSERT_OK(a);
  EXPECT_EQ(*a, 3);
  EXPECT_EQ(*s.Add("j", "n", -1), 2);
  EXPECT_THAT(s.Add("j", "k", 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*s.Get("j", "k", absl::ZeroDuration()), "v");  // unchanged
}

TEST(KvStoreTest, GetWaitsForSet) {
  KvStore s;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK(s.Set("j", "late", "x"));
  });
  auto v = s.Get("j", "late", absl::Seconds(10));
  writer.join();
  ASSERT_OK(v);
  EXPECT_EQ(*v, "x");
}

TEST(KvStoreTest, BadInputAndTimeout) {
  KvStore s;
  EXPECT_THAT(s.Set("", "k", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.Set("j", "", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.Set("j", "k", std::string((1 << 20) + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.Get("j", "missing", absl::Milliseconds(20)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(KvStoreTest, DropJobAndClose) {
  KvStore s;
  ASSERT_OK(s.Set("j", "k", "v"));
  s.DropJob("j");
  EXPECT_THAT(s.Get("j", "k", absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    s.Close();
  });
  EXPECT_THAT(s.Get("j", "k", absl::Seconds(30)).status(),
              StatusIs(absl::StatusCode::kCancelled));
  closer.join();
}

// Issue 13: Add overflowed (signed overflow, the value wrapped).
TEST(KvStoreTest, AddThatWouldOverflowIsRefusedAndChangesNothing) {
  KvStore s;
  const int64_t max = std::numeric_limits<int64_t>::max();
  ASSERT_OK(s.Add("j", "n", max - 1));
  EXPECT_THAT(s.Add("j", "n", 2),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("overflow")));
  EXPECT_EQ(*s.Get("j", "n", absl::ZeroDuration()), std::to_string(max - 1));
  ASSERT_OK(s.Add("j", "m", std::numeric_limits<int64_t>::min()));
  EXPECT_THAT(s.Add("j", "m", -1), StatusIs(absl::StatusCode::kOutOfRange));
  ASSERT_OK(s.Set("j", "big", std::to_string(max)));
  EXPECT_THAT(s.Add("j", "big", 1), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(*s.Get("j", "big", absl::ZeroDuration()), std::to_string(max));
}

// Issue 13: the store kept whatever it was given, for any job.
TEST(KvStoreTest, AJobsBytesAreBounded) {
  KvStore s;  // 1 MiB values, 64 MiB per job
  const std::string mib(1 << 20, 'x');
  int stored = 0;
  absl::Status last;
  for (int i = 0; i < 80 && last.ok(); ++i) {
    last = s.Set("j", "k" + std::to_string(i), mib);
    if (last.ok()) ++stored;
  }
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kResourceExhausted,
                             HasSubstr("max_store_job_bytes")));
  EXPECT_LT(stored, 64);
  EXPECT_GE(stored, 60);
  // Replacing a value frees its bytes; other jobs have their own budget.
  ASSERT_OK(s.Set("j", "k0", "small"));
  ASSERT_OK(s.Set("j", "again", mib));
  ASSERT_OK(s.Set("other", "k", mib));
  // Keys are bounded too, and an error does not echo a huge one.
  absl::Status key = s.Set("j", std::string(1 << 20, 'k'), "v");
  EXPECT_THAT(key, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_LT(key.message().size(), 300u);
}

TEST(KvStoreTest, NewJobsReplaceTheLeastRecentlyUsedButNeverTheKeptOne) {
  KvStore s;  // 8 jobs
  s.KeepJob("kept");
  ASSERT_OK(s.Set("kept", "k", "v"));
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(s.Set("j" + std::to_string(i), "k", "v"));
  }
  EXPECT_OK(s.Get("kept", "k", absl::ZeroDuration()));
  EXPECT_OK(s.Get("j19", "k", absl::ZeroDuration()));
  EXPECT_THAT(s.Get("j0", "k", absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace gift::daemon
