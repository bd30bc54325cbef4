#include "common/testing.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gift::testing {
namespace {

TEST(TempDirTest, MakesADirectoryWithThePrefixAndRemovesIt) {
  std::string path;
  {
    TempDir dir("gift_testing_test");
    ASSERT_TRUE(dir.ok());
    path = dir.path();
    EXPECT_TRUE(std::filesystem::is_directory(path));
    EXPECT_NE(std::filesystem::path(path).filename().string().find(
                  "gift_testing_test_"),
              std::string::npos);
    EXPECT_EQ(dir.Sub("a/b"), path + "/a/b");
    std::filesystem::create_directories(dir.Sub("a/b"));
    std::ofstream(dir.Sub("a/b/f")) << "x";
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, TwoDirectoriesDiffer) {
  TempDir a, b;
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a.path(), b.path());
}

TEST(TempDirTest, MoveHandsOverTheDirectory) {
  TempDir a("gift_testing_move");
  const std::string path = a.path();
  TempDir b(std::move(a));
  EXPECT_EQ(b.path(), path);
  EXPECT_TRUE(a.path().empty());  // NOLINT(bugprone-use-after-move)
  TempDir c("gift_testing_move");
  const std::string old_c = c.path();
  c = std::move(b);
  EXPECT_EQ(c.path(), path);
  EXPECT_FALSE(std::filesystem::exists(old_c));
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST(TempDirTest, ReleaseKeepsTheDirectory) {
  std::string path;
  {
    TempDir dir("gift_testing_keep");
    path = dir.Release();
    EXPECT_TRUE(dir.path().empty());
  }
  EXPECT_TRUE(std::filesystem::is_directory(path));
  std::filesystem::remove_all(path);
}

TEST(MakeTempDirTest, HonoursTmpdirAndReportsFailure) {
  TempDir base("gift_testing_base");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", base.path().c_str(), 1);
  absl::StatusOr<std::string> dir = MakeTempDir("inner");
  ::setenv("TMPDIR", (base.path() + "/missing").c_str(), 1);
  absl::StatusOr<std::string> bad = MakeTempDir("inner");
  if (old != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(std::filesystem::path(*dir).parent_path(), base.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().substr(0, 8), "mkdtemp:");
}

TEST(WaitUntilTest, ReturnsTrueOnceTheConditionHolds) {
  int calls = 0;
  EXPECT_TRUE(WaitUntil([&] { return ++calls >= 3; }, absl::Seconds(10),
                        absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
}

TEST(WaitUntilTest, ReturnsFalseAtTheDeadline) {
  int calls = 0;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(WaitUntil(
      [&] {
        ++calls;
        return false;
      },
      absl::Milliseconds(50), absl::Milliseconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_GE(calls, 2);
}

TEST(WaitUntilTest, ChecksOnceEvenWithNoTime) {
  EXPECT_TRUE(WaitUntil([] { return true; }, absl::ZeroDuration()));
}

TEST(RelL2Test, IsTheNormOfTheErrorOverTheNormOfTheReference) {
  const std::vector<float> ref = {3, 4};
  const std::vector<float> x = {3, 5};
  EXPECT_DOUBLE_EQ(RelL2(x, ref), 0.2);  // 1 / 5
  EXPECT_DOUBLE_EQ(RelL2(ref, ref), 0.0);
  EXPECT_DOUBLE_EQ(RelL2(x.data(), ref.data(), 1), 0.0);
}

TEST(RelL2Test, RangeAndDoubles) {
  const std::vector<double> ref = {100, 3, 4, 100};
  const std::vector<double> x = {0, 3, 5, 0};
  EXPECT_DOUBLE_EQ(RelL2(x, ref, 1, 3), 0.2);
}

TEST(RelL2Test, ZeroReferenceGivesTheErrorNorm) {
  const std::vector<float> ref = {0, 0};
  const std::vector<float> x = {3, 4};
  EXPECT_DOUBLE_EQ(RelL2(x, ref), 5.0);
}

}  // namespace
}  // namespace gift::testing
