// Shared by giftd's core tests (daemon_test, daemon_peer_test): a rank's
// Register request for a two-layer job, and what a rank maps after
// Register.
//
//   auto resp = daemon->Register(Request(0, /*world=*/2));
//   FakeRank rank = FakeRank::Map(*resp);
//
// Thread safety: test code, one thread.
#ifndef GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_
#define GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gift/v1/agent.pb.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::daemon {

// Job "job", layers fc1 (16 × 24) and fc2 (16 × 48), this process's pid.
inline v1::RegisterRequest Request(int rank, int world = 2) {
  v1::RegisterRequest r;
  r.set_job_id("job");
  r.set_rank(rank);
  r.set_world_size(world);
  r.set_pid(::getpid());
  r.set_layout_version(shm::kLayoutVersion);
  r.set_memory(v1::MEMORY_KIND_HOST);
  for (const char* name : {"fc1", "fc2"}) {
    v1::LayerShape* l = r.add_layers();
    l->set_name(name);
    l->set_d_out(16);
    l->set_d_in(std::string(name) == "fc1" ? 24 : 48);
  }
  return r;
}

// What a rank maps after Register.
struct FakeRank {
  std::unique_ptr<shm::Region> control;
  std::vector<std::unique_ptr<shm::Region>> data;

  static FakeRank Map(const v1::RegisterResponse& resp) {
    FakeRank f;
    shm::RegionDesc d{};
    d.kind = static_cast<uint32_t>(shm::RegionKind::kPosix);
    d.bytes = resp.control_block_bytes();
    std::strncpy(d.name, resp.control_block().c_str(), sizeof(d.name) - 1);
    auto c = shm::OpenRegion(d);
    EXPECT_OK(c);
    f.control = *std::move(c);
    EXPECT_OK(shm::CheckControlBlock(f.control->data(), f.control->bytes()));
    for (uint32_t i = 0; i < shm::Header(f.control->data())->n_layers; ++i) {
      auto r = shm::OpenRegion(shm::Entry(f.control->data(), i)->region);
      EXPECT_OK(r);
      f.data.push_back(*std::move(r));
    }
    return f;
  }
  shm::LayerEntry* entry(int i) { return shm::Entry(control->data(), i); }
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_
