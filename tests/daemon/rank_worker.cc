// One rank of the giftd integration tests (giftd_integration_test.cc): a
// training-like loop that feeds the committed real gradients and activations
// (tests/data) through a AllReduceEngine attached to the node's giftd.
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
// per layer the path and factor version taken, and FNV-1a digests of the
// averaged bucket ("digest") and of parameters updated with it by plain SGD
// ("params"): equal digests on every rank mean bit-identical results), then
// sleep. Every rank also
// MAX-reduces a stop flag each step, so SIGTERM to any rank stops all of
// them after the same step (nobody is left waiting in a collective).
// Exit 0 after N steps or on SIGTERM; 2 with a message on any error.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_client.h"
#include "tests/daemon/rank_data.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::testing_daemon {
namespace {

using client::BucketLayer;

struct Flags {
  RankFlags rank;
  std::string data = GIFT_TEST_DATA_DIR;
  int sketch_rows = 256;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, FlagTarget> targets = RankFlagTargets(&f.rank);
  targets["data"] = &f.data;
  targets["sketch-rows"] = &f.sketch_rows;
  RETURN_IF_ERROR(ParseFlagsInto(argc, argv, targets));
  RETURN_IF_ERROR(CheckRankFlags(f.rank));
  if (f.sketch_rows < 1) {
    return absl::InvalidArgumentError("--sketch-rows must be >= 1");
  }
  return f;
}

constexpr int64_t kSpikyOut = 64, kSpikyIn = 128, kBias = 64;
constexpr float kLearningRate = 0.01f;

// FNV-1a over the bytes of `v`, as 16 hex digits.
std::string Digest(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
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
  Loop(const Flags& f, RealData data)
      : f_(f),
        data_(std::move(data)),
        plan_(RealDataPlan(
            {{"synthetic.spiky", {kSpikyOut, kSpikyIn}}, {"bias", {kBias}}})) {}

  absl::Status Setup() {
    ASSIGN_OR_RETURN(rs_, RankClient::Connect(f_.rank, plan_, RankDevice{}));
    ASSIGN_OR_RETURN(report_, JsonLinesFile::Open(f_.rank.report));
    bucket_.resize(plan_.bucket_elements());
    params_.assign(plan_.bucket_elements(), 0.f);
    return absl::OkStatus();
  }

  absl::Status Run() {
    return RunSteps(*rs_->comm, f_.rank.steps, f_.rank.step_sleep_ms,
                    [this](int64_t s) { return Step(s); });
  }

 private:
  absl::Status Sketch(int64_t step) {
    client::GiftdConnection& att = *rs_->att;
    std::mt19937_64 rng(uint64_t(f_.rank.rank) * 1000003u + uint64_t(step));
    for (int b = 0; b < 2; ++b) {
      if (att.WantsSketch(kFc2[b])) {
        const auto rows =
            SampleRows(data_.fc2_acts[step % 2][b], f_.sketch_rows, rng);
        RETURN_IF_ERROR(att.Sketch(kFc2[b], rows.data(), f_.sketch_rows));
      }
      if (att.WantsSketch(kFc1[b])) {
        const auto rows = SampleRows(data_.fc1_acts[b], f_.sketch_rows, rng);
        RETURN_IF_ERROR(att.Sketch(kFc1[b], rows.data(), f_.sketch_rows));
      }
    }
    if (att.WantsSketch("synthetic.spiky")) {
      std::normal_distribution<float> g(0.f, 1.f);
      std::vector<float> a(f_.sketch_rows * kSpikyIn);
      for (float& x : a) x = g(rng);
      RETURN_IF_ERROR(att.Sketch("synthetic.spiky", a.data(), f_.sketch_rows));
    }
    return absl::OkStatus();
  }

  void FillBucket(int64_t step) {
    for (const BucketLayer& l : plan_.layers()) {
      float* dst = bucket_.data() + l.offset;
      if (FillRealLayer(data_, l, f_.rank.rank, step, dst)) continue;
      std::mt19937_64 rng(uint64_t(f_.rank.rank) * 7919u +
                          uint64_t(step) * 31u + uint64_t(l.offset));
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
    RETURN_IF_ERROR(rs_->att->BeforeStep(rs_->ar.get(), &factors_));
    FillBucket(step);
    client::StepTelemetry t;
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(rs_->ar->Run(bucket_.data(), factors_, &t));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    RETURN_IF_ERROR(rs_->att->AfterStep(*rs_->ar, t, seconds));
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i] -= kLearningRate * bucket_[i];
    }
    const client::ConnectionStats st = rs_->att->stats();
    nlohmann::json line = rs_->StepLine(step, t, seconds, st);
    line["refresh_interval"] = st.current_refresh_interval;
    line["epoch_switch_step"] = st.last_epoch_switch_step;
    line["stale_drops"] = st.stale_drops;
    line["digest"] = Digest(bucket_);
    line["params"] = Digest(params_);
    report_->Write(line);
    return absl::OkStatus();
  }

  const Flags f_;
  const RealData data_;
  const client::EpochPlan plan_;
  std::unique_ptr<RankClient> rs_;
  std::unique_ptr<JsonLinesFile> report_;
  client::VersionedFactors factors_;
  std::vector<float> bucket_;
  std::vector<float> params_;  // SGD on the averaged buckets
};

int Main(int argc, char** argv) {
  StopOnSigterm();
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "rank_worker: " << flags.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<RealData> data = LoadRealData(flags->data);
  if (!data.ok()) {
    std::cerr << "rank_worker: " << data.status() << "\n";
    return 2;
  }
  Loop loop(*flags, *std::move(data));
  absl::Status s = loop.Setup();
  if (s.ok()) s = loop.Run();
  return RankExitCode("rank_worker", flags->rank.rank, s);
}

}  // namespace
}  // namespace gift::testing_daemon

int main(int argc, char** argv) {
  return gift::testing_daemon::Main(argc, argv);
}
