// One GPU rank of the giftd device test (tests/gpu/giftd_gpu_test.cc): the
// training-like loop of rank_worker.cc on the device path. The rank attaches
// with device_memory (so giftd gives it CUDA IPC data regions), averages a
// device bucket with AllReduceEngine over NCCL, and hands the attachment
// device pointers to the activations it sketches. Built only with CUDA.
//
//   gpu_rank_worker --rank 0 --world-size 2 --job J --agent-socket S
//                   [--device D] [--store daemon|DIR] [--steps N]
//                   [--step-sleep-ms MS] [--data DIR] [--report FILE]
//                   [--comm-timeout-s S] [--probe-interval M]
//                   [--distinct-nccl-hosts 0|1]
//
// The bucket: blocks.{0,1}.mlp.fc1 (256 × 64), blocks.{0,1}.mlp.fc2
// (64 × 128) with the committed real gradients (worker = rank % 4, cycled
// as in rank_data.h) and a 1-D `bias`. The activations of every
// snapshot are uploaded once; each step sketches rows of them straight from
// device memory, starting at row step % 4 and passing more rows than the
// plan's sketch_rows, so the attachment's strided device copy is used.
//
// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
// detected"), and the test machine has one GPU. With --distinct-nccl-hosts 1
// (the default when world size > 1) every rank gets its own NCCL_HOSTID, so
// NCCL sees one GPU per "host" and connects the ranks over its socket
// transport on the loopback interface; variables already set in the
// environment are left alone.
//
// Per step, one JSON line in the report: step, agreed epoch, the
// attachment's stats, per layer the path and factor version taken, whether
// every averaged element is finite, and an FNV-1a hash of the averaged
// bucket (the ranks must agree bit for bit). Every rank MAX-reduces a stop
// flag each step (in device memory), so SIGTERM to any rank stops all of
// them after the same step.
// Exit 0 after N steps or on SIGTERM; 2 with a message on any error; 3 when
// NCCL refuses several ranks on one GPU.
#include <cuda_runtime.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_client.h"
#include "tests/daemon/rank_data.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::testing_daemon {
namespace {

using client::BucketLayer;

constexpr int kExitError = 2;
constexpr int kExitDuplicateGpu = 3;

struct Flags {
  RankFlags rank;
  std::string data = GIFT_TEST_DATA_DIR;
  int device = 0;
  int distinct_nccl_hosts = -1;  // -1: when world_size > 1
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, FlagTarget> targets = RankFlagTargets(&f.rank);
  targets["data"] = &f.data;
  targets["device"] = &f.device;
  targets["distinct-nccl-hosts"] = &f.distinct_nccl_hosts;
  RETURN_IF_ERROR(ParseFlagsInto(argc, argv, targets));
  RETURN_IF_ERROR(CheckRankFlags(f.rank));
  if (f.device < 0) return absl::InvalidArgumentError("--device must be >= 0");
  if (f.distinct_nccl_hosts < 0) {
    f.distinct_nccl_hosts = f.rank.world_size > 1;
  }
  return f;
}

// See the file comment: one NCCL "host" per rank, joined over loopback.
void UseDistinctNcclHosts(const Flags& f) {
  const std::string host_id =
      absl::StrCat("gift-", f.rank.job, "-rank", f.rank.rank);
  setenv("NCCL_HOSTID", host_id.c_str(), /*overwrite=*/0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_NET", "Socket", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("NCCL_COLLNET_ENABLE", "0", 0);
  setenv("NCCL_MNNVL_ENABLE", "0", 0);
}

constexpr int64_t kBias = 64;

// The committed arrays, and their activations as device copies.
struct Data {
  RealData host;
  gpu::DeviceBuffer<float> fc2_acts[2][2], fc1_acts[2];
};

absl::Status Upload(const tools::NpyArray& a, gpu::DeviceBuffer<float>* d) {
  if (a.shape.size() != 2) {
    return absl::InvalidArgumentError("activations must be 2-D");
  }
  RETURN_IF_ERROR(d->Allocate(a.data.size()));
  return d->Upload(a.data.data(), a.data.size());
}

absl::Status LoadData(const std::string& dir, Data* d) {
  ASSIGN_OR_RETURN(d->host, LoadRealData(dir));
  for (int b = 0; b < 2; ++b) {
    RETURN_IF_ERROR(Upload(d->host.fc1_acts[b], &d->fc1_acts[b]));
    for (int s = 0; s < 2; ++s) {
      RETURN_IF_ERROR(Upload(d->host.fc2_acts[s][b], &d->fc2_acts[s][b]));
    }
  }
  return absl::OkStatus();
}

uint64_t Fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

class Loop {
 public:
  Loop(const Flags& f, Data* data)
      : f_(f), data_(*data), plan_(RealDataPlan({{"bias", {kBias}}})) {}

  absl::Status Setup() {
    ASSIGN_OR_RETURN(rs_, RankClient::Connect(f_.rank, plan_,
                                              RankDevice{.on_device = true,
                                                         .device = f_.device}));
    ASSIGN_OR_RETURN(report_, JsonLinesFile::Open(f_.rank.report));
    bucket_.resize(plan_.bucket_elements());
    RETURN_IF_ERROR(dev_bucket_.Allocate(bucket_.size()));
    return dev_stop_.Allocate(1);
  }

  // RunSteps with the stop flag in device memory: the communicator takes no
  // other.
  absl::Status Run() {
    return RunSteps(
        f_.rank.steps, f_.rank.step_sleep_ms,
        [this](int64_t s) { return Step(s); },
        [this](bool stop_here) -> absl::StatusOr<bool> {
          int64_t stop = stop_here ? 1 : 0;
          RETURN_IF_ERROR(dev_stop_.Upload(&stop, 1));
          RETURN_IF_ERROR(rs_->comm->AllReduce(dev_stop_.get(), dev_stop_.get(),
                                               1, client::DataType::kInt64,
                                               client::ReduceOp::kMax));
          RETURN_IF_ERROR(dev_stop_.Download(&stop, 1));
          return stop != 0;
        });
  }

 private:
  // Rows of a device activation array [n, d], from row step % 4 on: more
  // rows than the plan's sketch_rows, so the attachment samples with a
  // stride.
  absl::Status SketchFrom(const char* layer,
                          const gpu::DeviceBuffer<float>& acts, int64_t d,
                          int64_t step) {
    const int64_t n = static_cast<int64_t>(acts.size()) / d;
    const int64_t first = step % 4;
    return rs_->att->Sketch(layer, acts.get() + first * d, n - 4);
  }

  absl::Status Sketch(int64_t step) {
    for (int b = 0; b < 2; ++b) {
      if (rs_->att->WantsSketch(kFc2[b])) {
        RETURN_IF_ERROR(
            SketchFrom(kFc2[b], data_.fc2_acts[step % 2][b], kFc2In, step));
      }
      if (rs_->att->WantsSketch(kFc1[b])) {
        RETURN_IF_ERROR(SketchFrom(kFc1[b], data_.fc1_acts[b], kFc1In, step));
      }
    }
    return absl::OkStatus();
  }

  void FillBucket(int64_t step) {
    for (const BucketLayer& l : plan_.layers()) {
      float* dst = bucket_.data() + l.offset;
      if (FillRealLayer(data_.host, l, f_.rank.rank, step, dst)) continue;
      std::mt19937_64 rng(uint64_t(f_.rank.rank) * 7919u +
                          uint64_t(step) * 31u);
      std::normal_distribution<float> g(0.f, 1e-2f);
      for (int64_t i = 0; i < l.size(); ++i) dst[i] = g(rng);
    }
  }

  absl::Status Step(int64_t step) {
    RETURN_IF_ERROR(Sketch(step));
    RETURN_IF_ERROR(rs_->att->BeforeStep(rs_->ar.get(), &factors_));
    FillBucket(step);
    // Synchronous with every stream: the allreduce reads it on its own.
    RETURN_IF_ERROR(dev_bucket_.Upload(bucket_.data(), bucket_.size()));
    client::StepTelemetry t;
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(rs_->ar->Run(dev_bucket_.get(), factors_, &t));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    RETURN_IF_ERROR(dev_bucket_.Download(bucket_.data(), bucket_.size()));
    RETURN_IF_ERROR(rs_->att->AfterStep(*rs_->ar, t, seconds));
    Report(step, t, seconds);
    return absl::OkStatus();
  }

  void Report(int64_t step, const client::StepTelemetry& t, double seconds) {
    const client::ConnectionStats st = rs_->att->stats();
    bool finite = true;
    for (float x : bucket_) finite = finite && std::isfinite(x);
    nlohmann::json line = rs_->StepLine(step, t, seconds, st);
    line["factors_received"] = st.factors_received;
    line["windows_closed"] = st.windows_closed;
    line["last_error"] = st.last_error;
    line["finite"] = finite;
    line["nonfinite_layers"] = t.nonfinite_layers;
    line["hash"] =
        absl::StrFormat("%016x", Fnv1a(bucket_.data(), bucket_.size() * 4));
    report_->Write(line);
  }

  const Flags f_;
  const Data& data_;
  const client::EpochPlan plan_;
  std::unique_ptr<RankClient> rs_;
  std::unique_ptr<JsonLinesFile> report_;
  client::VersionedFactors factors_;
  std::vector<float> bucket_;
  gpu::DeviceBuffer<float> dev_bucket_;
  gpu::DeviceBuffer<int64_t> dev_stop_;
};

bool DuplicateGpu(const absl::Status& s) {
  return absl::StrContains(s.message(), "Duplicate GPU") ||
         absl::StrContains(s.message(), "invalid usage");
}

int Main(int argc, char** argv) {
  StopOnSigterm();
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "gpu_rank_worker: " << flags.status().message() << "\n";
    return kExitError;
  }
  if (flags->distinct_nccl_hosts) UseDistinctNcclHosts(*flags);
  if (cudaSetDevice(flags->device) != cudaSuccess) {
    std::cerr << "gpu_rank_worker: no CUDA device " << flags->device << "\n";
    return kExitError;
  }
  auto data = std::make_unique<Data>();
  if (absl::Status s = LoadData(flags->data, data.get()); !s.ok()) {
    std::cerr << "gpu_rank_worker: " << s << "\n";
    return kExitError;
  }
  absl::Status s;
  bool setup_failed = false;
  {
    Loop loop(*flags, data.get());
    s = loop.Setup();
    setup_failed = !s.ok();
    if (s.ok()) s = loop.Run();
  }
  if (!s.ok()) {
    std::cerr << "gpu_rank_worker " << flags->rank.rank << ": " << s << "\n";
    return setup_failed && DuplicateGpu(s) ? kExitDuplicateGpu : kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace gift::testing_daemon

int main(int argc, char** argv) {
  return gift::testing_daemon::Main(argc, argv);
}
