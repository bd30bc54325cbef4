#include "client/transport_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

class FactoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    store_ = *FileStore::Create(dir_);
    options_.rank = 0;
    options_.world_size = 1;
    options_.store = store_.get();
    options_.timeout = absl::Seconds(5);
  }

  gift::testing::TempDir tmp_{"gift_factory_test"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
  TransportOptions options_;
};

TEST_F(FactoryTest, RejectsUnknownBackend) {
  options_.backend = "mpi";
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("mpi"));
}

TEST_F(FactoryTest, RejectsBadRank) {
  options_.world_size = 2;
  for (int rank : {-1, 2, 7}) {
    options_.rank = rank;
    EXPECT_THAT(CreateTransport(options_),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "rank " << rank;
  }
}

TEST_F(FactoryTest, RejectsBadWorldSize) {
  for (int w : {0, -3}) {
    options_.world_size = w;
    EXPECT_THAT(CreateTransport(options_),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "world size " << w;
  }
}

TEST_F(FactoryTest, RejectsMissingStoreBadTimeoutAndBadDevice) {
  TransportOptions o = options_;
  o.store = nullptr;
  EXPECT_THAT(CreateTransport(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = options_;
  o.timeout = absl::ZeroDuration();
  EXPECT_THAT(CreateTransport(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = options_;
  o.device = -1;
  EXPECT_THAT(CreateTransport(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FactoryTest, BuildsGlooForOneRank) {
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  ASSERT_OK(c);
  EXPECT_EQ((*c)->backend_name(), "gloo");
  EXPECT_EQ((*c)->rank(), 0);
  EXPECT_EQ((*c)->world_size(), 1);
  EXPECT_EQ((*c)->timeout(), absl::Seconds(5));
  EXPECT_EQ((*c)->memory_kind(), MemoryKind::kHost);
}

TEST_F(FactoryTest, NcclWithoutCudaIsAFailedPrecondition) {
#if defined(GIFT_HAVE_CUDA)
  GTEST_SKIP() << "built with CUDA: the NCCL backend exists (tests/gpu)";
#else
  options_.backend = "nccl";
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("built without CUDA"));
#endif
}

TEST_F(FactoryTest, GlooRendezvousTimesOutWhenPeersNeverArrive) {
  options_.world_size = 2;
  options_.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Transport>> c = CreateTransport(options_);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace gift::client
