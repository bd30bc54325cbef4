// Shared by giftd's core tests (daemon_test, daemon_peer_test, ...): a
// one-node config, a rank's Register request for a two-layer job, what a
// rank maps after Register, and a fixture with one such rank.
//
//   auto d = Daemon::Create(TestDaemonConfig("xtest"), &registry);
//   auto resp = (*d)->Register(Request(0, /*world=*/2));
//   FakeRank rank = FakeRank::Map(*resp);
//
// Thread safety: test code, one thread.
#ifndef GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_
#define GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/metrics/metrics.h"
#include "gift/v1/agent.pb.h"
#include "gtest/gtest.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::daemon {

// One node, shared memory named "/gift-<tag><pid>-…", no metrics listener,
// one refresher thread. poll_interval_ms: the default 5000 leaves the polls
// to the test (the poll thread's first turn comes after it).
inline DaemonConfig TestDaemonConfig(const std::string& tag,
                                     int poll_interval_ms = 5000) {
  DaemonConfig c;
  c.node = "test";
  c.shm_prefix = absl::StrCat("/gift-", tag, ::getpid());
  c.poll_interval_ms = poll_interval_ms;
  c.refresh_threads = 1;
  c.metrics_address = "";
  return c;
}

// The POSIX shared-memory objects under a config's prefix (0 on error,
// which fails the test).
inline size_t ShmObjects(const DaemonConfig& c) {
  auto names = shm::ListPosixObjects(c.shm_prefix + "-");
  EXPECT_OK(names);
  return names.ok() ? names->size() : 0;
}

// The value of one series (its name and labels as exported, e.g.
// `gift_steps_total{job_id="job",node="test",rank="0"}`) in the registry's
// text; 0 when it is absent.
inline double SeriesValue(const metrics::Registry& registry,
                          const std::string& series) {
  const std::string key = series + " ";
  const std::string text = metrics::Serialize(registry);
  const size_t at = text.find(key);
  return at == std::string::npos
             ? 0.0
             : std::strtod(text.c_str() + at + key.size(), nullptr);
}

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

// A giftd on TestDaemonConfig(tag) with rank 0 of a one-rank job
// registered and mapped (rank_).
class OneRankDaemonTest : public ::testing::Test {
 protected:
  explicit OneRankDaemonTest(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override {
    auto d = Daemon::Create(config(), &registry_);
    ASSERT_OK(d);
    daemon_ = *std::move(d);
    auto resp = daemon_->Register(Request(0, /*world=*/1));
    ASSERT_OK(resp);
    rank_ = FakeRank::Map(*resp);
  }
  DaemonConfig config() const { return TestDaemonConfig(tag_); }

  const std::string tag_;
  metrics::Registry registry_;
  std::unique_ptr<Daemon> daemon_;
  FakeRank rank_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_DAEMON_TESTUTIL_H_
