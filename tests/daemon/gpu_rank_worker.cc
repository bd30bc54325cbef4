// One GPU rank of the giftd device test (tests/gpu/giftd_gpu_test.cc): the
// training-like loop of rank_worker.cc on the device path. The rank attaches
// with device_memory (so giftd gives it CUDA IPC data regions), averages a
// device bucket with QuantizedAllReduce over NCCL, and hands the attachment
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
// as in rank_worker.cc) and a 1-D `bias`. The activations of every
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
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/communicator_factory.h"
#include "client/daemon_attachment.h"
#include "client/daemon_store.h"
#include "client/quantized_allreduce.h"
#include "client/store.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_testutil.h"
#include "tools/npy.h"

namespace gift::testing_daemon {
namespace {

using client::BucketPlan;
using client::LayerSpec;

constexpr int kExitError = 2;
constexpr int kExitDuplicateGpu = 3;

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
  int device = 0;
  int distinct_nccl_hosts = -1;  // -1: when world_size > 1
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  RETURN_IF_ERROR(
      ParseFlagsInto(argc, argv,
                     {{"rank", &f.rank},
                      {"world-size", &f.world_size},
                      {"job", &f.job},
                      {"agent-socket", &f.agent_socket},
                      {"store", &f.store},
                      {"steps", &f.steps},
                      {"step-sleep-ms", &f.step_sleep_ms},
                      {"data", &f.data},
                      {"report", &f.report},
                      {"comm-timeout-s", &f.comm_timeout_s},
                      {"probe-interval", &f.probe_interval},
                      {"device", &f.device},
                      {"distinct-nccl-hosts", &f.distinct_nccl_hosts}}));
  if (f.rank < 0 || f.rank >= f.world_size || f.job.empty() ||
      f.agent_socket.empty() || f.device < 0) {
    return absl::InvalidArgumentError(
        "need --rank R --world-size W (0 <= R < W) --job J --agent-socket S");
  }
  if (f.distinct_nccl_hosts < 0) f.distinct_nccl_hosts = f.world_size > 1;
  return f;
}

// See the file comment: one NCCL "host" per rank, joined over loopback.
void UseDistinctNcclHosts(const Flags& f) {
  const std::string host_id = absl::StrCat("gift-", f.job, "-rank", f.rank);
  setenv("NCCL_HOSTID", host_id.c_str(), /*overwrite=*/0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_NET", "Socket", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("NCCL_COLLNET_ENABLE", "0", 0);
  setenv("NCCL_MNNVL_ENABLE", "0", 0);
}

const char* const kFc1[] = {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"};
const char* const kFc2[] = {"blocks.0.mlp.fc2", "blocks.1.mlp.fc2"};
constexpr int64_t kBias = 64;

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
  add("bias", {kBias});
  return *BucketPlan::Create(1, off, std::move(l));
}

// The committed arrays; activations also as device copies.
struct Data {
  tools::NpyArray fc2_run[2];      // [10, 4, 64, 128]
  tools::NpyArray fc1_snap[2][2];  // [snapshot][block] -> [4, 256, 64]
  tools::NpyArray fc2_acts[2][2];  // [snapshot][block] -> [512, 128]
  tools::NpyArray fc1_acts[2];     // step 290, [512, 64]
  gpu::DeviceBuffer<float> dev_fc2_acts[2][2], dev_fc1_acts[2];
};

absl::Status Upload(const tools::NpyArray& a, gpu::DeviceBuffer<float>* d) {
  if (a.shape.size() != 2) {
    return absl::InvalidArgumentError("activations must be 2-D");
  }
  RETURN_IF_ERROR(d->Allocate(a.data.size()));
  return d->Upload(a.data.data(), a.data.size());
}

absl::Status LoadData(const std::string& dir, Data* d) {
  const char* snaps[] = {"step100", "step290"};
  for (int b = 0; b < 2; ++b) {
    ASSIGN_OR_RETURN(d->fc2_run[b], tools::ReadNpy(absl::StrCat(
                                        dir, "/run/", kFc2[b], ".grad.npy")));
    ASSIGN_OR_RETURN(d->fc1_acts[b],
                     tools::ReadNpy(absl::StrCat(dir, "/snap/step290.", kFc1[b],
                                                 ".acts.npy")));
    RETURN_IF_ERROR(Upload(d->fc1_acts[b], &d->dev_fc1_acts[b]));
    for (int s = 0; s < 2; ++s) {
      const std::string p = absl::StrCat(dir, "/snap/", snaps[s], ".");
      ASSIGN_OR_RETURN(d->fc1_snap[s][b],
                       tools::ReadNpy(p + kFc1[b] + ".grad.npy"));
      ASSIGN_OR_RETURN(d->fc2_acts[s][b],
                       tools::ReadNpy(p + kFc2[b] + ".acts.npy"));
      RETURN_IF_ERROR(Upload(d->fc2_acts[s][b], &d->dev_fc2_acts[s][b]));
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
  Loop(const Flags& f, Data* data) : f_(f), data_(*data), plan_(MakePlan()) {}

  ~Loop() {
    if (report_ != nullptr) std::fclose(report_);
  }

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
    co.backend = "nccl";
    co.device = f_.device;
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
    ao.device_memory = true;
    ao.device = f_.device;
    ao.retry_interval = absl::Milliseconds(200);
    ASSIGN_OR_RETURN(att_, client::DaemonAttachment::Create(ao, plan_));
    if (!f_.report.empty()) {
      report_ = std::fopen(f_.report.c_str(), "w");
      if (report_ == nullptr) {
        return absl::InternalError("cannot write " + f_.report);
      }
    }
    bucket_.resize(plan_.bucket_elements());
    RETURN_IF_ERROR(dev_bucket_.Allocate(bucket_.size()));
    return dev_stop_.Allocate(1);
  }

  absl::Status Run() {
    for (int64_t s = 0; s < f_.steps; ++s) {
      RETURN_IF_ERROR(Step(s));
      if (f_.step_sleep_ms > 0) {
        absl::SleepFor(absl::Milliseconds(f_.step_sleep_ms));
      }
      // Everyone stops after the same step when any rank was told to
      // (RunSteps of rank_testutil.h, with the flag in device memory: the
      // communicator takes no other).
      int64_t stop = g_stop_requested.load() ? 1 : 0;
      RETURN_IF_ERROR(dev_stop_.Upload(&stop, 1));
      RETURN_IF_ERROR(comm_->AllReduce(dev_stop_.get(), dev_stop_.get(), 1,
                                       client::DataType::kInt64,
                                       client::ReduceOp::kMax));
      RETURN_IF_ERROR(dev_stop_.Download(&stop, 1));
      if (stop != 0) break;
    }
    return absl::OkStatus();
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
    return att_->Sketch(layer, acts.get() + first * d, n - 4);
  }

  absl::Status Sketch(int64_t step) {
    for (int b = 0; b < 2; ++b) {
      if (att_->WantsSketch(kFc2[b])) {
        RETURN_IF_ERROR(
            SketchFrom(kFc2[b], data_.dev_fc2_acts[step % 2][b], 128, step));
      }
      if (att_->WantsSketch(kFc1[b])) {
        RETURN_IF_ERROR(SketchFrom(kFc1[b], data_.dev_fc1_acts[b], 64, step));
      }
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
      std::mt19937_64 rng(uint64_t(f_.rank) * 7919u + uint64_t(step) * 31u);
      std::normal_distribution<float> g(0.f, 1e-2f);
      for (int64_t i = 0; i < l.size(); ++i) dst[i] = g(rng);
    }
  }

  absl::Status Step(int64_t step) {
    RETURN_IF_ERROR(Sketch(step));
    RETURN_IF_ERROR(att_->BeforeStep(ar_.get(), &factors_));
    FillBucket(step);
    // Synchronous with every stream: the allreduce reads it on its own.
    RETURN_IF_ERROR(dev_bucket_.Upload(bucket_.data(), bucket_.size()));
    client::StepTelemetry t;
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(ar_->Run(dev_bucket_.get(), factors_, &t));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    RETURN_IF_ERROR(dev_bucket_.Download(bucket_.data(), bucket_.size()));
    RETURN_IF_ERROR(att_->AfterStep(*ar_, t, seconds));
    if (report_ != nullptr) Report(step, t, seconds);
    return absl::OkStatus();
  }

  void Report(int64_t step, const client::StepTelemetry& t, double seconds) {
    const client::AttachmentStats st = att_->stats();
    bool finite = true;
    for (float x : bucket_) finite = finite && std::isfinite(x);
    nlohmann::json j = {
        {"step", step},
        {"epoch", ar_->current_epoch()},
        {"attached", st.attached},
        {"attaches", st.attaches},
        {"factors_received", st.factors_received},
        {"windows_closed", st.windows_closed},
        {"last_error", st.last_error},
        {"finite", finite},
        {"nonfinite_layers", t.nonfinite_layers},
        {"hash",
         absl::StrFormat("%016x", Fnv1a(bucket_.data(), bucket_.size() * 4))},
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
  const Data& data_;
  const BucketPlan plan_;
  std::unique_ptr<client::DaemonStore> daemon_store_;
  std::unique_ptr<client::FileStore> file_store_;
  std::unique_ptr<client::PrefixStore> store_;
  std::unique_ptr<client::Communicator> comm_;
  std::unique_ptr<client::QuantizedAllReduce> ar_;
  std::unique_ptr<client::DaemonAttachment> att_;
  client::VersionedFactors factors_;
  std::vector<float> bucket_;
  gpu::DeviceBuffer<float> dev_bucket_;
  gpu::DeviceBuffer<int64_t> dev_stop_;
  std::FILE* report_ = nullptr;
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
    std::cerr << "gpu_rank_worker " << flags->rank << ": " << s << "\n";
    return setup_failed && DuplicateGpu(s) ? kExitDuplicateGpu : kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace gift::testing_daemon

int main(int argc, char** argv) {
  return gift::testing_daemon::Main(argc, argv);
}
