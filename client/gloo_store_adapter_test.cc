#include "client/gloo_store_adapter.h"

#include <gloo/common/error.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

class GlooStoreAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    store_ = *FileStore::Create(dir_);
  }

  gift::testing::TempDir tmp_{"gift_adapter_test"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
};

TEST_F(GlooStoreAdapterTest, SetAndGetGoThroughTheStore) {
  GlooStoreAdapter adapter(store_.get(), absl::Seconds(1));
  const std::vector<char> bytes = {'\0', 'x', '\xff'};
  adapter.set("1", bytes);
  EXPECT_EQ(adapter.get("1"), bytes);
  EXPECT_EQ(*store_->Get("1", absl::ZeroDuration()), std::string("\0x\xff", 3));
  adapter.wait({"1"});
  adapter.wait({"1"}, std::chrono::milliseconds(10));
}

TEST_F(GlooStoreAdapterTest, MissingKeysThrowIoExceptionAfterTheTimeout) {
  GlooStoreAdapter adapter(store_.get(), absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_THROW(adapter.get("absent"), gloo::IoException);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_THROW(adapter.wait({"absent"}), gloo::IoException);
  // An explicit timeout overrides the adapter's; zero means "the adapter's".
  EXPECT_THROW(adapter.wait({"absent"}, std::chrono::milliseconds(20)),
               gloo::IoException);
  try {
    adapter.wait({"absent"}, std::chrono::milliseconds(0));
    FAIL() << "expected an exception";
  } catch (const gloo::IoException& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DEADLINE_EXCEEDED"));
  }
}

}  // namespace
}  // namespace gift::client
