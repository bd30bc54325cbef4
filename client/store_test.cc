#include "client/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    absl::StatusOr<std::unique_ptr<FileStore>> store =
        FileStore::Create(dir_ + "/store");
    ASSERT_OK(store);
    store_ = *std::move(store);
  }

  gift::testing::TempDir tmp_{"gift_store_test"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
};

TEST_F(FileStoreTest, SetThenGetReturnsValueWithArbitraryBytes) {
  const std::string value("a\0b/\xff", 5);
  ASSERT_OK(store_->Set("rank/0 addr", value));
  absl::StatusOr<std::string> got =
      store_->Get("rank/0 addr", absl::ZeroDuration());
  ASSERT_OK(got);
  EXPECT_EQ(*got, value);
  // Keys that escape to similar names stay distinct.
  ASSERT_OK(store_->Set("rank_0_addr", "other"));
  EXPECT_EQ(*store_->Get("rank/0 addr", absl::ZeroDuration()), value);
}

TEST_F(FileStoreTest, SetReplacesValue) {
  ASSERT_OK(store_->Set("k", "first"));
  ASSERT_OK(store_->Set("k", "second"));
  EXPECT_EQ(*store_->Get("k", absl::ZeroDuration()), "second");
}

TEST_F(FileStoreTest, GetOfMissingKeyTimesOutWithinDeadline) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got =
      store_->Get("missing", absl::Milliseconds(200));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(got.status().message()),
              ::testing::HasSubstr("missing"));
  EXPECT_GE(elapsed, absl::Milliseconds(200));
  EXPECT_LT(elapsed, absl::Milliseconds(1500));
}

TEST_F(FileStoreTest, GetWaitsForKeySetByAnotherThread) {
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_OK(store_->Set("late", "v"));
  });
  absl::StatusOr<std::string> got = store_->Get("late", absl::Seconds(10));
  writer.join();
  ASSERT_OK(got);
  EXPECT_EQ(*got, "v");
}

TEST_F(FileStoreTest, WaitNamesFirstMissingKey) {
  ASSERT_OK(store_->Set("a", "1"));
  absl::Status s = store_->Wait({"a", "b"}, absl::Milliseconds(50));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("first missing: b"));
  ASSERT_OK(store_->Set("b", "2"));
  EXPECT_OK(store_->Wait({"a", "b"}, absl::ZeroDuration()));
}

TEST_F(FileStoreTest, ConcurrentAddsAreAtomic) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        ASSERT_OK(store_->Add("counter", t + 1));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<int64_t> total = store_->Add("counter", 0);
  ASSERT_OK(total);
  EXPECT_EQ(*total, kAdds * kThreads * (kThreads + 1) / 2);
}

TEST_F(FileStoreTest, ConcurrentSetAndGetNeverSeePartialValues) {
  const std::string a(100000, 'a');
  const std::string b(100000, 'b');
  ASSERT_OK(store_->Set("big", a));
  std::thread writer([&] {
    for (int i = 0; i < 100; ++i) ASSERT_OK(store_->Set("big", i % 2 ? a : b));
  });
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> got = store_->Get("big", absl::ZeroDuration());
    ASSERT_OK(got);
    ASSERT_TRUE(*got == a || *got == b)
        << "partial value of size " << got->size();
  }
  writer.join();
}

TEST_F(FileStoreTest, AddReturnsNewValueAndRejectsNonIntegers) {
  EXPECT_EQ(*store_->Add("n", 5), 5);
  EXPECT_EQ(*store_->Add("n", -7), -2);
  ASSERT_OK(store_->Set("text", "hello"));
  EXPECT_THAT(store_->Add("text", 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FileStoreTest, RejectsEmptyAndOverlongKeys) {
  EXPECT_THAT(store_->Set("", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->Set(std::string(200, '/'), "v"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FileStoreTest, SecondStoreOnSameDirectorySeesKeys) {
  ASSERT_OK(store_->Set("shared", "x"));
  absl::StatusOr<std::unique_ptr<FileStore>> other =
      FileStore::Create(store_->dir());
  ASSERT_OK(other);
  EXPECT_EQ(*(*other)->Get("shared", absl::ZeroDuration()), "x");
}

TEST_F(FileStoreTest, PrefixStoreSeparatesNamespaces) {
  PrefixStore a("job/a/", store_.get());
  PrefixStore b("job/b/", store_.get());
  ASSERT_OK(a.Set("0", "from a"));
  ASSERT_OK(b.Set("0", "from b"));
  EXPECT_EQ(*a.Get("0", absl::ZeroDuration()), "from a");
  EXPECT_EQ(*b.Get("0", absl::ZeroDuration()), "from b");
  EXPECT_EQ(*store_->Get("job/a/0", absl::ZeroDuration()), "from a");
  EXPECT_EQ(*a.Add("c", 2), 2);
  EXPECT_EQ(*store_->Add("job/a/c", 1), 3);
  EXPECT_OK(a.Wait({"0", "c"}, absl::ZeroDuration()));
  EXPECT_THAT(b.Wait({"c"}, absl::Milliseconds(10)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace gift::client
