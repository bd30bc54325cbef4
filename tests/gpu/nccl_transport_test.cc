// The NCCL communicator on one GPU, as a one-rank job: every collective on
// device buffers, on a caller's stream, against what was sent. Also the
// rendezvous and init timeouts. Every test but the no-device one skips
// without a CUDA device.
// Registered from client/CMakeLists.txt (label gpu).
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "client/transport_factory.h"
#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;

bool HaveDevice() {
  int n = 0;  // untouched when there is no driver
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A device buffer that frees itself.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(1, n) * sizeof(T)),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  T* get() { return static_cast<T*>(ptr_); }
  void Upload(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() {
    std::vector<T> v(n_);
    EXPECT_EQ(
        cudaMemcpy(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

class NcclTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    store_ = *FileStore::Create(dir_);
    options_.backend = "nccl";
    options_.rank = 0;
    options_.world_size = 1;
    options_.store = store_.get();
    options_.timeout = absl::Seconds(30);
  }
  gift::testing::TempDir tmp_{"gift_nccl_test"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
  TransportOptions options_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST_F(NcclTransportTest, OneRankCollectivesOnDeviceBuffers) {
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  ASSERT_OK(c);
  Transport& comm = **c;
  EXPECT_EQ(comm.backend_name(), "nccl");
  EXPECT_EQ(comm.memory_kind(), MemoryKind::kDevice);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_OK(comm.SetStream(stream));

  constexpr size_t kN = 100003;
  const std::vector<float> x = RandomFloats(kN, 7);
  DeviceBuffer<float> in(kN), out(kN);
  in.Upload(x);
  out.Upload(std::vector<float>(kN, -99.0f));
  // All-reduce, out of place and in place: one rank's sum is its input.
  ASSERT_OK(comm.AllReduce(in.get(), out.get(), kN, DataType::kFloat32,
                           ReduceOp::kSum));
  EXPECT_EQ(out.Download(), x);
  ASSERT_OK(comm.AllReduce(in.get(), in.get(), kN, DataType::kFloat32,
                           ReduceOp::kMax));
  EXPECT_EQ(in.Download(), x);

  std::vector<int64_t> ints = {5, -3, 1LL << 40};
  DeviceBuffer<int64_t> di(ints.size());
  di.Upload(ints);
  ASSERT_OK(comm.AllReduce(di.get(), di.get(), ints.size(), DataType::kInt64,
                           ReduceOp::kMin));
  EXPECT_EQ(di.Download(), ints);

  std::vector<uint16_t> bf(513);
  for (size_t i = 0; i < bf.size(); ++i)
    bf[i] = static_cast<uint16_t>(0x3f80 + i);
  DeviceBuffer<uint16_t> db(bf.size());
  db.Upload(bf);
  ASSERT_OK(comm.AllReduce(db.get(), db.get(), bf.size(), DataType::kBFloat16,
                           ReduceOp::kSum));
  EXPECT_EQ(db.Download(), bf);

  // All-gather of one piece, broadcast and barrier.
  DeviceBuffer<float> gathered(kN);
  gathered.Upload(std::vector<float>(kN, -1.0f));
  const std::vector<size_t> sizes = {kN * sizeof(float)};
  ASSERT_OK(
      comm.AllGatherV(out.get(), kN * sizeof(float), gathered.get(), sizes));
  EXPECT_EQ(gathered.Download(), x);
  ASSERT_OK(comm.Broadcast(gathered.get(), kN * sizeof(float), 0));
  EXPECT_EQ(gathered.Download(), x);
  ASSERT_OK(comm.Barrier());

  // All-to-all: the piece to itself moves between offsets.
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  DeviceBuffer<uint8_t> a(8), b(8);
  a.Upload(bytes);
  b.Upload(std::vector<uint8_t>(8, 0xEE));
  const std::vector<size_t> n = {5}, so = {2}, ro = {1};
  ASSERT_OK(comm.AllToAllV(a.get(), n, so, b.get(), n, ro));
  EXPECT_EQ(b.Download(),
            (std::vector<uint8_t>{0xEE, 3, 4, 5, 6, 7, 0xEE, 0xEE}));

  EXPECT_EQ(comm.bytes_sent().Total(), 0u);  // nothing leaves a one-rank job
  ASSERT_OK(comm.SetStream(nullptr));
  c->reset();
  cudaStreamDestroy(stream);
}

TEST(NcclWithoutDeviceTest, CreationFailsCleanly) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  gift::testing::TempDir tmp("gift_nccl_test");
  ASSERT_TRUE(tmp.ok());
  std::unique_ptr<FileStore> store = *FileStore::Create(tmp.path());
  TransportOptions options;
  options.backend = "nccl";
  options.rank = 0;
  options.world_size = 1;
  options.store = store.get();
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::HasSubstr("cudaSetDevice"));
}

TEST_F(NcclTransportTest, MissingRankZeroTimesOutInRendezvous) {
  options_.world_size = 2;
  options_.rank = 1;
  options_.timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  EXPECT_THAT(CreateTransport(options_),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(NcclTransportTest, MissingPeerTimesOutInInit) {
  options_.world_size = 2;
  options_.rank = 0;
  options_.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(c.status().code(),
              ::testing::AnyOf(absl::StatusCode::kDeadlineExceeded,
                               absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace gift::client
