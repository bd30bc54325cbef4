// Test helper: runs a function as every rank of a Gloo job inside one
// process, one thread per rank, over a FileStore in a fresh temporary
// directory. Lets unit tests exercise collectives (world size 1..4) without
// the multi-process harness.
//
//   RunThreadRanks(3, [](Transport& comm) {
//     EXPECT_OK(comm.Barrier());
//   });
//
// Thread safety: each rank's function runs on its own thread with its own
// communicator; gtest assertions are thread-safe.
#ifndef GIFT_CLIENT_THREAD_RANKS_TESTUTIL_H_
#define GIFT_CLIENT_THREAD_RANKS_TESTUTIL_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/store.h"
#include "client/transport_factory.h"
#include "common/testing.h"

namespace gift::client {

inline void RunThreadRanks(int world_size,
                           const std::function<void(Transport&)>& fn) {
  gift::testing::TempDir dir("gift_thread_ranks");
  ASSERT_TRUE(dir.ok());
  absl::StatusOr<std::unique_ptr<FileStore>> store =
      FileStore::Create(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      TransportOptions options;
      options.rank = r;
      options.world_size = world_size;
      options.store = store->get();
      options.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Transport>> comm =
          CreateTransport(options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace gift::client

#endif  // GIFT_CLIENT_THREAD_RANKS_TESTUTIL_H_
