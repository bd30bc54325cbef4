#include "daemon/kv_store.h"

#include <thread>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;

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

}  // namespace
}  // namespace gift::daemon
