// GiftdConnection's device sketches end to end (label gpu; the device
// tests skip without a device): the real giftd binary
// (tests/daemon/giftd_fixture.h) serves one rank that runs in this process
// (world size 1, Gloo allreduce of host buckets) and pins its layer "w". With
// device_memory the rank's sketch buffers are CUDA IPC device memory in giftd's
// process: a window close copies the device accumulators there on the sketch
// stream and records the event giftd's Read waits on, and giftd builds the
// factor from it.
//
// Every step feeds the same activations (300 rows of which giftd's
// sketch_rows: 96 samples every third), so E[a aᵀ] = Y / count of a window
// does not depend on how many steps it held, and every giftd run starts
// from the same Ω₀ (the job's seed): the first factor of a device run must
// equal the host run's to rounding. The comparison is of the dense
// T = I + U diag(c) Uᵀ, which does not depend on the basis U chooses among
// directions with equal c (those below the floor have c = 0).
//
//  * HostRunsAgree: two host runs, the premise of the comparisons (runs
//    without a GPU too).
//  * DeviceSketchesGiveTheHostFactor: Sketch(…, producer_stream) with the
//    rows produced on a stream and never synchronised on the host.
//  * SketchUnderGraphCaptureGivesTheHostFactor: the first wanted step
//    captures the producer stream (cudaStreamCaptureModeThreadLocal) around
//    the activations' copy and Sketch, and the graph then replaces Sketch in
//    every wanted step. Any host synchronisation or legacy-stream work in
//    Sketch fails that capture. The code before issue 12.3 did: its blocking
//    cudaMemcpy2D to the host ran on the legacy stream, which syncs with the
//    blocking producer stream, so by the CUDA capture rules it returns
//    cudaErrorStreamCaptureImplicit and invalidates the capture (a
//    synchronous copy is also a prohibited call in thread-local mode).
//    Checked by reading that code against those rules, not on a GPU.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/allreduce_engine.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/thread_ranks_testutil.h"
#include "client/versioned_factors.h"
#include "common/status_matchers.h"
#include "kernels/gpu.h"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/subprocess.h"
#include "tests/gpu/gpu_testutil.h"

namespace gift::client {
namespace {

using testing_daemon::CleanUpRun;
using testing_daemon::Giftd;
using testing_daemon::GiftdConfig;
using testing_daemon::MakeTempDir;
using testing_daemon::RankGroup;

constexpr int64_t kOut = 32, kIn = 128, kRows = 300;
constexpr char kLayer[] = "w";
constexpr char kJob[] = "attach-sketch-gpu";  // one job id: one Ω₀

enum class Mode { kHost, kDevice, kDeviceGraph };

// Rows with a decaying spectrum (seeded), the same every step.
std::vector<float> Activations() {
  std::mt19937 gen(7);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> a(kRows * kIn);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kIn; ++j) {
      a[i * kIn + j] = n(gen) * std::pow(0.97f, static_cast<float>(j));
    }
  }
  return a;
}

absl::StatusOr<EpochPlan> Plan() {
  return EpochPlan::Create(
      0, kOut * kIn + kOut,
      {{.name = kLayer, .shape = {kOut, kIn}, .offset = 0},
       {.name = "b", .shape = {kOut}, .offset = kOut * kIn}});
}

// T = I + U diag(c) Uᵀ, d × d in double.
std::vector<double> DenseT(const LayerFactor& f) {
  std::vector<double> t(f.d_in * f.d_in, 0.0);
  for (int64_t i = 0; i < f.d_in; ++i) {
    t[i * f.d_in + i] = 1.0;
    for (int64_t j = 0; j < f.d_in; ++j) {
      double s = 0;
      for (int64_t q = 0; q < f.r; ++q) {
        s += double{f.u[i * f.r + q]} * f.c[q] * f.u[j * f.r + q];
      }
      t[i * f.d_in + j] += s;
    }
  }
  return t;
}

double RelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// The device side of one rank: the activations' source, the buffer a
// "forward pass" writes them into on the producer stream, and a graph of
// that write and Sketch (kDeviceGraph).
class DeviceFeed {
 public:
  explicit DeviceFeed(const std::vector<float>& host) {
    src_ = gpu_testing::ToDevice(host);
    EXPECT_OK(acts_.Allocate(host.size()));
    // Blocking, as PyTorch's streams: the legacy stream syncs with it.
    EXPECT_EQ(cudaStreamCreate(&producer_), cudaSuccess);
    EXPECT_EQ(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming),
              cudaSuccess);
    EXPECT_EQ(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming),
              cudaSuccess);
  }
  ~DeviceFeed() {
    cudaStreamSynchronize(producer_);
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    cudaEventDestroy(read_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(producer_);
  }

  // This step's activations, written on the producer stream and left in
  // flight, but not before the sketch stream read the last ones (what
  // record_stream does for PyTorch's allocator).
  absl::Status Sketch(GiftdConnection& att) {
    EXPECT_EQ(cudaStreamWaitEvent(producer_, read_, 0), cudaSuccess);
    Produce();
    absl::Status st = att.Sketch(kLayer, acts_.get(), kRows, producer_);
    EXPECT_EQ(
        cudaEventRecord(read_, static_cast<cudaStream_t>(att.sketch_stream())),
        cudaSuccess);
    return st;
  }

  // Captures Produce + Sketch once (the producer stream in thread-local
  // capture mode), then replays the graph, ordered with the sketch stream
  // the way a graph replay must be (after the window open there, before
  // the close).
  void SketchByGraph(GiftdConnection& att) {
    cudaStream_t sketch = static_cast<cudaStream_t>(att.sketch_stream());
    if (exec_ == nullptr) {
      ASSERT_EQ(
          cudaStreamBeginCapture(producer_, cudaStreamCaptureModeThreadLocal),
          cudaSuccess);
      Produce();
      const absl::Status st = att.Sketch(kLayer, acts_.get(), kRows, producer_);
      const cudaError_t end = cudaStreamEndCapture(producer_, &graph_);
      ASSERT_OK(st) << "Sketch failed inside a capture: a host "
                       "synchronisation or legacy-stream call";
      ASSERT_EQ(end, cudaSuccess)
          << "the capture was invalidated: " << cudaGetErrorString(end);
      size_t nodes = 0;
      ASSERT_EQ(cudaGraphGetNodes(graph_, nullptr, &nodes), cudaSuccess);
      ASSERT_GT(nodes, 2u) << "the sketch is not in the graph";
      ASSERT_EQ(cudaGraphInstantiate(&exec_, graph_, 0), cudaSuccess);
    }
    ASSERT_EQ(cudaEventRecord(done_, sketch), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(producer_, done_, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec_, producer_), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(done_, producer_), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(sketch, done_, 0), cudaSuccess);
    ++replays_;
  }
  int replays() const { return replays_; }

 private:
  void Produce() {
    EXPECT_EQ(
        cudaMemcpyAsync(acts_.get(), src_.get(), kRows * kIn * sizeof(float),
                        cudaMemcpyDeviceToDevice, producer_),
        cudaSuccess);
  }

  gpu::DeviceBuffer<float> src_, acts_;
  cudaStream_t producer_ = nullptr;
  cudaEvent_t read_ = nullptr, done_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int replays_ = 0;
};

class AttachmentSketchGpuTest : public ::testing::Test {
 protected:
  // The device tests skip without a device; the host premise runs anyway.
  void SkipWithoutDevice() {
    if (!gpu::Available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  void TearDown() override {
    if (!dir_.empty()) CleanUpRun(HasFailure(), dir_, &giftd_, &no_ranks_);
  }

  // A fresh giftd, then one rank in `mode` until the first factor of "w"
  // arrives (60 s at most); that factor.
  LayerFactor FirstFactor(Mode mode) {
    if (!dir_.empty()) CleanUpRun(HasFailure(), dir_, &giftd_, &no_ranks_);
    absl::StatusOr<std::string> dir = MakeTempDir("attach_sketch_gpu");
    EXPECT_OK(dir);
    dir_ = dir.ok() ? *dir : "";
    GiftdConfig c;
    c.refresh_interval = 4;
    c.rank_timeout_ms = 10000;  // the first CUDA calls may take seconds
    // The first factor must not go stale before the rank takes it: with
    // the fixture's 40 steps, a CI run at -j2 (2 ms steps, giftd's
    // turnaround slowed by the other test) read v1 62-68 steps old in each
    // of its five runs and dropped it.
    c.staleness_limit = 1000;
    c.extra_yaml = "sketch_rows: 96\n";
    absl::StatusOr<std::unique_ptr<Giftd>> d =
        Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir_, c);
    EXPECT_OK(d);
    if (!d.ok()) return {};
    giftd_ = *std::move(d);
    LayerFactor out;
    RunThreadRanks(1, [&](Transport& comm) { Rank(mode, comm, &out); });
    return out;
  }

  // FirstFactor(mode) again until its version is `version` (5 runs at
  // most): Ω is seeded per version, so v2's T differs from v1's (by 0.03
  // here), and on a loaded machine a run may read v2 first.
  LayerFactor FirstFactorOfVersion(Mode mode, int64_t version) {
    LayerFactor f = FirstFactor(mode);
    for (int i = 1; i < 5 && f.version != version && !HasFatalFailure(); ++i) {
      f = FirstFactor(mode);
    }
    EXPECT_EQ(f.version, version) << "five runs read another first version";
    return f;
  }

  void Rank(Mode mode, Transport& comm, LayerFactor* out) {
    absl::StatusOr<EpochPlan> plan = Plan();
    ASSERT_OK(plan);
    const std::vector<float> host = Activations();
    // Outlives the attachment, whose sketch stream reads it.
    std::unique_ptr<DeviceFeed> feed;
    if (mode != Mode::kHost) feed = std::make_unique<DeviceFeed>(host);
    ConnectionOptions o;
    o.agent_socket = giftd_->agent_socket();
    o.job_id = kJob;
    o.rank = 0;
    o.world_size = 1;
    o.device_memory = mode != Mode::kHost;
    o.device = 0;
    o.retry_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<GiftdConnection>> att =
        GiftdConnection::Create(o, *plan);
    ASSERT_OK(att);
    ASSERT_TRUE((*att)->stats().attached) << (*att)->stats().last_error;
    EXPECT_EQ((*att)->sketch_stream() != nullptr, mode != Mode::kHost);
    absl::StatusOr<testing_daemon::CommandResult> pin =
        giftd_->Ctl({"pin", kLayer});
    ASSERT_OK(pin);
    ASSERT_EQ(pin->exit_code, 0) << pin->err;
    absl::StatusOr<std::unique_ptr<AllReduceEngine>> ar =
        AllReduceEngine::Create(&comm, *plan, AllReduceEngineOptions{});
    ASSERT_OK(ar);
    VersionedFactors factors;
    std::mt19937 gen(3);
    std::normal_distribution<float> g(0, 1e-2f);
    std::vector<float> bucket(kOut * kIn + kOut);
    int sketched = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (int64_t step = 0; absl::Now() < deadline; ++step) {
      if ((*att)->WantsSketch(kLayer)) {
        ++sketched;
        if (mode == Mode::kHost) {
          ASSERT_OK((*att)->Sketch(kLayer, host.data(), kRows));
        } else if (mode == Mode::kDevice) {
          ASSERT_OK(feed->Sketch(**att));
        } else {
          feed->SketchByGraph(**att);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
      ASSERT_OK((*att)->BeforeStep(ar->get(), &factors));
      if (const LayerFactor* f = factors.Newest(kLayer); f != nullptr) {
        *out = *f;
        break;
      }
      for (float& x : bucket) x = g(gen);
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(bucket.data(), factors, &t));
      ASSERT_OK((*att)->AfterStep(**ar, t, 0.001));
      absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_GT(sketched, 0) << "giftd never asked for a sketch";
    ASSERT_FALSE(out->u.empty())
        << "no factor within 60 s: " << (*att)->stats().last_error;
    if (mode == Mode::kDeviceGraph) {
      EXPECT_EQ(feed->replays(), sketched);
    }
    EXPECT_EQ(out->kind, GiftTransform::kLowRank);
    EXPECT_EQ(out->d_in, kIn);
    // giftd gave the rank the memory it asked for: CUDA IPC data regions
    // for device ranks (no fallback to host shared memory).
    const std::string log = giftd_->Log();
    if (mode == Mode::kHost) {
      EXPECT_THAT(log, ::testing::HasSubstr("host memory"));
    } else {
      EXPECT_THAT(log, ::testing::HasSubstr("device memory"));
      EXPECT_THAT(log, ::testing::Not(
                           ::testing::HasSubstr("using host shared memory")));
    }
  }

  // T of the device run against the host run's, and the host factor is
  // far from the identity (so that the comparison has teeth). Measured on
  // the CPU: two host runs agree to 2e-8 (windows of 11 and 13 steps);
  // another sample of rows moves T by 0.16.
  void ExpectSameTransform(const LayerFactor& dev, const LayerFactor& host) {
    ASSERT_FALSE(host.u.empty());
    ASSERT_FALSE(dev.u.empty());
    ASSERT_EQ(dev.r, host.r);
    const std::vector<double> th = DenseT(host), td = DenseT(dev);
    std::vector<double> eye(th.size(), 0.0);
    for (int64_t i = 0; i < kIn; ++i) eye[i * kIn + i] = 1.0;
    EXPECT_GT(RelDiff(th, eye), 0.05);
    EXPECT_LE(RelDiff(td, th), 1e-3);
  }

  std::string dir_;
  std::unique_ptr<Giftd> giftd_;
  std::unique_ptr<RankGroup> no_ranks_;
};

// The premise of the comparisons: two host runs give the same first
// factor of a version (whatever the length of the window it came from), far
// from the identity. Needs no GPU.
TEST_F(AttachmentSketchGpuTest, HostRunsAgree) {
  const LayerFactor a = FirstFactorOfVersion(Mode::kHost, 1);
  ASSERT_FALSE(HasFatalFailure());
  const LayerFactor b = FirstFactorOfVersion(Mode::kHost, a.version);
  ASSERT_FALSE(HasFatalFailure());
  ExpectSameTransform(b, a);
}

TEST_F(AttachmentSketchGpuTest, DeviceSketchesGiveTheHostFactor) {
  SkipWithoutDevice();
  if (IsSkipped() || HasFatalFailure()) return;
  const LayerFactor host = FirstFactorOfVersion(Mode::kHost, 1);
  ASSERT_FALSE(HasFatalFailure());
  const LayerFactor dev = FirstFactorOfVersion(Mode::kDevice, host.version);
  ASSERT_FALSE(HasFatalFailure());
  ExpectSameTransform(dev, host);
}

TEST_F(AttachmentSketchGpuTest, SketchUnderGraphCaptureGivesTheHostFactor) {
  SkipWithoutDevice();
  if (IsSkipped() || HasFatalFailure()) return;
  const LayerFactor host = FirstFactorOfVersion(Mode::kHost, 1);
  ASSERT_FALSE(HasFatalFailure());
  const LayerFactor graph =
      FirstFactorOfVersion(Mode::kDeviceGraph, host.version);
  ASSERT_FALSE(HasFatalFailure());
  ExpectSameTransform(graph, host);
}

}  // namespace
}  // namespace gift::client
