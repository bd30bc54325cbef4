#include "tools/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::tools {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A .npy image with the given dict text (padded with spaces and '\n' to a
// multiple of 64 unless `raw_header`) followed by `data`.
std::string Image(const std::string& dict, const std::string& data,
                  int major = 1, bool raw_header = false) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  if (!raw_header) {
    size_t len = header.size() + 1;
    len += (64 - (8 + len_bytes + len) % 64) % 64;
    header.append(len - header.size() - 1, ' ');
    header.push_back('\n');
  }
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (size_t i = 0; i < len_bytes; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  }
  return out + header + data;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

TEST(NpyTest, RoundTripsAllVersions) {
  const std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  for (int version : {1, 2, 3}) {
    absl::StatusOr<std::string> bytes = SerializeNpy({2, 3}, data, version);
    ASSERT_OK(bytes);
    EXPECT_EQ(static_cast<int>((*bytes)[6]), version);
    absl::StatusOr<NpyHeader> h = ParseNpyHeader(*bytes, "x");
    ASSERT_OK(h);
    EXPECT_EQ(h->data_offset % 64, 0);
    EXPECT_EQ(h->major_version, version);
    absl::StatusOr<NpyArray> a = ParseNpy(*bytes, "x");
    ASSERT_OK(a);
    EXPECT_THAT(a->shape, ElementsAre(2, 3));
    EXPECT_EQ(a->data, data);
    EXPECT_EQ(a->size(), 6);
  }
}

TEST(NpyTest, ReadsFileWrittenByWriteNpy) {
  const std::string path = ::testing::TempDir() + "/npy_test_rw.npy";
  ASSERT_OK(WriteNpy(path, {4}, {1, 2, 3, 4}, 2));
  absl::StatusOr<NpyArray> a = ReadNpy(path);
  ASSERT_OK(a);
  EXPECT_THAT(a->shape, ElementsAre(4));
  EXPECT_THAT(a->data, ElementsAre(1, 2, 3, 4));
  std::remove(path.c_str());
}

TEST(NpyTest, AcceptsNumpyHeaderVariants) {
  // Double quotes, no trailing comma, other key order, 0-d and 1-d shapes.
  absl::StatusOr<NpyArray> a = ParseNpy(
      Image("{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}",
            Floats({5, 6})),
      "x");
  ASSERT_OK(a);
  EXPECT_THAT(a->shape, ElementsAre(2));
  absl::StatusOr<NpyArray> s =
      ParseNpy(Image("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                     Floats({9})),
               "x");
  ASSERT_OK(s);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_THAT(s->data, ElementsAre(9));
  absl::StatusOr<NpyArray> e = ParseNpy(
      Image("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", ""),
      "x");
  ASSERT_OK(e);
  EXPECT_EQ(e->size(), 0);
}

TEST(NpyTest, HeaderReportsOtherDtypes) {
  absl::StatusOr<NpyHeader> h = ParseNpyHeader(
      Image("{'descr': '<f8', 'fortran_order': True, 'shape': (3, 4), }",
            std::string(96, '\0')),
      "x");
  ASSERT_OK(h);
  EXPECT_EQ(h->descr, "<f8");
  EXPECT_TRUE(h->fortran_order);
  EXPECT_THAT(h->shape, ElementsAre(3, 4));
}

void ExpectInvalid(const std::string& bytes, const std::string& what) {
  absl::StatusOr<NpyArray> a = ParseNpy(bytes, "f.npy");
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("f.npy"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr(what));
}

TEST(NpyTest, RejectsBadMagicAndVersion) {
  ExpectInvalid("PK\x03\x04 not numpy at all", "bad magic");
  ExpectInvalid("", "bad magic");
  std::string v4 = Image(
      "{'descr': '<f4', 'fortran_order': False, "
      "'shape': (1,), }",
      Floats({1}));
  v4[6] = 4;
  ExpectInvalid(v4, "unsupported .npy version 4.0");
}

TEST(NpyTest, RejectsTruncation) {
  const std::string good =
      Image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
            Floats({1, 2, 3, 4}));
  ExpectInvalid(good.substr(0, 7), "truncated");
  ExpectInvalid(good.substr(0, 9), "truncated");
  ExpectInvalid(good.substr(0, 40), "truncated .npy header");
  ExpectInvalid(good.substr(0, good.size() - 1), "truncated data");
  ExpectInvalid(good + "x", "trailing bytes");
}

TEST(NpyTest, RejectsUnsupportedDtypeAndOrder) {
  ExpectInvalid(Image("{'descr': '<f8', 'fortran_order': False, "
                      "'shape': (2,), }",
                      std::string(16, '\0')),
                "dtype '<f8' is not supported");
  ExpectInvalid(Image("{'descr': '>f4', 'fortran_order': False, "
                      "'shape': (2,), }",
                      Floats({1, 2})),
                "dtype '>f4'");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': True, "
                      "'shape': (2, 2), }",
                      Floats({1, 2, 3, 4})),
                "Fortran");
}

TEST(NpyTest, RejectsMalformedHeaders) {
  const std::string d = Floats({1, 2});
  ExpectInvalid(Image("{'descr': '<f4', 'shape': (2,), }", d), "lacks");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2,), 'extra': 1, }",
                      d),
                "unexpected or repeated header key 'extra'");
  ExpectInvalid(Image("{'descr': '<f4', 'descr': '<f4', "
                      "'fortran_order': False, 'shape': (2,), }",
                      d),
                "repeated");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2), }",
                      d),
                "tuple");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (-2,), }",
                      d),
                "tuple");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': 0, "
                      "'shape': (2,), }",
                      d),
                "True or False");
  ExpectInvalid(Image("['descr', '<f4']", d), "dict");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2,), }",
                      d, 1, /*raw_header=*/true),
                "'\\n'");
  ExpectInvalid(Image("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (99999999999999999999,), }",
                      d),
                "tuple");
}

TEST(NpyTest, MissingFileIsNotFound) {
  absl::StatusOr<NpyArray> a = ReadNpy("/nonexistent/dir/x.npy");
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("x.npy"));
}

// Only a bounded regular file is read: /dev/zero (an endless read), a FIFO
// (a read that waits for a writer) and a directory (once "out of memory")
// are refused before any read, naming the file.
TEST(NpyTest, ReadsOnlyBoundedRegularFiles) {
  gift::testing::TempDir tmp("npy_test");
  ASSERT_TRUE(tmp.ok());
  const std::string dir = tmp.path();
  const std::string fifo = std::string(dir) + "/fifo.npy";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path :
       {std::string("/dev/zero"), fifo, std::string(dir)}) {
    absl::StatusOr<NpyArray> a = ReadNpy(path);
    EXPECT_THAT(a, StatusIs(absl::StatusCode::kInvalidArgument,
                            path + ": not a regular file"));
  }
  unlink(fifo.c_str());
  const std::string path = std::string(dir) + "/w.npy";
  ASSERT_OK(WriteNpy(path, {2, 3}, {1, 2, 3, 4, 5, 6}));
  absl::StatusOr<std::string> bytes = SerializeNpy({2, 3}, {1, 2, 3, 4, 5, 6});
  ASSERT_OK(bytes);
  const int64_t size = static_cast<int64_t>(bytes->size());
  EXPECT_OK(ReadNpy(path, size));
  EXPECT_THAT(ReadNpy(path, size - 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat(path, ": ", size, " bytes, more than the ",
                                    size - 1, " allowed")));
  unlink(path.c_str());
}

TEST(NpyTest, SerializeChecksShape) {
  EXPECT_THAT(SerializeNpy({2, 2}, {1, 2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SerializeNpy({2}, {1, 2}, 4),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::tools
