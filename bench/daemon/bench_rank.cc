// One rank of the giftd step-time benchmark (step_time_bench.cc): a
// synthetic training loop of `--layers` d × d weights attached to giftd,
// every step timed. Flags as tests/daemon/rank_worker.cc where they overlap
// (so the benchmark launches it with the same RankGroup):
//
//   daemon_bench_rank --rank R --world-size W --job J --agent-socket S
//       [--store daemon|DIR] [--steps N] [--step-sleep-ms MS] [--report FILE]
//       [--comm-timeout-s S] [--layers L] [--dim D] [--sketch-rows ROWS]
//       [--probe-interval M]
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
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tests/daemon/rank_client.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::bench {
namespace {

struct Flags {
  testing_daemon::RankFlags rank;
  int layers = 4, dim = 1024, sketch_rows = 256;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  f.rank.steps = 1000;
  f.rank.comm_timeout_s = 60;
  f.rank.probe_interval = 0;
  std::map<std::string, testing_daemon::FlagTarget> targets =
      testing_daemon::RankFlagTargets(&f.rank);
  targets["layers"] = &f.layers;
  targets["dim"] = &f.dim;
  targets["sketch-rows"] = &f.sketch_rows;
  RETURN_IF_ERROR(testing_daemon::ParseFlagsInto(argc, argv, targets));
  RETURN_IF_ERROR(testing_daemon::CheckRankFlags(f.rank));
  if (f.layers < 1 || f.dim < 1 || f.sketch_rows < 1) {
    return absl::InvalidArgumentError(
        "--layers, --dim and --sketch-rows must be >= 1");
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
    std::vector<client::BucketLayer> specs;
    const int64_t d = f_.dim;
    for (int l = 0; l < f_.layers; ++l) {
      specs.push_back({.name = absl::StrCat("layer", l),
                       .shape = {d, d},
                       .offset = l * d * d});
    }
    ASSIGN_OR_RETURN(client::EpochPlan plan,
                     client::EpochPlan::Create(1, f_.layers * d * d, specs));
    ASSIGN_OR_RETURN(rs_, testing_daemon::RankClient::Connect(
                              f_.rank, plan, testing_daemon::RankDevice{}));
    att_ = rs_->att.get();
    ar_ = rs_->ar.get();
    for (int v = 0; v < 2; ++v) {
      grads_.push_back(Anisotropic(f_.layers * d, d, 100 * f_.rank.rank + v));
    }
    for (int l = 0; l < f_.layers; ++l) {
      acts_.push_back(Anisotropic(1024, d, 7000 + l));
      names_.push_back(specs[l].name);
    }
    bucket_.resize(plan.bucket_elements());
    ASSIGN_OR_RETURN(report_,
                     testing_daemon::JsonLinesFile::Open(f_.rank.report));
    return absl::OkStatus();
  }

  absl::Status Run() {
    return testing_daemon::RunSteps(*rs_->comm, f_.rank.steps,
                                    f_.rank.step_sleep_ms,
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
    RETURN_IF_ERROR(att_->BeforeStep(ar_, &factors_));
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
    report_->Write(
        {{"step", step},
         {"epoch", ar_->current_epoch()},
         {"refresh_interval", att_->stats().current_refresh_interval},
         {"gift_layers", gift},
         {"factor_switches", switched},
         {"sketched_layers", sketched},
         {"step_ms", step_s * 1e3},
         {"run_ms", run_s * 1e3}});
    return absl::OkStatus();
  }

  const Flags f_;
  std::unique_ptr<testing_daemon::RankClient> rs_;
  client::AllReduceEngine* ar_ = nullptr;   // rs_->ar
  client::GiftdConnection* att_ = nullptr;  // rs_->att
  client::VersionedFactors factors_;
  std::vector<std::vector<float>> grads_, acts_;
  std::vector<std::string> names_;
  std::vector<float> bucket_;
  std::vector<int64_t> prev_versions_;
  std::unique_ptr<testing_daemon::JsonLinesFile> report_;
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
  return testing_daemon::RankExitCode("daemon_bench_rank", f->rank.rank, s);
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
