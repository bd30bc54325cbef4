// DeviceSketcher (client/device_sketch.h), the attachment's device sketch
// path, against the host path's kernels on seeded data (label gpu; skips
// without a device): strided rows sketched in chunks, window closes into a
// CUDA IPC region (device to device, then the interprocess event that
// Region::Read waits on) and into a POSIX region (device to host), a second
// window starting from zero, and an Add captured into a CUDA graph.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/device_sketch.h"
#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "kernels/sketch.h"
#include "shm/layout.h"
#include "shm/region.h"
#include "tests/gpu/gpu_testutil.h"

namespace gift::client {
namespace {

using ::gift::gpu_testing::RandomVector;
using ::gift::gpu_testing::RelErr;
using ::gift::gpu_testing::ToDevice;
using ::gift::testing::StatusIs;

// 300 rows of which the attachment samples 100 (stride 3); 32 rows per
// chunk, so an Add runs four chunks (32, 32, 32, 4).
constexpr int64_t kD = 96, kK = 40, kRCap = 24, kRows = 300, kStride = 3,
                  kN = 100, kMaxRows = 32;

// The host path's accumulators (attachment_step.cc: the sampled rows, then
// kernels::SketchAccumulate and SecondMomentAccumulate).
struct Acc {
  std::vector<float> y = std::vector<float>(kD * kK, 0.0f);
  std::vector<float> a = std::vector<float>(kD * kD, 0.0f);
  double trace = 0, a_trace = 0;
  int64_t count = 0, a_count = 0;
};

void AddOnHost(const std::vector<float>& acts, const std::vector<float>& omega,
               bool full, Acc* acc) {
  std::vector<float> rows(kN * kD);
  for (int64_t i = 0; i < kN; ++i) {
    std::memcpy(&rows[i * kD], &acts[i * kStride * kD], kD * sizeof(float));
  }
  std::vector<float> ws(kernels::SketchWorkspaceFloats(kN, kK));
  ASSERT_OK(kernels::SketchAccumulate(rows.data(), kN, kD, omega.data(), kK,
                                      {acc->y.data(), &acc->trace, &acc->count},
                                      ws.data()));
  if (full) {
    ASSERT_OK(kernels::SecondMomentAccumulate(
        rows.data(), kN, kD, {acc->a.data(), &acc->a_trace, &acc->a_count}));
  }
}

const shm::LayerRegionLayout& Layout() {
  static const shm::LayerRegionLayout l =
      shm::LayerRegionLayout::Compute(kD, kRCap, kK);
  return l;
}
const shm::FullRegionLayout& FullLayout() {
  static const shm::FullRegionLayout l = shm::FullRegionLayout::Compute(kD);
  return l;
}

// What a window close left in buffer b of the regions (Region::Read: on
// CUDA IPC after the event the sketcher recorded).
Acc ReadBack(const shm::Region& data, const shm::Region* full, int b) {
  Acc got;
  const auto& s = Layout().sketch[b];
  EXPECT_OK(data.Read(s.y, got.y.data(), got.y.size() * sizeof(float)));
  EXPECT_OK(data.Read(s.trace, &got.trace, sizeof(double)));
  EXPECT_OK(data.Read(s.count, &got.count, sizeof(int64_t)));
  if (full != nullptr) {
    const auto& f = FullLayout().acc[b];
    EXPECT_OK(full->Read(f.a, got.a.data(), got.a.size() * sizeof(float)));
    EXPECT_OK(full->Read(f.trace, &got.a_trace, sizeof(double)));
    EXPECT_OK(full->Read(f.count, &got.a_count, sizeof(int64_t)));
  }
  return got;
}

// Equal to GEMM rounding, every element written (the regions start as NaN)
// and not all zeros.
void ExpectMatches(const Acc& got, const Acc& want, bool full) {
  for (float v : got.y) ASSERT_TRUE(std::isfinite(v)) << "unwritten Y element";
  EXPECT_GT(want.count, 0);
  EXPECT_LE(RelErr(got.y, want.y), 1e-5);
  EXPECT_NEAR(got.trace, want.trace, 1e-9 * want.trace);
  EXPECT_EQ(got.count, want.count);
  if (!full) return;
  for (float v : got.a) ASSERT_TRUE(std::isfinite(v)) << "unwritten A element";
  EXPECT_LE(RelErr(got.a, want.a), 1e-5);
  EXPECT_NEAR(got.a_trace, want.a_trace, 1e-9 * want.a_trace);
  EXPECT_EQ(got.a_count, want.a_count);
}

class DeviceSketchGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::Available()) GTEST_SKIP() << "no GPU";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // A blocking stream, as PyTorch's: the legacy stream syncs with it, so
    // legacy-stream work during its capture fails the capture.
    ASSERT_EQ(cudaStreamCreate(&producer_), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming),
              cudaSuccess);
    absl::StatusOr<std::unique_ptr<DeviceSketcher>> sk =
        DeviceSketcher::Create(0, /*layers=*/2);
    ASSERT_OK(sk);
    sk_ = *std::move(sk);
    for (int i = 0; i < 3; ++i) {
      host_[i] = RandomVector(kRows * kD, 10 + i);
      src_[i] = ToDevice(host_[i]);
      ASSERT_OK(acts_[i].Allocate(kRows * kD));
    }
  }
  void TearDown() override {
    sk_.reset();  // waits for the sketch stream
    if (ev_ != nullptr) cudaEventDestroy(ev_);
    if (producer_ != nullptr) cudaStreamDestroy(producer_);
  }

  // Activations i "produced" on the producer stream and left in flight:
  // poisoned (NaN), then copied; the sketch must wait for both.
  float* Produce(int i) {
    const size_t bytes = kRows * kD * sizeof(float);
    EXPECT_EQ(cudaMemsetAsync(acts_[i].get(), 0xFF, bytes, producer_),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(acts_[i].get(), src_[i].get(), bytes,
                              cudaMemcpyDeviceToDevice, producer_),
              cudaSuccess);
    return acts_[i].get();
  }

  std::unique_ptr<shm::Region> MakeRegion(shm::RegionKind kind,
                                          const std::string& what,
                                          uint64_t bytes) {
    const std::string name = absl::StrCat("/gift-dsk", ::getpid(), "-", what);
    absl::StatusOr<std::unique_ptr<shm::Region>> r =
        shm::CreateRegion(kind, name, bytes, 0);
    EXPECT_OK(r);
    if (!r.ok()) return nullptr;
    const std::vector<uint8_t> nan(bytes, 0xFF);
    EXPECT_OK((*r)->Write(0, nan.data(), bytes));
    return *std::move(r);
  }

  cudaStream_t producer_ = nullptr;
  cudaEvent_t ev_ = nullptr;
  std::unique_ptr<DeviceSketcher> sk_;
  std::vector<float> host_[3];
  gpu::DeviceBuffer<float> src_[3], acts_[3];
};

// Two steps of a `full` window, closed into buffer 1 of each kind of region.
TEST_F(DeviceSketchGpuTest, MatchesHostThroughCloseIntoBothRegionKinds) {
  const std::vector<float> omega = RandomVector(kD * kK, 3);
  Acc want;
  AddOnHost(host_[0], omega, true, &want);
  AddOnHost(host_[1], omega, true, &want);
  for (shm::RegionKind kind :
       {shm::RegionKind::kCudaIpc, shm::RegionKind::kPosix}) {
    SCOPED_TRACE(kind == shm::RegionKind::kCudaIpc ? "CUDA IPC" : "POSIX");
    const std::string tag = kind == shm::RegionKind::kCudaIpc ? "ipc" : "px";
    auto data = MakeRegion(kind, tag + "d", Layout().bytes);
    auto full = MakeRegion(kind, tag + "f", FullLayout().bytes);
    ASSERT_NE(data, nullptr);
    ASSERT_NE(full, nullptr);
    ASSERT_OK(sk_->Open(0, kD, omega, /*full=*/true, kMaxRows));
    ASSERT_OK(sk_->Add(0, Produce(0), kN, kStride, producer_));
    ASSERT_OK(sk_->Add(0, Produce(1), kN, kStride, producer_));
    ASSERT_OK(sk_->Close(0, data.get(), Layout().sketch[1], full.get(),
                         &FullLayout().acc[1]));
    ExpectMatches(ReadBack(*data, full.get(), 1), want, true);
  }
}

// A window after a closed one holds only its own rows and its new Ω.
TEST_F(DeviceSketchGpuTest, NextWindowStartsFromZero) {
  auto data = MakeRegion(shm::RegionKind::kCudaIpc, "next", Layout().bytes);
  ASSERT_NE(data, nullptr);
  const std::vector<float> omega1 = RandomVector(kD * kK, 4);
  const std::vector<float> omega2 = RandomVector(kD * kK, 5);
  ASSERT_OK(sk_->Open(0, kD, omega1, false, kMaxRows));
  ASSERT_OK(sk_->Add(0, Produce(0), kN, kStride, producer_));
  ASSERT_OK(sk_->Close(0, data.get(), Layout().sketch[0], nullptr, nullptr));
  ASSERT_OK(sk_->Open(0, kD, omega2, false, kMaxRows));
  ASSERT_OK(sk_->Add(0, Produce(2), kN, kStride, producer_));
  ASSERT_OK(sk_->Close(0, data.get(), Layout().sketch[1], nullptr, nullptr));
  Acc first, second;
  AddOnHost(host_[0], omega1, false, &first);
  AddOnHost(host_[2], omega2, false, &second);
  ExpectMatches(ReadBack(*data, nullptr, 0), first, false);
  ExpectMatches(ReadBack(*data, nullptr, 1), second, false);
}

// Add on a producer stream under capture (thread-local mode, where any
// synchronising call of this thread, or work on the legacy stream, fails
// the capture): the capture ends cleanly with the sketch inside, and two
// replays add the rows twice.
TEST_F(DeviceSketchGpuTest, AddInsideGraphCaptureIsCapturedAndJoined) {
  auto data = MakeRegion(shm::RegionKind::kPosix, "cap", Layout().bytes);
  ASSERT_NE(data, nullptr);
  const std::vector<float> omega = RandomVector(kD * kK, 6);
  ASSERT_OK(sk_->Open(0, kD, omega, false, kMaxRows));
  ASSERT_EQ(cudaStreamBeginCapture(producer_, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  float* acts = Produce(0);
  const absl::Status added = sk_->Add(0, acts, kN, kStride, producer_);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(producer_, &graph);
  ASSERT_OK(added);
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_GT(nodes, 2u) << "only the producer's memset and copy were captured";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaStream_t sketch = static_cast<cudaStream_t>(sk_->stream());
  for (int replay = 0; replay < 2; ++replay) {
    // Replays are ordered with the sketch stream by the caller (the window
    // open before, the close after).
    ASSERT_EQ(cudaEventRecord(ev_, sketch), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(producer_, ev_, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, producer_), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(ev_, producer_), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(sketch, ev_, 0), cudaSuccess);
  }
  ASSERT_OK(sk_->Close(0, data.get(), Layout().sketch[0], nullptr, nullptr));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  Acc want;
  AddOnHost(host_[0], omega, false, &want);
  AddOnHost(host_[0], omega, false, &want);
  ExpectMatches(ReadBack(*data, nullptr, 0), want, false);
}

TEST_F(DeviceSketchGpuTest, RefusesBadCalls) {
  const std::vector<float> omega = RandomVector(kD * kK, 7);
  float* acts = Produce(0);
  EXPECT_THAT(sk_->Add(1, acts, kN, kStride, producer_),
              StatusIs(absl::StatusCode::kInvalidArgument));  // never opened
  EXPECT_THAT(sk_->Open(2, kD, omega, false, kMaxRows),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sk_->Open(0, kD + 1, omega, false, kMaxRows),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(sk_->Open(0, kD, omega, false, kMaxRows));
  EXPECT_THAT(sk_->Add(0, host_[0].data(), kN, kStride, producer_),
              StatusIs(absl::StatusCode::kInvalidArgument));  // host memory
  EXPECT_THAT(sk_->Add(0, acts, kN, 0, producer_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto small = MakeRegion(shm::RegionKind::kPosix, "small", 4096);
  ASSERT_NE(small, nullptr);
  EXPECT_THAT(sk_->Close(0, small.get(), Layout().sketch[1], nullptr, nullptr),
              StatusIs(absl::StatusCode::kOutOfRange));
}

}  // namespace
}  // namespace gift::client
