#include "client/gloo_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "client/transport_factory.h"
#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::AnyOf;

class GlooTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    store_ = *FileStore::Create(dir_);
  }

  absl::StatusOr<std::unique_ptr<Transport>> Make(int rank, int world,
                                                  absl::Duration timeout) {
    TransportOptions o;
    o.rank = rank;
    o.world_size = world;
    o.store = store_.get();
    o.timeout = timeout;
    return CreateTransport(o);
  }

  gift::testing::TempDir tmp_{"gift_gloo_test"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
};

TEST_F(GlooTransportTest, OneRankCollectivesAreLocalCopies) {
  absl::StatusOr<std::unique_ptr<Transport>> c = Make(0, 1, absl::Seconds(5));
  ASSERT_OK(c);
  Transport& comm = **c;

  std::vector<char> send = {'a', 'b', 'c', 'd'};
  std::vector<char> recv(8, 'x');
  const std::vector<size_t> ssize = {3}, soff = {1}, rsize = {3}, roff = {4};
  ASSERT_OK(comm.AllToAllV(send.data(), ssize, soff, recv.data(), rsize, roff));
  EXPECT_EQ(std::string(recv.begin(), recv.end()), "xxxxbcdx");

  std::vector<char> gathered(4, 0);
  ASSERT_OK(
      comm.AllGatherV(send.data(), 4, gathered.data(), std::vector<size_t>{4}));
  EXPECT_EQ(gathered, send);

  std::vector<float> x = {1.5f, -2.0f, 3.25f};
  std::vector<float> y(3, 0.0f);
  ASSERT_OK(comm.AllReduce(x.data(), y.data(), 3, DataType::kFloat32,
                           ReduceOp::kSum));
  EXPECT_EQ(y, x);
  std::vector<int64_t> v = {7, -9};
  ASSERT_OK(
      comm.AllReduce(v.data(), v.data(), 2, DataType::kInt64, ReduceOp::kMin));
  EXPECT_EQ(v, (std::vector<int64_t>{7, -9}));

  ASSERT_OK(comm.Broadcast(send.data(), send.size(), 0));
  ASSERT_OK(comm.Barrier());
  EXPECT_EQ(comm.bytes_sent().Total(), 0u);
}

TEST_F(GlooTransportTest, ArgumentErrorsAreReportedAndDoNotBreak) {
  absl::StatusOr<std::unique_ptr<Transport>> c = Make(0, 1, absl::Seconds(5));
  ASSERT_OK(c);
  Transport& comm = **c;
  std::vector<char> buf(16);
  const std::vector<size_t> two = {1, 1};
  const std::vector<size_t> one = {4};
  const std::vector<size_t> zero = {0};
  EXPECT_THAT(comm.AllToAllV(buf.data(), two, two, buf.data(), two, two),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.AllToAllV(buf.data(), one, zero, buf.data(), zero, zero),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.AllGatherV(buf.data(), 3, buf.data() + 8, one),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.AllReduce(buf.data(), buf.data(), 2, DataType::kBFloat16,
                             ReduceOp::kMax),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.AllReduce(nullptr, buf.data(), 2, DataType::kFloat32,
                             ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.Broadcast(buf.data(), 4, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.SetStream(buf.data()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(comm.SetTimeout(absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(comm.SetStream(nullptr));
  EXPECT_OK(comm.Barrier());
}

// Two ranks as threads of this process: a peer that goes away makes the
// survivor fail within the timeout, and the survivor is then broken.
TEST_F(GlooTransportTest, PeerLossBreaksCommunicator) {
  std::unique_ptr<Transport> peer;
  absl::Status peer_status;
  std::thread t([&] {
    absl::StatusOr<std::unique_ptr<Transport>> c =
        Make(1, 2, absl::Seconds(10));
    peer_status = c.status();
    if (c.ok()) peer = *std::move(c);
  });
  absl::StatusOr<std::unique_ptr<Transport>> c = Make(0, 2, absl::Seconds(10));
  t.join();
  ASSERT_OK(c);
  ASSERT_OK(peer_status);
  Transport& comm = **c;

  // Validation runs before anything is sent, so a rejected call needs no
  // matching call on the peer.
  std::vector<char> buf(16);
  const std::vector<size_t> sizes = {4, 4};
  const std::vector<size_t> overlapping = {0, 2};
  EXPECT_THAT(comm.AllToAllV(buf.data(), sizes, overlapping, buf.data(), sizes,
                             overlapping),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // Both ranks work together once.
  std::vector<float> x = {1.0f, 2.0f}, px = {10.0f, 20.0f};
  std::thread other([&] {
    EXPECT_OK(peer->AllReduce(px.data(), px.data(), 2, DataType::kFloat32,
                              ReduceOp::kSum));
  });
  ASSERT_OK(comm.AllReduce(x.data(), x.data(), 2, DataType::kFloat32,
                           ReduceOp::kSum));
  other.join();
  EXPECT_EQ(x, (std::vector<float>{11.0f, 22.0f}));
  EXPECT_EQ(px, x);
  EXPECT_GT(comm.bytes_sent().all_reduce, 0u);

  // The peer stalls: it never calls. The survivor times out.
  ASSERT_OK(comm.SetTimeout(absl::Milliseconds(300)));
  absl::Time start = absl::Now();
  absl::Status s =
      comm.AllReduce(x.data(), x.data(), 2, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // Broken from now on: fail fast, naming the first failure.
  start = absl::Now();
  s = comm.Barrier();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("broken"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  // The survivor closed its connections, so the stalled peer fails fast too.
  ASSERT_OK(peer->SetTimeout(absl::Seconds(10)));
  start = absl::Now();
  EXPECT_THAT(peer->Barrier().code(),
              AnyOf(absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GlooByteCountTest, RingAllReduceSendsEveryByteTwiceWMinusOneTimes) {
  for (int w : {2, 3, 4, 5, 8}) {
    for (size_t elems : {1ul, 7ul, 1000ul, 262144ul, 1000003ul}) {
      for (size_t esize : {2ul, 4ul, 8ul}) {
        const size_t total = elems * esize;
        uint64_t sum = 0;
        for (int r = 0; r < w; ++r) {
          sum += GlooTransport::RingAllReduceBytes(total, esize, w, r);
        }
        EXPECT_EQ(sum, 2 * static_cast<uint64_t>(w - 1) * total)
            << "w=" << w << " bytes=" << total;
      }
    }
  }
  EXPECT_EQ(GlooTransport::RingAllReduceBytes(4096, 4, 1, 0), 0u);
}

TEST(GlooByteCountTest,
     RingAllGatherVAndTreeBroadcastSendEachPieceToEveryPeer) {
  const std::vector<size_t> sizes = {5, 0, 17, 3, 100};
  uint64_t sum = 0;
  for (int r = 0; r < 5; ++r)
    sum += GlooTransport::RingAllGatherVBytes(sizes, r);
  EXPECT_EQ(sum, 4u * 125u);
  for (int w : {2, 3, 5, 8}) {
    for (int root = 0; root < w; ++root) {
      uint64_t b = 0;
      for (int r = 0; r < w; ++r)
        b += GlooTransport::TreeBroadcastBytes(10, w, r, root);
      EXPECT_EQ(b, static_cast<uint64_t>(10 * (w - 1))) << "w=" << w;
    }
  }
}

}  // namespace
}  // namespace gift::client
