#include "shm/region.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::shm {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// A name unique to this process and test, so parallel ctest runs never meet.
std::string TestName(const std::string& tag) {
  return absl::StrCat("/gift-test-", getpid(), "-", tag);
}

std::unique_ptr<Region> MustCreate(const std::string& name, uint64_t bytes) {
  absl::StatusOr<std::unique_ptr<Region>> r =
      CreateRegion(RegionKind::kPosix, name, bytes, 0);
  EXPECT_OK(r);
  return r.ok() ? std::move(*r) : nullptr;
}

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>(i * 37 + 11); }

TEST(PosixRegionTest, CreatesZeroedRegionWithDescriptor) {
  const std::string name = TestName("zero");
  auto r = MustCreate(name, 10000);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->bytes(), 10000u);
  EXPECT_FALSE(r->on_device());
  EXPECT_EQ(r->desc().kind, static_cast<uint32_t>(RegionKind::kPosix));
  EXPECT_EQ(r->desc().bytes, 10000u);
  EXPECT_STREQ(r->desc().name, name.c_str());
  std::vector<uint8_t> got(10000, 0xff);
  ASSERT_OK(r->Read(0, got.data(), got.size()));
  EXPECT_TRUE(
      std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0; }));
}

TEST(PosixRegionTest, ChildProcessWritesParentReads) {
  auto owner = MustCreate(TestName("fork"), 1 << 16);
  ASSERT_NE(owner, nullptr);
  const RegionDesc desc = owner->desc();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: open by descriptor only, write the pattern, report by exit code.
    absl::StatusOr<std::unique_ptr<Region>> view = OpenRegion(desc);
    if (!view.ok()) _exit(2);
    std::vector<uint8_t> data(desc.bytes);
    for (uint64_t i = 0; i < data.size(); ++i) data[i] = Pattern(i);
    if (!(*view)->Write(0, data.data(), data.size()).ok()) _exit(3);
    view->reset();  // the opener only unmaps
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::vector<uint8_t> got(desc.bytes);
  ASSERT_OK(owner->Read(0, got.data(), got.size()));
  for (uint64_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], Pattern(i)) << "byte " << i;
  }
  // The child's exit did not remove the object: it is still openable.
  EXPECT_OK(OpenRegion(desc));
}

TEST(PosixRegionTest, OwnerAndOpenerShareMemory) {
  auto owner = MustCreate(TestName("share"), 4096);
  ASSERT_NE(owner, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> view = OpenRegion(owner->desc());
  ASSERT_OK(view);
  const double x = 3.25;
  ASSERT_OK((*view)->Write(128, &x, sizeof(x)));
  double y = 0;
  ASSERT_OK(owner->Read(128, &y, sizeof(y)));
  EXPECT_EQ(y, x);
  ASSERT_OK(owner->Zero(128, sizeof(x)));
  ASSERT_OK((*view)->Read(128, &y, sizeof(y)));
  EXPECT_EQ(y, 0.0);
}

TEST(PosixRegionTest, CreatedWithMode0600EvenUnderPermissiveUmask) {
  mode_t old = umask(0);
  const std::string name = TestName("mode");
  auto r = MustCreate(name, 64);
  umask(old);
  ASSERT_NE(r, nullptr);
  struct stat st;
  ASSERT_EQ(stat(absl::StrCat("/dev/shm", name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(PosixRegionTest, OwnerDestructionUnlinks) {
  const std::string name = TestName("gone");
  RegionDesc desc;
  {
    auto r = MustCreate(name, 64);
    ASSERT_NE(r, nullptr);
    desc = r->desc();
  }
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PosixRegionTest, ReplacesExistingObjectOfSameName) {
  const std::string name = TestName("replace");
  auto first = MustCreate(name, 64);
  ASSERT_NE(first, nullptr);
  const uint32_t marker = 0xdeadbeef;
  ASSERT_OK(first->Write(0, &marker, sizeof(marker)));
  auto second = MustCreate(name, 128);
  ASSERT_NE(second, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> view = OpenRegion(second->desc());
  ASSERT_OK(view);
  uint32_t got = 1;
  ASSERT_OK((*view)->Read(0, &got, sizeof(got)));
  EXPECT_EQ(got, 0u);  // a fresh, zeroed object
}

TEST(PosixRegionTest, OpenRejectsSizeMismatch) {
  auto r = MustCreate(TestName("size"), 4096);
  ASSERT_NE(r, nullptr);
  RegionDesc desc = r->desc();
  desc.bytes = 8192;
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kInvalidArgument));
  desc.bytes = 0;
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PosixRegionTest, OpenMissingNameIsNotFound) {
  RegionDesc desc{};
  desc.kind = static_cast<uint32_t>(RegionKind::kPosix);
  desc.bytes = 64;
  const std::string name = TestName("never-created");
  std::memcpy(desc.name, name.data(), name.size());
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PosixRegionTest, RejectsBadNames) {
  for (const std::string& bad :
       {std::string(""), std::string("/"), std::string("no-slash"),
        std::string("/a/b"), std::string("/") + std::string(kNameBytes, 'x')}) {
    EXPECT_THAT(CreateRegion(RegionKind::kPosix, bad, 64, 0),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "name \"" << bad << "\"";
  }
  // The longest name that fits the descriptor with its terminator.
  std::string longest = TestName("");
  longest.resize(kNameBytes - 1, 'y');
  EXPECT_OK(CreateRegion(RegionKind::kPosix, longest, 64, 0));
}

TEST(PosixRegionTest, RejectsMalformedDescriptors) {
  RegionDesc desc{};
  desc.bytes = 64;
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kInvalidArgument));
  desc.kind = static_cast<uint32_t>(RegionKind::kPosix);
  std::memset(desc.name, 'a', kNameBytes);  // no terminator
  EXPECT_THAT(OpenRegion(desc), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CreateRegion(RegionKind::kPosix, TestName("empty"), 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CreateRegion(RegionKind::kNone, TestName("none"), 64, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PosixRegionTest, AccessesAreBoundsChecked) {
  auto r = MustCreate(TestName("bounds"), 100);
  ASSERT_NE(r, nullptr);
  char buf[16] = {};
  EXPECT_OK(r->Write(84, buf, 16));
  EXPECT_THAT(r->Write(85, buf, 16), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(r->Read(101, buf, 0), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(r->Zero(UINT64_MAX, 2), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(r->Read(8, buf, UINT64_MAX),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_OK(r->SignalWrites(nullptr));
  EXPECT_OK(r->WaitWrites(nullptr));
}

TEST(PosixRegionTest, ListsAndUnlinksObjectsByPrefix) {
  const std::string prefix = TestName("list-");
  auto a = MustCreate(prefix + "a", 64);
  auto b = MustCreate(prefix + "b", 64);
  auto other = MustCreate(TestName("other"), 64);
  absl::StatusOr<std::vector<std::string>> names = ListPosixObjects(prefix);
  ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{prefix + "a", prefix + "b"}));

  ASSERT_OK(UnlinkPosix(prefix + "a"));
  EXPECT_OK(UnlinkPosix(prefix + "a"));  // already gone is fine
  names = ListPosixObjects(prefix);
  ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{prefix + "b"}));
  EXPECT_THAT(UnlinkPosix("bad/name"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ListPosixObjects("no-slash"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// This machine image has no GPU (and CPU builds no CUDA): asking for device
// memory must fail cleanly, never crash or hang. On a machine with a GPU the
// IPC backend is exercised by tests/gpu/cuda_ipc_region_test.cc instead.
TEST(CudaIpcRegionTest, WithoutDeviceIsFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<Region>> r =
      CreateRegion(RegionKind::kCudaIpc, TestName("ipc"), 4096, 0);
  if (r.ok()) {
    EXPECT_TRUE((*r)->on_device());
    return;  // a GPU build on a GPU machine
  }
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("CUDA"));
  RegionDesc desc{};
  desc.kind = static_cast<uint32_t>(RegionKind::kCudaIpc);
  desc.bytes = 4096;
  std::strcpy(desc.name, "/gift-test-ipc");
  EXPECT_THAT(OpenRegion(desc),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace gift::shm
