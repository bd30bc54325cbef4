// CUDA IPC shared memory across two processes (label gpu): the parent owns a
// device region, a child process maps it from its RegionDesc alone, writes
// (synchronously, and asynchronously on its own stream followed by
// SignalWrites), and the parent reads what the child wrote. A second test
// runs the factor / sketch-window protocol over a device data region.
//
// CUDA does not survive fork(), so the child is this binary re-executed
// (fork + execv of /proc/self/exe) with the descriptors in an environment
// variable; a static initialiser runs the child's part before main().
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::shm {
namespace {

constexpr char kChildEnv[] = "GIFT_CUDA_IPC_TEST_CHILD";
constexpr uint64_t kBytes = 1 << 20;
constexpr uint64_t kAsyncOffset = kBytes / 2;  // the child's stream writes here
constexpr uint8_t kAsyncByte = 0x5a;

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>(i * 131 + 7); }

bool HaveDevice() {
  int n = 0;  // left untouched without a driver
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string Encode(const RegionDesc& d) {
  return absl::BytesToHexString(
      std::string(reinterpret_cast<const char*>(&d), sizeof(d)));
}
bool Decode(const std::string& hex, RegionDesc* d) {
  std::string bytes = absl::HexStringToBytes(hex);
  if (bytes.size() != sizeof(*d)) return false;
  std::memcpy(d, bytes.data(), sizeof(*d));
  return true;
}

// ---- child side (exit codes say what failed) ----

int ChildRegion(const RegionDesc& desc) {
  auto view = OpenRegion(desc);
  if (!view.ok()) return 10;
  std::vector<uint8_t> data(kAsyncOffset);
  for (uint64_t i = 0; i < data.size(); ++i) data[i] = Pattern(i);
  if (!(*view)->Write(0, data.data(), data.size()).ok()) return 11;
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 12;
  char* base = static_cast<char*>((*view)->data());
  if (cudaMemsetAsync(base + kAsyncOffset, kAsyncByte, kBytes - kAsyncOffset,
                      stream) != cudaSuccess) {
    return 13;
  }
  if (!(*view)->SignalWrites(stream).ok()) return 14;
  // Exiting tears the context down; finish the queued work first.
  if (cudaStreamSynchronize(stream) != cudaSuccess) return 15;
  cudaStreamDestroy(stream);
  return 0;
}

float Value(int64_t v, int64_t i) {
  return static_cast<float>(v) + static_cast<float>(i % 256) / 256.0f;
}

int ChildProtocol(const RegionDesc& ctl, const RegionDesc& data) {
  auto block = OpenRegion(ctl);
  auto region = OpenRegion(data);
  if (!block.ok() || !region.ok()) return 20;
  if (!CheckControlBlock((*block)->data(), ctl.bytes).ok()) return 21;
  LayerEntry* e = Entry((*block)->data(), 0);
  FactorData f;
  if (!ReadNewestFactor(*e, **region, nullptr, &f).ok()) return 22;
  for (size_t i = 0; i < f.u.size(); ++i) {
    if (f.u[i] != Value(f.version, i)) return 23;
  }
  auto began = BeginWindow(e, region->get(), nullptr, 0, false);
  if (!began.ok() || !*began) return 24;
  LayerRegionLayout l = LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap);
  std::vector<float> y(e->d_in * e->k_cap);
  for (size_t i = 0; i < y.size(); ++i) y[i] = Value(f.version + 1, i);
  if (!(*region)->Write(l.sketch[0].y, y.data(), y.size() * 4).ok()) {
    return 25;
  }
  CloseWindow(e, {0, f.version, e->k_cap, 0, 0, 10});
  return 0;
}

// Runs before main() in the re-executed child only.
const bool kIsChild = [] {
  const char* env = std::getenv(kChildEnv);
  if (env == nullptr) return false;
  std::vector<std::string> parts = absl::StrSplit(env, ':');
  RegionDesc a, b;
  int rc = 30;
  if (parts.size() == 1 && Decode(parts[0], &a)) rc = ChildRegion(a);
  if (parts.size() == 2 && Decode(parts[0], &a) && Decode(parts[1], &b)) {
    rc = ChildProtocol(a, b);
  }
  std::fflush(nullptr);
  _exit(rc);
}();

// ---- parent side ----

// Re-executes this binary as the child with `arg` in kChildEnv; its exit code.
int RunChild(const std::string& arg) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv(kChildEnv, arg.c_str(), 1);
    char* argv[] = {const_cast<char*>("cuda_ipc_region_test_child"), nullptr};
    execv("/proc/self/exe", argv);
    _exit(99);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    return -1;
  }
  return WEXITSTATUS(status);
}

std::string TestName(const std::string& tag) {
  return absl::StrCat("/gift-gputest-", getpid(), "-", tag);
}

TEST(CudaIpcRegionTest, ChildProcessWritesParentReads) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto owner = CreateRegion(RegionKind::kCudaIpc, TestName("r"), kBytes, 0);
  ASSERT_OK(owner);
  EXPECT_TRUE((*owner)->on_device());
  // A fresh region is zeroed.
  std::vector<uint8_t> got(kBytes, 1);
  ASSERT_OK((*owner)->Read(0, got.data(), got.size()));
  EXPECT_EQ(got, std::vector<uint8_t>(kBytes, 0));

  ASSERT_EQ(RunChild(Encode((*owner)->desc())), 0);
  ASSERT_OK((*owner)->WaitWrites(nullptr));
  ASSERT_OK((*owner)->Read(0, got.data(), got.size()));
  for (uint64_t i = 0; i < kAsyncOffset; ++i) {
    ASSERT_EQ(got[i], Pattern(i)) << "byte " << i;
  }
  for (uint64_t i = kAsyncOffset; i < kBytes; ++i) {
    ASSERT_EQ(got[i], kAsyncByte) << "byte " << i;
  }
  EXPECT_THAT((*owner)->Read(kBytes - 1, got.data(), 2),
              gift::testing::StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(CudaIpcRegionTest, ProtocolOverDeviceDataRegion) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::vector<LayerDecl> layers = {{"fc1", 128, 96, 16}};
  auto block = CreateRegion(RegionKind::kPosix, TestName("ctl"),
                            ControlBlockBytes(1), 0);
  ASSERT_OK(block);
  InitControlBlock((*block)->data(), "d", "s", 0, 1, layers);
  LayerEntry* e = Entry((*block)->data(), 0);
  LayerRegionLayout l = LayerRegionLayout::Compute(e->d_in, e->r_cap, e->k_cap);
  auto data = CreateRegion(RegionKind::kCudaIpc, TestName("d"), l.bytes, 0);
  ASSERT_OK(data);
  FactorData f;
  f.version = 7;
  f.r = 12;
  for (int64_t i = 0; i < e->d_in * f.r; ++i) f.u.push_back(Value(7, i));
  f.c = f.c_inv = f.lambda = std::vector<float>(f.r, 0.5f);
  f.omega.assign(e->d_in * e->k_cap, 0.25f);
  ASSERT_OK(PublishFactor(e, data->get(), nullptr, f));

  ASSERT_EQ(RunChild(absl::StrCat(Encode((*block)->desc()), ":",
                                  Encode((*data)->desc()))),
            0);
  SketchData d;
  ASSERT_OK(ReadClosedWindow(*e, **data, nullptr, &d));
  EXPECT_EQ(d.meta.omega_version, 7);
  ASSERT_EQ(d.y.size(), size_t(e->d_in * e->k_cap));
  for (size_t i = 0; i < d.y.size(); ++i) ASSERT_EQ(d.y[i], Value(8, i));
  EXPECT_EQ(d.count, 0);  // BeginWindow zeroed it; the child wrote none
}

}  // namespace
}  // namespace gift::shm
