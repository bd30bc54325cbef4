// giftd end to end on a GPU (label gpu): the real giftd and giftctl binaries
// and two GPU rank processes (tests/daemon/gpu_rank_worker.cc) on device 0
// that average device buckets with AllReduceEngine over NCCL (rendezvous
// through giftd's store) and sketch device activations. The ranks register
// with MEMORY_KIND_DEVICE, so giftd keeps only their control blocks in
// POSIX shared memory and puts every data region (sketch buffers, factor
// slots) in CUDA IPC device memory.
//
// Each test pins one layer in with giftctl and checks, within deadlines,
// that its factors arrive and both ranks take the GIFT path with the same
// factor version in the same steps, with bit-identical, finite results, and
// that giftd keeps refreshing it. One test runs giftd's refresher on the CPU
// (the default), the other on device 0 (cuSOLVER, refresher_device: 0).
//
// NCCL refuses two ranks of one communicator on one GPU; the worker gives
// each rank its own NCCL_HOSTID so that NCCL connects them over loopback
// sockets. Should NCCL refuse anyway (worker exit 3), the test reruns with
// one rank, says so on stderr and records the property
// nccl_world_fallback=1: everything but the cross-rank comparison is still
// checked.
//
// Every test skips without a CUDA device. Registered from
// tests/daemon/CMakeLists.txt. Conditions are polled with deadlines; nothing
// asserts wall-clock time.
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gpu.h"
#include "shm/layout.h"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"

namespace gift::testing_daemon {
namespace {

using json = nlohmann::json;

// The worker declares blocks.{0,1}.mlp.{fc1,fc2} and a 1-D bias: four 2-D
// layers reach giftd.
constexpr uint32_t kDeclaredLayers = 4;
constexpr char kPinned[] = "blocks.0.mlp.fc2";
constexpr int kExitDuplicateGpu = 3;

// The largest sample of metric `name` in a Prometheus text scrape (0 when
// it has none).
double MaxSample(const std::string& scrape, const std::string& name) {
  double most = 0;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, name + "{") &&
        !absl::StartsWith(line, name + " ")) {
      continue;
    }
    double v = 0;
    const size_t space = line.rfind(' ');
    if (space != absl::string_view::npos &&
        absl::SimpleAtod(line.substr(space + 1), &v)) {
      most = std::max(most, v);
    }
  }
  return most;
}

// The layer's entry in a report line (null when absent; a const json's
// operator[] must not be asked for a missing key).
const json& LayerOf(const json& line, const std::string& layer) {
  static const json* const kNull = new json();
  auto layers = line.find("layers");
  if (layers == line.end() || !layers->contains(layer)) return *kNull;
  return (*layers)[layer];
}

std::string PathOf(const json& line, const std::string& layer) {
  const json& l = LayerOf(line, layer);
  return l.is_object() ? l.value("path", "") : "";
}

int64_t VersionOf(const json& line, const std::string& layer) {
  const json& l = LayerOf(line, layer);
  return l.is_object() ? l.value("version", int64_t{-2}) : -2;
}

class GiftdGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::Available()) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::string> dir = MakeTempDir("giftd_gpu");
    ASSERT_OK(dir);
    dir_ = *dir;
  }

  void TearDown() override {
    if (dir_.empty()) return;  // skipped
    CleanUpRun(HasFailure(), dir_, &giftd_, &ranks_);
  }

  static GiftdConfig Config(bool device_refresher) {
    GiftdConfig c;
    c.refresh_interval = 5;
    c.probe_interval = 2;
    // A rank's first CUDA and NCCL calls can take seconds: no reaping then.
    c.rank_timeout_ms = 10000;
    // Fewer rows than the worker passes: the attachment samples device rows
    // with a stride (one cudaMemcpy2D).
    c.extra_yaml = "sketch_rows: 128\n";
    if (device_refresher) c.extra_yaml += "refresher_device: 0\n";
    return c;
  }

  void StartGiftd(const GiftdConfig& config) {
    absl::StatusOr<std::unique_ptr<Giftd>> d =
        Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir_, config);
    ASSERT_OK(d);
    giftd_ = *std::move(d);
  }

  // Two ranks, or one when NCCL refuses two on this GPU (see the file
  // comment). Returns once every rank reported an attached step.
  void StartRanks(const std::string& job) {
    for (int world : {2, 1}) {
      RankOptions o;
      o.job = absl::StrCat(job, "-w", world);
      o.world_size = world;
      o.step_sleep_ms = 5;
      o.comm_timeout_s = 30;
      o.extra_args = {"--device=0"};
      absl::StatusOr<std::unique_ptr<RankGroup>> g = RankGroup::Start(
          GIFT_GPU_RANK_WORKER_BIN, dir_, giftd_->agent_socket(), o);
      ASSERT_OK(g);
      ranks_ = *std::move(g);
      const absl::Status up = ranks_->WaitForAll(
          [](const json& l) { return l["attached"] == true; },
          absl::Seconds(60));
      const int ended = up.ok() ? -1 : ranks_->EndedRank();
      if (ended < 0) {
        ASSERT_OK(up) << "ranks did not attach and step in time";
        world_ = world;
        return;
      }
      absl::StatusOr<int> code = ranks_->process(ended).Wait(absl::Seconds(1));
      const bool refused = code.ok() && *code == kExitDuplicateGpu;
      ASSERT_TRUE(refused && world > 1)
          << "rank " << ended << " ended: "
          << (code.ok() ? absl::StrCat("exit ", *code)
                        : code.status().ToString());
      std::cerr << "NCCL refused two ranks on one GPU even with distinct "
                   "NCCL_HOSTIDs; rerunning with one rank:\n"
                << ranks_->Logs();
      RecordProperty("nccl_world_fallback", 1);
      ranks_.reset();
    }
  }

  // giftctl layers: the pinned layer's status ({} when the call fails).
  json PinnedLayer() {
    absl::StatusOr<json> j = giftd_->CtlJson({"layers"});
    if (!j.ok()) return json::object();
    for (const json& l : Field(*j, "layers")) {
      if (Str(l, "name") == kPinned) return l;
    }
    return json::object();
  }

  // giftd keeps only control blocks in /dev/shm: one per rank, each exactly
  // a control block's size; the data regions live in device memory.
  void ExpectOnlyControlBlocksInDevShm() {
    const std::map<std::string, uint64_t> objects =
        ShmObjects(giftd_->shm_name_prefix());
    EXPECT_EQ(objects.size(), static_cast<size_t>(world_))
        << ::testing::PrintToString(objects);
    for (const auto& [name, bytes] : objects) {
      EXPECT_TRUE(absl::EndsWith(name, "-ctl")) << name;
      EXPECT_EQ(bytes, shm::ControlBlockBytes(kDeclaredLayers)) << name;
    }
    // giftd says which memory it gave the ranks.
    const std::string log = giftd_->Log();
    size_t device = 0;
    for (size_t at = log.find("device memory"); at != std::string::npos;
         at = log.find("device memory", at + 1)) {
      ++device;
    }
    EXPECT_EQ(device, static_cast<size_t>(world_)) << log;
    EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("host memory")));
  }

  // The whole scenario: pin, factors arrive, both ranks on the GIFT path,
  // refreshes keep coming; then the reports are compared step by step.
  void RunPinnedLayer(bool device_refresher) {
    ASSERT_NO_FATAL_FAILURE(StartGiftd(Config(device_refresher)));
    // A giftd linked with the CUDA libraries serves /metrics too
    // (daemon/thread_stack_floor.cc).
    absl::StatusOr<std::string> metrics = giftd_->Metrics();
    ASSERT_OK(metrics);
    EXPECT_GT(MaxSample(*metrics, "gift_daemon_info"), 0) << *metrics;
    ASSERT_NO_FATAL_FAILURE(StartRanks(device_refresher ? "cusolver" : "cpu"));
    ExpectOnlyControlBlocksInDevShm();

    absl::StatusOr<CommandResult> pin = giftd_->Ctl({"pin", kPinned});
    ASSERT_OK(pin);
    ASSERT_EQ(pin->exit_code, 0) << pin->err;
    ASSERT_OK(ranks_->WaitForAll(
        [](const json& l) {
          return PathOf(l, kPinned) == "gift" && VersionOf(l, kPinned) >= 0;
        },
        absl::Seconds(60)));
    const json first = PinnedLayer();
    EXPECT_TRUE(Bool(first, "selected")) << first.dump();
    EXPECT_THAT(Str(first, "reason"), ::testing::HasSubstr("pin"));
    const int64_t refreshes = Int(first, "refreshes");
    const int64_t version = Int(first, "factor_version");
    ASSERT_GE(refreshes, 1) << first.dump();
    // giftd keeps refreshing, and the ranks move to the newer factor.
    json now;
    EXPECT_TRUE(WaitFor(
        [&] {
          now = PinnedLayer();
          return Int(now, "refreshes") > refreshes;
        },
        absl::Seconds(40), absl::Milliseconds(200)))
        << "refreshes stayed at " << refreshes << ": " << now.dump();
    EXPECT_OK(ranks_->WaitForAll(
        [&](const json& l) {
          return PathOf(l, kPinned) == "gift" &&
                 VersionOf(l, kPinned) > version;
        },
        absl::Seconds(40)));

    // Every refresh worked: giftd warns "refresh of L ... failed" (or "not
    // submitted") otherwise.
    EXPECT_THAT(giftd_->Log(),
                ::testing::Not(::testing::HasSubstr("refresh of ")));
    ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
    CompareReports();
  }

  // Every step that all ranks reported: one epoch, the same path and factor
  // version of every layer, bit-identical finite results; and the pinned
  // layer on the GIFT path with at least two factor versions.
  void CompareReports() {
    std::vector<std::vector<json>> reps;
    size_t common = SIZE_MAX;
    for (int r = 0; r < world_; ++r) {
      reps.push_back(ranks_->Report(r));
      common = std::min(common, reps.back().size());
    }
    ASSERT_GT(common, 0u);
    std::set<int64_t> gift_versions;
    for (int r = 0; r < world_; ++r) {
      for (size_t s = 0; s < reps[r].size(); ++s) {
        const json& line = reps[r][s];
        ASSERT_EQ(line["step"], s) << "rank " << r;
        ASSERT_EQ(line["finite"], true) << "rank " << r << ": " << line;
        ASSERT_EQ(line["nonfinite_layers"], 0) << "rank " << r << ": " << line;
        if (s >= common) continue;
        const json& ref = reps[0][s];
        ASSERT_EQ(line["epoch"], ref["epoch"]) << "rank " << r << " step " << s;
        ASSERT_EQ(line["layers"], ref["layers"])
            << "rank " << r << " step " << s;
        ASSERT_EQ(line["hash"], ref["hash"]) << "rank " << r << " step " << s;
        if (PathOf(line, kPinned) == "gift") {
          gift_versions.insert(VersionOf(line, kPinned));
        }
      }
    }
    EXPECT_GE(gift_versions.size(), 2u)
        << "the pinned layer never switched factors in " << common << " steps";
    EXPECT_EQ(gift_versions.count(-1), 0u);
  }

  std::string dir_;
  int world_ = 0;
  std::unique_ptr<Giftd> giftd_;
  std::unique_ptr<RankGroup> ranks_;
};

TEST_F(GiftdGpuTest, DeviceRanksTakeTheGiftPathThroughCudaIpcRegions) {
  RunPinnedLayer(/*device_refresher=*/false);
}

TEST_F(GiftdGpuTest, CusolverRefresherServesDeviceRanks) {
  RunPinnedLayer(/*device_refresher=*/true);
}

}  // namespace
}  // namespace gift::testing_daemon
