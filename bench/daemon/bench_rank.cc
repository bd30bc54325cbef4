// One rank of the giftd step-time benchmark (step_time_bench.cc): a
// synthetic training loop of `--layers` d × d weights attached to giftd,
// every step timed. Flags as tests/daemon/rank_worker.cc where they overlap
// (so the benchmark launches it with the same RankGroup):
//
//   daemon_bench_rank --rank R --world-size W --job J --agent-socket S
//       [--steps N] [--step-sleep-ms MS] [--report FILE] [--comm-timeout-s S]
//       [--layers L] [--dim D] [--sketch-rows ROWS] [--probe-interval M]
//
// Gradients: two precomputed anisotropic d × d matrices per layer, cycled
// (filling the bucket is a memcpy, not a random draw); activations: a pool
// of 1024 anisotropic rows per layer, ROWS of them sketched per step. The
// step time covers Sketch, BeforeStep, the bucket copy, Run and AfterStep;
// the sleep (standing in for forward/backward) is not timed. Report: one
// JSON line per step {step, epoch, refresh_interval, gift_layers,
// factor_switches (layers whose agreed factor version changed), step_ms,
// run_ms}. Every rank MAX-reduces a stop flag after each step, so SIGTERM
// to any rank stops all after the same step. Exit 0 or 2 with a message.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/communicator_factory.h"
#include "client/daemon_attachment.h"
#include "client/daemon_store.h"
#include "client/quantized_allreduce.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_testutil.h"

namespace gift::bench {
namespace {

struct Flags {
  int rank = -1, world_size = 0;
  std::string job, agent_socket, report;
  int64_t steps = 1000;
  int step_sleep_ms = 0, comm_timeout_s = 60;
  int layers = 4, dim = 1024, sketch_rows = 256, probe_interval = 0;
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
                                      {"layers", &f.layers},
                                      {"dim", &f.dim},
                                      {"sketch-rows", &f.sketch_rows},
                                      {"probe-interval", &f.probe_interval},
                                      {"job", &f.job},
                                      {"agent-socket", &f.agent_socket},
                                      {"report", &f.report}}));
  if (f.rank < 0 || f.rank >= f.world_size || f.job.empty() ||
      f.agent_socket.empty() || f.layers < 1 || f.dim < 1 ||
      f.sketch_rows < 1) {
    return absl::InvalidArgumentError(
        "need --rank R --world-size W --job J --agent-socket S");
  }
  return f;
}

// Rows of `rows` × d with column j scaled by 1 / (1 + j / 8): a decaying
// spectrum, so the factors have something to find.
std::vector<float> Anisotropic(int64_t rows, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < d; ++j) x[r * d + j] = g(rng) / (1.f + j / 8.f);
  }
  return x;
}

class Loop {
 public:
  explicit Loop(const Flags& f) : f_(f) {}

  absl::Status Setup() {
    std::vector<client::LayerSpec> specs;
    const int64_t d = f_.dim;
    for (int l = 0; l < f_.layers; ++l) {
      specs.push_back({.name = absl::StrCat("layer", l),
                       .shape = {d, d},
                       .offset = l * d * d});
    }
    ASSIGN_OR_RETURN(client::BucketPlan plan,
                     client::BucketPlan::Create(1, f_.layers * d * d, specs));
    ASSIGN_OR_RETURN(store_,
                     client::DaemonStore::Connect(f_.agent_socket, f_.job));
    client::CommunicatorOptions co;
    co.rank = f_.rank;
    co.world_size = f_.world_size;
    co.store = store_.get();
    co.timeout = absl::Seconds(f_.comm_timeout_s);
    ASSIGN_OR_RETURN(comm_, client::CreateCommunicator(co));
    client::QuantizedAllReduceOptions qo;
    qo.probe_interval = f_.probe_interval;
    ASSIGN_OR_RETURN(ar_,
                     client::QuantizedAllReduce::Create(comm_.get(), plan, qo));
    client::AttachmentOptions ao;
    ao.agent_socket = f_.agent_socket;
    ao.job_id = f_.job;
    ao.rank = f_.rank;
    ao.world_size = f_.world_size;
    ao.local_rank = f_.rank;
    ao.retry_interval = absl::Milliseconds(200);
    ASSIGN_OR_RETURN(att_, client::DaemonAttachment::Create(ao, plan));
    for (int v = 0; v < 2; ++v) {
      grads_.push_back(Anisotropic(f_.layers * d, d, 100 * f_.rank + v));
    }
    for (int l = 0; l < f_.layers; ++l) {
      acts_.push_back(Anisotropic(1024, d, 7000 + l));
      names_.push_back(specs[l].name);
    }
    bucket_.resize(plan.bucket_elements());
    report_ =
        std::fopen(f_.report.empty() ? "/dev/null" : f_.report.c_str(), "w");
    if (report_ == nullptr) return absl::InternalError("cannot write report");
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
  absl::Status Step(int64_t step) {
    const absl::Time start = absl::Now();
    const int64_t d = f_.dim, pool = 1024 - f_.sketch_rows;
    int sketched = 0;
    for (int l = 0; l < f_.layers; ++l) {
      if (!att_->WantsSketch(names_[l])) continue;
      ++sketched;
      // A sliding window of the pool: different rows every step, no copy.
      const int64_t first = (step * 97 + l * 31) % pool;
      RETURN_IF_ERROR(
          att_->Sketch(names_[l], acts_[l].data() + first * d, f_.sketch_rows));
    }
    RETURN_IF_ERROR(att_->BeforeStep(ar_.get(), &factors_));
    const std::vector<float>& g = grads_[step % 2];
    std::copy(g.begin(), g.end(), bucket_.begin());
    client::StepTelemetry t;
    const absl::Time run_start = absl::Now();
    RETURN_IF_ERROR(ar_->Run(bucket_.data(), factors_, &t));
    const double run_s = absl::ToDoubleSeconds(absl::Now() - run_start);
    RETURN_IF_ERROR(att_->AfterStep(*ar_, t, run_s));
    const double step_s = absl::ToDoubleSeconds(absl::Now() - start);
    int gift = 0, switched = 0;
    prev_versions_.resize(t.layers.size(), client::kNoVersion);
    for (size_t i = 0; i < t.layers.size(); ++i) {
      const client::LayerTelemetry& l = t.layers[i];
      gift += l.path == client::LayerPath::kGift;
      // A factor switch re-projects the layer's residual in this step.
      switched += l.factor_version != client::kNoVersion &&
                  prev_versions_[i] != client::kNoVersion &&
                  l.factor_version != prev_versions_[i];
      prev_versions_[i] = l.factor_version;
    }
    const nlohmann::json j = {
        {"step", step},
        {"epoch", ar_->current_epoch()},
        {"refresh_interval", att_->stats().current_refresh_interval},
        {"gift_layers", gift},
        {"factor_switches", switched},
        {"sketched_layers", sketched},
        {"step_ms", step_s * 1e3},
        {"run_ms", run_s * 1e3}};
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), report_);
    std::fflush(report_);
    return absl::OkStatus();
  }

  const Flags f_;
  std::unique_ptr<client::DaemonStore> store_;
  std::unique_ptr<client::Communicator> comm_;
  std::unique_ptr<client::QuantizedAllReduce> ar_;
  std::unique_ptr<client::DaemonAttachment> att_;
  client::VersionedFactors factors_;
  std::vector<std::vector<float>> grads_, acts_;
  std::vector<std::string> names_;
  std::vector<float> bucket_;
  std::vector<int64_t> prev_versions_;
  std::FILE* report_ = nullptr;
};

int Main(int argc, char** argv) {
  testing_daemon::StopOnSigterm();
  absl::StatusOr<Flags> f = ParseFlags(argc, argv);
  if (!f.ok()) {
    std::cerr << "daemon_bench_rank: " << f.status().message() << "\n";
    return 2;
  }
  Loop loop(*f);
  absl::Status s = loop.Setup();
  if (s.ok()) s = loop.Run();
  if (!s.ok()) {
    std::cerr << "daemon_bench_rank " << f->rank << ": " << s << "\n";
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
