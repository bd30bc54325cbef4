// Test helpers of the GiftdConnection tests: a real in-process giftd
// (Daemon + GrpcServer on a unix socket, short intervals), the ranks' bucket
// (a 2-D layer "w" of kOut x kIn and its bias "b") and the gradients of a
// step built from activations with a decaying spectrum.
//
//   Giftd giftd(socket, "/gift-test" + pid);
//   giftd.Pin("w");
//   MakeStep(rank, step, &acts, &bucket);
//
// Thread safety: Giftd's calls are the Daemon's (thread-safe); the free
// functions are pure.
#ifndef GIFT_CLIENT_GIFTD_TESTUTIL_H_
#define GIFT_CLIENT_GIFTD_TESTUTIL_H_

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/allreduce_engine.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/daemon.h"
#include "daemon/grpc_server.h"
#include "gtest/gtest.h"
#include "shm/region.h"

namespace gift::client {

inline constexpr int64_t kOut = 32, kIn = 64, kRows = 256;

// Activations with a decaying spectrum and gradients built from them, so
// that whitening helps (a measurable gain) and the sketch has structure.
inline void MakeStep(int rank, int64_t step, std::vector<float>* acts,
                     std::vector<float>* bucket) {
  std::mt19937 gen(static_cast<uint32_t>(1000 * step + rank));
  std::normal_distribution<float> n(0, 1);
  acts->resize(kRows * kIn);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kIn; ++j) {
      (*acts)[i * kIn + j] = n(gen) * std::pow(0.8f, static_cast<float>(j));
    }
  }
  bucket->assign(kOut * kIn + kOut, 0.0f);
  std::vector<float> delta(kRows * kOut);
  for (float& d : delta) d = n(gen);
  for (int64_t o = 0; o < kOut; ++o) {
    for (int64_t i = 0; i < kRows; ++i) {
      const float d = delta[i * kOut + o];
      for (int64_t j = 0; j < kIn; ++j) {
        (*bucket)[o * kIn + j] += d * (*acts)[i * kIn + j] / kRows;
      }
    }
  }
  for (int64_t o = 0; o < kOut; ++o) (*bucket)[kOut * kIn + o] = n(gen);
}

// The ranks' bucket: one 2-D layer "w" and its bias "b".
inline absl::StatusOr<EpochPlan> TestPlan() {
  return EpochPlan::Create(
      0, kOut * kIn + kOut,
      {{.name = "w", .shape = {kOut, kIn}, .offset = 0},
       {.name = "b", .shape = {kOut}, .offset = kOut * kIn}});
}

// A rank's options for attaching to the giftd at `socket`: job `job_id`,
// `rank` of `world_size`, retrying every 50 ms.
inline ConnectionOptions RankOptions(const std::string& socket,
                                     const std::string& job_id, int rank,
                                     int world_size) {
  ConnectionOptions o;
  o.agent_socket = socket;
  o.job_id = job_id;
  o.rank = rank;
  o.world_size = world_size;
  o.retry_interval = absl::Milliseconds(50);
  return o;
}

// A rank of these tests: attached to a giftd, with its engine on
// TestPlan()'s bucket and the factors of its last step.
//
//   absl::StatusOr<TestRank> r = TestRank::Open(socket, "job", comm, 2);
//   ASSERT_OK(r);
//   MakeStep(comm.rank(), step, &acts, &bucket);
//   ASSERT_OK(r->Step(acts, /*sketch=*/true, &bucket, &t));
struct TestRank {
  std::unique_ptr<GiftdConnection> att;
  std::unique_ptr<AllReduceEngine> ar;
  VersionedFactors factors;

  // Rank comm.rank() of `world_size` of job `job_id`, attached to the giftd
  // at `socket` (RankOptions), its engine on `comm` with `options`.
  static absl::StatusOr<TestRank> Open(
      const std::string& socket, const std::string& job_id, Transport& comm,
      int world_size, const AllReduceEngineOptions& options = {}) {
    absl::StatusOr<EpochPlan> plan = TestPlan();
    if (!plan.ok()) return plan.status();
    TestRank r;
    absl::StatusOr<std::unique_ptr<GiftdConnection>> att =
        GiftdConnection::Create(
            RankOptions(socket, job_id, comm.rank(), world_size), *plan);
    if (!att.ok()) return att.status();
    r.att = *std::move(att);
    absl::StatusOr<std::unique_ptr<AllReduceEngine>> ar =
        AllReduceEngine::Create(&comm, *plan, options);
    if (!ar.ok()) return ar.status();
    r.ar = *std::move(ar);
    return r;
  }

  // One step on `bucket` (in place): the sketch of "w" from `acts` when
  // `sketch` and giftd wants it, BeforeStep, the allreduce, AfterStep.
  absl::Status Step(const std::vector<float>& acts, bool sketch,
                    std::vector<float>* bucket, StepTelemetry* t) {
    if (sketch && att->WantsSketch("w")) {
      if (absl::Status s = att->Sketch("w", acts.data(), kRows); !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = att->BeforeStep(ar.get(), &factors); !s.ok()) {
      return s;
    }
    if (absl::Status s = ar->Run(bucket->data(), factors, t); !s.ok()) {
      return s;
    }
    return att->AfterStep(*ar, *t, 0.001);
  }
};

// The control blocks of the ranks attached to the giftd whose shared
// memory is under `prefix`, mapped (giftd unlinks them when the ranks
// leave; the mappings stay readable). ControlHeader::rank tells them apart.
inline absl::StatusOr<std::vector<std::unique_ptr<shm::Region>>>
OpenControlBlocks(const std::string& prefix) {
  absl::StatusOr<std::vector<std::string>> names =
      shm::ListPosixObjects(prefix + "-");
  if (!names.ok()) return names.status();
  std::vector<std::unique_ptr<shm::Region>> blocks;
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, "-ctl")) continue;
    const std::string path =
        absl::StrCat("/dev/shm/", name.substr(name[0] == '/' ? 1 : 0));
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot stat ", path));
    }
    shm::RegionDesc d{};
    d.kind = static_cast<uint32_t>(shm::RegionKind::kPosix);
    d.bytes = static_cast<uint64_t>(st.st_size);
    std::strncpy(d.name, name.c_str(), sizeof(d.name) - 1);
    absl::StatusOr<std::unique_ptr<shm::Region>> block = shm::OpenRegion(d);
    if (!block.ok()) return block.status();
    blocks.push_back(*std::move(block));
  }
  return blocks;
}

// A giftd serving `socket` with shared memory under `prefix`, refresh
// interval 4, polling every 10 ms; stopped by the destructor.
class Giftd {
 public:
  // `refresh_interval`: steps between factor refreshes; `tweak` may change
  // the rest of the config.
  Giftd(const std::string& socket, const std::string& prefix,
        int refresh_interval = 4,
        const std::function<void(daemon::DaemonConfig&)>& tweak = nullptr) {
    daemon::DaemonConfig c;
    c.node = "test";
    c.shm_prefix = prefix;
    c.agent_socket = socket;
    c.control_address = "127.0.0.1:0";
    c.metrics_address = "";
    c.refresh_interval = refresh_interval;
    c.poll_interval_ms = 10;
    c.heartbeat_interval_ms = 50;
    c.rank_timeout_ms = 3000;
    c.staleness_limit = 30;
    c.refresh_threads = 1;
    c.probe_interval = 2;  // the ranks probe at it
    if (tweak) tweak(c);
    auto d = daemon::Daemon::Create(c, &registry_);
    EXPECT_OK(d);
    daemon_ = *std::move(d);
    daemon::GrpcServerOptions o;
    o.agent_socket = socket;
    o.control_address = "127.0.0.1:0";
    auto s = daemon::GrpcServer::Start(o, daemon_.get());
    EXPECT_OK(s);
    server_ = *std::move(s);
  }
  ~Giftd() {
    server_->Shutdown(absl::Seconds(1));
    daemon_->Stop();
  }
  // Pins `layer` in once a rank has declared it.
  void Pin(const std::string& layer) {
    v1::LayerSettings s;
    s.set_pin(v1::PIN_IN);
    Set(layer, s);
  }
  // Applies `settings` to `layer` once a rank has declared it; returns the
  // plan epoch that carries them (0 on failure, recorded).
  int64_t Set(const std::string& layer, const v1::LayerSettings& settings) {
    v1::SetLayerPolicyRequest r;
    r.set_layer(layer);
    *r.mutable_settings() = settings;
    gift::testing::WaitUntil(
        [&] {
          absl::StatusOr<v1::ListLayersResponse> l =
              daemon_->ListLayers(v1::ListLayersRequest());
          return l.ok() && l->layers_size() > 0;
        },
        absl::Seconds(20), absl::Milliseconds(10));
    absl::StatusOr<v1::SetLayerPolicyResponse> out = daemon_->SetLayerPolicy(r);
    EXPECT_OK(out);
    return out.ok() ? out->plan_epoch() : 0;
  }
  daemon::Daemon& core() { return *daemon_; }
  // The daemon's /metrics text.
  std::string MetricsText() const { return metrics::Serialize(registry_); }

 private:
  metrics::Registry registry_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::unique_ptr<daemon::GrpcServer> server_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_GIFTD_TESTUTIL_H_
