#include "common/file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
  }
  void TearDown() override {
    ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    close(fd);
    return path;
  }
  gift::testing::TempDir tmp_{"file_test"};
  std::string dir_;
};

TEST_F(ReadFileTest, ReadsARegularFileUpToTheBound) {
  const std::string text("a\0b\nc", 5);
  const std::string path = Write("f", text);
  absl::StatusOr<std::string> got = ReadRegularFile(path, 5);
  ASSERT_OK(got);
  EXPECT_EQ(*got, text);
  EXPECT_OK(ReadRegularFile(Write("empty", ""), 0));
}

TEST_F(ReadFileTest, TooLargeIsRefusedBeforeReading) {
  EXPECT_THAT(ReadRegularFile(Write("f", "123456"), 5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "6 bytes, more than the 5 allowed"));
  // A sparse file: its size alone is refused, nothing is read.
  const std::string sparse = dir_ + "/sparse";
  const int fd = open(sparse.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{1} << 40), 0);
  close(fd);
  EXPECT_THAT(ReadRegularFile(sparse, int64_t{1} << 30),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "1099511627776 bytes, more than the 1073741824 "
                       "allowed"));
}

TEST_F(ReadFileTest, OnlyRegularFiles) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Neither blocks: no writer on the FIFO, no end to /dev/zero.
  for (const std::string& path :
       {fifo, dir_, std::string("/dev/zero"), std::string("/dev/null")}) {
    EXPECT_THAT(
        ReadRegularFile(path, 1 << 20),
        StatusIs(absl::StatusCode::kInvalidArgument, "not a regular file"))
        << path;
  }
}

TEST_F(ReadFileTest, CannotOpenIsNotFound) {
  EXPECT_THAT(
      ReadRegularFile(dir_ + "/missing", 10),
      StatusIs(absl::StatusCode::kNotFound, "No such file or directory"));
}

// ReadFile names the file and says which one it is, whatever went wrong,
// always as INVALID_ARGUMENT (a bad option value).
TEST_F(ReadFileTest, ReadFileNamesTheFile) {
  const std::string path = Write("token", "t0k\n");
  absl::StatusOr<std::string> got = ReadFile(path, 4, "job_token_file");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "t0k\n");
  EXPECT_THAT(ReadFile(path, 3, "job_token_file"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot read job_token_file '" + path +
                           "': 4 bytes, more than the 3 allowed"));
  EXPECT_THAT(ReadFile(dir_ + "/missing", 10, "config file"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot read config file '" + dir_ +
                           "/missing': No such file or directory"));
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(
      ReadFile(fifo, 10, "tls_cert_file"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tls_cert_file '" + fifo + "': not a regular file")));
}

// The descriptor is closed on exec and after every read, success or not.
TEST_F(ReadFileTest, LeavesNoDescriptorOpen) {
  const std::string path = Write("f", "x");
  const int before = open("/dev/null", O_RDONLY);
  ASSERT_GE(before, 0);
  close(before);
  EXPECT_OK(ReadRegularFile(path, 1));
  EXPECT_FALSE(ReadRegularFile(path, 0).ok());
  EXPECT_FALSE(ReadRegularFile(dir_, 1).ok());
  const int after = open("/dev/null", O_RDONLY);
  EXPECT_EQ(after, before);  // the lowest free descriptor is free again
  close(after);
}

}  // namespace
}  // namespace gift
