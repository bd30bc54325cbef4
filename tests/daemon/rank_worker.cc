// One rank of the giftd integration tests (giftd_integration_test.cc): a
// training-like loop that feeds the committed real gradients and activations
// (tests/data) through a QuantizedAllReduce attached to the node's giftd.
//
//   rank_worker --rank 0 --world-size 4 --job J --agent-socket S
//               [--store daemon|DIR] [--steps N] [--step-sleep-ms MS]
//               [--data DIR] [--report FILE] [--comm-timeout-s S]
//               [--probe-interval M] [--sketch-rows R]
//
// The bucket: blocks.{0,1}.mlp.fc1 (256 × 64) and blocks.{0,1}.mlp.fc2
// (64 × 128) with the real per-worker gradients (worker = rank % 4; fc2 from
// the 10-step run, fc1 from the two snapshots, both cycled) and sketched with
// the real activations (fc2: snapshots 100 and 290, fc1: 290; a different
// row subset every step); `synthetic.spiky` (64 × 128), isotropic Gaussian
// activations (whitening cannot help: measured gain ≈ 0) and a gradient of
// a few huge spikes on small noise (many FP8 underflows: the most
// vulnerable layer); and a 1-D `bias`.
//
// Per step: Sketch the wanted layers, BeforeStep, Run (timed), AfterStep,
// one JSON line in the report (step, agreed epoch, the attachment's stats,
// per layer the path and factor version taken), then sleep. Every rank also
// MAX-reduces a stop flag each step, so SIGTERM to any rank stops all of
// them after the same step (nobody is left waiting in a collective).
// Exit 0 after N steps or on SIGTERM; 2 with a message on any error.

#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/communicator_factory.h"
#include "client/daemon_attachment.h"
#include "client/daemon_store.h"
#include "client/quantized_allreduce.h"
#include "client/store.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_testutil.h"
#include "tools/npy.h"

namespace gift::testing_daemon {
namespace {

using client::BucketPlan;
using client::LayerSpec;

struct Flags {
  int rank = -1;
  int world_size = 0;
  std::string job;
  std::string agent_socket;
  std::string store = "daemon";
  int64_t steps = 100;
  int step_sleep_ms = 0;
  std::string data = GIFT_TEST_DATA_DIR;
  std::string report;
  int comm_timeout_s = 30;
  int probe_interval = 2;
  int sketch_rows = 256;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  RETURN_IF_ERROR(
      testing_daemon::ParseFlagsInto(argc, argv,
                                     {{"rank", &f.rank},
                                      {"world-size", &f.world_size},
                                      {"steps", &f.steps},
                                      {"step-sleep-ms", &f.step_sleep_ms},
                                      {"comm-timeout-s", &f.comm_timeout_s},
                                      {"probe-interval", &f.probe_interval},
                                      {"sketch-rows", &f.sketch_rows},
                                      {"job", &f.job},
                                      {"agent-socket", &f.agent_socket},
                                      {"store", &f.store},
                                      {"data", &f.data},
                                      {"report", &f.report}}));
  if (f.rank < 0 || f.rank >= f.world_size || f.job.empty() ||
      f.agent_socket.empty() || f.sketch_rows < 1) {
    return absl::InvalidArgumentError(
        "need --rank R --world-size W (0 <= R < W) --job J --agent-socket S");
  }
  return f;
}

constexpr int64_t kSpikyOut = 64, kSpikyIn = 128, kBias = 64;
const char* const kFc1[] = {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"};
const char* const kFc2[] = {"blocks.0.mlp.fc2", "blocks.1.mlp.fc2"};

BucketPlan MakePlan() {
  std::vector<LayerSpec> l;
  int64_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    l.push_back({.name = std::move(name), .shape = shape, .offset = off});
    off += l.back().size();
  };
  for (int b = 0; b < 2; ++b) {
    add(kFc1[b], {256, 64});
    add(kFc2[b], {64, 128});
  }
  add("synthetic.spiky", {kSpikyOut, kSpikyIn});
  add("bias", {kBias});
  return *BucketPlan::Create(1, off, std::move(l));
}

// The committed arrays this loop feeds.
struct Data {
  tools::NpyArray fc2_run[2];      // [10, 4, 64, 128]
  tools::NpyArray fc1_snap[2][2];  // [snapshot][block] -> [4, 256, 64]
  tools::NpyArray fc2_acts[2][2];  // [snapshot][block] -> [512, 128]
  tools::NpyArray fc1_acts[2];     // step 290, [512, 64]
};

absl::StatusOr<Data> LoadData(const std::string& dir) {
  Data d;
  const char* snaps[] = {"step100", "step290"};
  for (int b = 0; b < 2; ++b) {
    ASSIGN_OR_RETURN(d.fc2_run[b], tools::ReadNpy(absl::StrCat(
                                       dir, "/run/", kFc2[b], ".grad.npy")));
    ASSIGN_OR_RETURN(d.fc1_acts[b],
                     tools::ReadNpy(absl::StrCat(dir, "/snap/step290.", kFc1[b],
                                                 ".acts.npy")));
    for (int s = 0; s < 2; ++s) {
      const std::string p = absl::StrCat(dir, "/snap/", snaps[s], ".");
      ASSIGN_OR_RETURN(d.fc1_snap[s][b],
                       tools::ReadNpy(p + kFc1[b] + ".grad.npy"));
      ASSIGN_OR_RETURN(d.fc2_acts[s][b],
                       tools::ReadNpy(p + kFc2[b] + ".acts.npy"));
    }
  }
  return d;
}

// `rows` random rows (with replacement) of a [n, d] activation array.
std::vector<float> SampleRows(const tools::NpyArray& a, int rows,
                              std::mt19937_64& rng) {
  const int64_t n = a.shape[0], d = a.shape[1];
  std::vector<float> out(rows * d);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int r = 0; r < rows; ++r) {
    const int64_t src = pick(rng);
    std::copy_n(a.data.data() + src * d, d, out.data() + r * d);
  }
  return out;
}

class Loop {
 public:
  Loop(const Flags& f, Data data)
      : f_(f), data_(std::move(data)), plan_(MakePlan()) {}

  absl::Status Setup() {
    if (f_.store == "daemon") {
      ASSIGN_OR_RETURN(daemon_store_,
                       client::DaemonStore::Connect(f_.agent_socket, f_.job));
      store_ =
          std::make_unique<client::PrefixStore>("grad/", daemon_store_.get());
    } else {
      ASSIGN_OR_RETURN(file_store_, client::FileStore::Create(f_.store));
      store_ =
          std::make_unique<client::PrefixStore>("grad/", file_store_.get());
    }
    client::CommunicatorOptions co;
    co.rank = f_.rank;
    co.world_size = f_.world_size;
    co.store = store_.get();
    co.timeout = absl::Seconds(f_.comm_timeout_s);
    ASSIGN_OR_RETURN(comm_, client::CreateCommunicator(co));
    client::QuantizedAllReduceOptions qo;
    qo.probe_interval = f_.probe_interval;
    ASSIGN_OR_RETURN(
        ar_, client::QuantizedAllReduce::Create(comm_.get(), plan_, qo));
    client::AttachmentOptions ao;
    ao.agent_socket = f_.agent_socket;
    ao.job_id = f_.job;
    ao.rank = f_.rank;
    ao.world_size = f_.world_size;
    ao.local_rank = f_.rank;
    ao.retry_interval = absl::Milliseconds(200);
    ASSIGN_OR_RETURN(att_, client::DaemonAttachment::Create(ao, plan_));
    if (!f_.report.empty()) {
      report_ = std::fopen(f_.report.c_str(), "w");
      if (report_ == nullptr) {
        return absl::InternalError("cannot write " + f_.report);
      }
    }
    bucket_.resize(plan_.bucket_elements());
    return absl::OkStatus();
  }

  ~Loop() {
    if (report_ != nullptr) std::fclose(report_);
  }

  absl::Status Run() {
    return testing_daemon::RunSteps(*comm_, f_.steps, f_.step_sleep_ms,
                                    [this](int64_t s) { return Step(s); });
  }

 private:
  absl::Status Sketch(int64_t step) {
    std::mt19937_64 rng(uint64_t(f_.rank) * 1000003u + uint64_t(step));
    for (int b = 0; b < 2; ++b) {
      if (att_->WantsSketch(kFc2[b])) {
        const auto rows =
            SampleRows(data_.fc2_acts[step % 2][b], f_.sketch_rows, rng);
        RETURN_IF_ERROR(att_->Sketch(kFc2[b], rows.data(), f_.sketch_rows));
      }
      if (att_->WantsSketch(kFc1[b])) {
        const auto rows = SampleRows(data_.fc1_acts[b], f_.sketch_rows, rng);
        RETURN_IF_ERROR(att_->Sketch(kFc1[b], rows.data(), f_.sketch_rows));
      }
    }
    if (att_->WantsSketch("synthetic.spiky")) {
      std::normal_distribution<float> g(0.f, 1.f);
      std::vector<float> a(f_.sketch_rows * kSpikyIn);
      for (float& x : a) x = g(rng);
      RETURN_IF_ERROR(
          att_->Sketch("synthetic.spiky", a.data(), f_.sketch_rows));
    }
    return absl::OkStatus();
  }

  void FillBucket(int64_t step) {
    const int w = f_.rank % 4;
    for (const LayerSpec& l : plan_.layers()) {
      float* dst = bucket_.data() + l.offset;
      const tools::NpyArray* src = nullptr;
      int64_t index = 0;  // [.., worker] slice number
      for (int b = 0; b < 2; ++b) {
        if (l.name == kFc2[b]) {
          src = &data_.fc2_run[b];
          index = (step % 10) * 4 + w;
        } else if (l.name == kFc1[b]) {
          src = &data_.fc1_snap[step % 2][b];
          index = w;
        }
      }
      if (src != nullptr) {
        std::copy_n(src->data.data() + index * l.size(), l.size(), dst);
        continue;
      }
      std::mt19937_64 rng(uint64_t(f_.rank) * 7919u + uint64_t(step) * 31u +
                          uint64_t(l.offset));
      std::normal_distribution<float> g(0.f, l.name == "bias" ? 1e-2f : 1e-3f);
      for (int64_t i = 0; i < l.size(); ++i) dst[i] = g(rng);
      if (l.name == "synthetic.spiky") {
        std::uniform_int_distribution<int64_t> at(0, l.size() - 1);
        for (int k = 0; k < 6; ++k) dst[at(rng)] = (k % 2 ? -1.f : 1.f) * 500.f;
      }
    }
  }

  absl::Status Step(int64_t step) {
    RETURN_IF_ERROR(Sketch(step));
    RETURN_IF_ERROR(att_->BeforeStep(ar_.get(), &factors_));
    FillBucket(step);
    client::StepTelemetry t;
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(ar_->Run(bucket_.data(), factors_, &t));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    RETURN_IF_ERROR(att_->AfterStep(*ar_, t, seconds));
    if (report_ != nullptr) Report(step, t, seconds);
    return absl::OkStatus();
  }

  void Report(int64_t step, const client::StepTelemetry& t, double seconds) {
    const client::AttachmentStats st = att_->stats();
    nlohmann::json j = {
        {"step", step},
        {"epoch", ar_->current_epoch()},
        {"attached", st.attached},
        {"attaches", st.attaches},
        {"refresh_interval", st.current_refresh_interval},
        {"epoch_switch_step", st.last_epoch_switch_step},
        {"stale_drops", st.stale_drops},
        {"run_ms", seconds * 1e3},
    };
    nlohmann::json layers = nlohmann::json::object();
    for (const client::LayerTelemetry& l : t.layers) {
      layers[l.name] = {{"path", client::LayerPathName(l.path)},
                        {"version", l.factor_version}};
    }
    j["layers"] = std::move(layers);
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), report_);
    std::fflush(report_);
  }

  const Flags f_;
  const Data data_;
  const BucketPlan plan_;
  std::unique_ptr<client::DaemonStore> daemon_store_;
  std::unique_ptr<client::FileStore> file_store_;
  std::unique_ptr<client::PrefixStore> store_;
  std::unique_ptr<client::Communicator> comm_;
  std::unique_ptr<client::QuantizedAllReduce> ar_;
  std::unique_ptr<client::DaemonAttachment> att_;
  client::VersionedFactors factors_;
  std::vector<float> bucket_;
  std::FILE* report_ = nullptr;
};

int Main(int argc, char** argv) {
  testing_daemon::StopOnSigterm();
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "rank_worker: " << flags.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<Data> data = LoadData(flags->data);
  if (!data.ok()) {
    std::cerr << "rank_worker: " << data.status() << "\n";
    return 2;
  }
  Loop loop(*flags, *std::move(data));
  absl::Status s = loop.Setup();
  if (s.ok()) s = loop.Run();
  if (!s.ok()) {
    std::cerr << "rank_worker " << flags->rank << ": " << s << "\n";
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace gift::testing_daemon

int main(int argc, char** argv) {
  return gift::testing_daemon::Main(argc, argv);
}
