// AllReduceEngine on the NCCL backend, on one GPU: time per step and
// bytes per step of fp8 (two-phase), fp32 and bf16 (ncclAllReduce) and
// nccl-fp8 (sm_90) for buckets of 4, 64 and 256 MiB (Euclidean layers of
// 4 MiB each), as ratios against fp32; plus the kernel time of the fp8
// path's quantize (whole bucket) + dequantize-accumulate (own chunk, W
// sources) measured with cudaEvents on a stream of its own.
//
// The W ranks are processes of this binary launched through the multi-process
// harness, all on device 0 (default W = 4). NCCL refuses several ranks of one
// communicator on one GPU ("Duplicate GPU detected"); the benchmark then
// falls back to W = 1, where the collectives are local copies and the figures
// are those of the kernels and the per-step overheads, and says so.
//
// Step time is host wall time of the blocking Run (it returns once its
// stream has drained), mean over the timed steps after a barrier each.
// Usage: allreduce_gpu_bench [--world=4] [--steps=10]
// Prints one table (rank 0's report) on stdout; exit 0 on success.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/allreduce_engine.h"
#include "client/store.h"
#include "client/transport_factory.h"
#include "kernels/accumulate.h"
#include "kernels/gpu.h"
#include "kernels/quantize.h"
#include "tests/multiprocess/harness.h"

namespace gift::bench {
namespace {

using client::AllReduceMode;
using client::BucketLayer;
using client::EpochPlan;

constexpr int kExitDuplicateGpu = 3;
constexpr int64_t kLayerFloats = int64_t{1} << 20;  // 4 MiB layers
constexpr int kSizesMib[] = {4, 64, 256};

EpochPlan PlanOf(int mib) {
  const int64_t n = int64_t{mib} << 18;  // floats
  std::vector<BucketLayer> layers;
  for (int64_t off = 0; off < n; off += kLayerFloats) {
    layers.push_back({.name = absl::StrCat("l", off / kLayerFloats),
                      .shape = {std::min(kLayerFloats, n - off)},
                      .offset = off});
  }
  return *EpochPlan::Create(1, n, std::move(layers));
}

struct Figure {
  double ms = 0;
  double bytes = 0;
};

// Times `steps` Runs of one mode; NaN-free Gaussian-ish data.
absl::StatusOr<Figure> TimeMode(client::Transport& comm, AllReduceMode mode,
                                const EpochPlan& plan, float* bucket,
                                const std::vector<float>& host, int steps) {
  client::AllReduceEngineOptions o;
  o.mode = mode;
  o.probe_interval = 0;
  auto ar = client::AllReduceEngine::Create(&comm, plan, o);
  if (!ar.ok()) return ar.status();
  client::VersionedFactors none;
  client::StepTelemetry t;
  Figure f;
  double seconds = 0;
  for (int s = -2; s < steps; ++s) {  // two warm-up steps
    // Synchronous with every stream (the allreduce's is non-blocking).
    if (cudaMemcpy(bucket, host.data(), host.size() * 4,
                   cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return absl::InternalError("upload failed");
    }
    if (absl::Status b = comm.Barrier(); !b.ok()) return b;
    const absl::Time start = absl::Now();
    if (absl::Status r = (*ar)->Run(bucket, none, &t); !r.ok()) return r;
    const absl::Duration d = absl::Now() - start;
    if (s < 0) continue;
    seconds += absl::ToDoubleSeconds(d);
    f.bytes += double(t.bytes_euclid + t.bytes_gift);
  }
  f.ms = 1e3 * seconds / steps;
  f.bytes /= steps;
  return f;
}

// Quantize of the whole bucket + accumulate of one chunk from W sources.
absl::StatusOr<double> KernelMs(int64_t n, int w) {
  auto ctx = gpu::Context::Create(0);
  if (!ctx.ok()) return ctx.status();
  gpu::DeviceBuffer<float> x, acc, scales;
  gpu::DeviceBuffer<uint8_t> codes;
  const int64_t chunk = (n + w - 1) / w;
  if (absl::Status s = x.Allocate(n); !s.ok()) return s;
  if (absl::Status s = acc.Allocate(chunk); !s.ok()) return s;
  if (absl::Status s = scales.Allocate(1); !s.ok()) return s;
  if (absl::Status s = codes.Allocate(n); !s.ok()) return s;
  // 0x3F3F3F3F = 0.747 everywhere: finite, non-zero.
  if (absl::Status s = x.Fill(0x3F); !s.ok()) return s;
  const kernels::QuantizeSpec spec;
  std::vector<kernels::Fp8Source> src(w, {codes.get(), scales.get()});
  auto stream = static_cast<cudaStream_t>((*ctx)->stream());
  cudaEvent_t a, b;
  if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
    return absl::InternalError("cudaEventCreate failed");
  constexpr int kReps = 10;
  absl::Status st;
  cudaEventRecord(a, stream);
  for (int r = 0; r < kReps && st.ok(); ++r) {
    st = kernels::cuda::Quantize(**ctx, x.get(), n, spec, codes.get(),
                                 scales.get(), nullptr, nullptr);
    if (st.ok()) {
      st = kernels::cuda::DequantizeAccumulate(**ctx, src.data(), w, chunk,
                                               spec, true, acc.get());
    }
  }
  cudaEventRecord(b, stream);
  float ms = 0;
  const bool timed = cudaEventSynchronize(b) == cudaSuccess &&
                     cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!st.ok()) return st;
  if (!timed) return absl::InternalError("cudaEvent timing failed");
  return double(ms) / kReps;
}

int Worker(int steps) {
  auto env = multiprocess::RankEnvFromEnvironment();
  if (!env.ok()) return 2;
  auto store = client::FileStore::Create(env->store_dir);
  if (!store.ok()) return 2;
  client::TransportOptions o;
  o.backend = "nccl";
  o.rank = env->rank;
  o.world_size = env->world_size;
  o.store = store->get();
  o.timeout = absl::Seconds(60);
  auto comm = client::CreateTransport(o);
  if (!comm.ok()) {
    std::cerr << "rank " << env->rank << ": " << comm.status() << std::endl;
    const bool dup =
        absl::StrContains(comm.status().message(), "invalid usage");
    return dup ? kExitDuplicateGpu : 2;
  }
  const int w = env->world_size;
  std::string report = absl::StrFormat(
      "W = %d rank(s) on one GPU, %d timed steps per figure\n"
      "%-9s %6s %11s %14s %9s %9s %12s\n",
      w, steps, "mode", "MiB", "ms/step", "bytes/step", "t/fp32", "B/fp32",
      "kernel ms");
  for (int mib : kSizesMib) {
    const EpochPlan plan = PlanOf(mib);
    const int64_t n = plan.bucket_elements();
    std::vector<float> host(n);
    uint64_t z = 0x9E3779B97F4A7C15ull * (env->rank + 1);
    for (float& v : host) {  // xorshift: uniform in (-1, 1)
      z ^= z << 13, z ^= z >> 7, z ^= z << 17;
      v = static_cast<float>(int64_t(z >> 11) - (int64_t{1} << 52)) /
          float(int64_t{1} << 52);
    }
    float* bucket = nullptr;
    if (cudaMalloc(&bucket, n * 4) != cudaSuccess) return 2;
    std::map<AllReduceMode, Figure> figs;
    for (AllReduceMode m : {AllReduceMode::kFp32, AllReduceMode::kFp8,
                            AllReduceMode::kBf16, AllReduceMode::kNcclFp8}) {
      auto f = TimeMode(**comm, m, plan, bucket, host, steps);
      if (!f.ok()) {
        absl::StrAppendFormat(&report, "%-9s %6d  unavailable: %s\n",
                              client::AllReduceModeName(m), mib,
                              f.status().message());
        // A failure after creation leaves the communicator broken.
        if (f.status().code() != absl::StatusCode::kFailedPrecondition) {
          cudaFree(bucket);
          (void)multiprocess::WriteRankReport(*env, report);
          return 1;
        }
        continue;
      }
      figs[m] = *f;
    }
    cudaFree(bucket);
    const Figure base = figs[AllReduceMode::kFp32];
    const absl::StatusOr<double> kms = KernelMs(n, w);
    for (const auto& [m, f] : figs) {
      absl::StrAppendFormat(
          &report, "%-9s %6d %11.3f %14.0f %9.3f %9.3f %12s\n",
          client::AllReduceModeName(m), mib, f.ms, f.bytes,
          base.ms > 0 ? f.ms / base.ms : 0.0,
          base.bytes > 0 ? f.bytes / base.bytes : 0.0,
          m == AllReduceMode::kFp8 && kms.ok() ? absl::StrFormat("%.3f", *kms)
                                               : "");
    }
  }
  if (!multiprocess::WriteRankReport(*env, report).ok()) return 2;
  return 0;
}

int Main(int argc, char** argv) {
  int world = 4, steps = 10;
  bool worker = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--worker") {
      worker = true;
    } else if (absl::StartsWith(a, "--world=")) {
      if (!absl::SimpleAtoi(a.substr(8), &world) || world < 1) return 2;
    } else if (absl::StartsWith(a, "--steps=")) {
      if (!absl::SimpleAtoi(a.substr(8), &steps) || steps < 1) return 2;
    } else {
      std::cerr << "usage: allreduce_gpu_bench [--world=W] [--steps=K]\n";
      return 2;
    }
  }
  if (worker) return Worker(steps);
  if (!gpu::Available()) {
    std::cerr << "allreduce_gpu_bench: no GPU\n";
    return 2;
  }
  for (int w = world;; w = 1) {
    multiprocess::LaunchOptions launch;
    std::error_code ec;
    launch.binary = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
      std::cerr << "cannot resolve /proc/self/exe: " << ec.message() << "\n";
      return 2;
    }
    launch.args = {"--worker", absl::StrCat("--steps=", steps)};
    launch.world_size = w;
    launch.deadline = absl::Seconds(600);
    auto run = multiprocess::RunRanks(launch);
    if (!run.ok()) {
      std::cerr << run.status() << std::endl;
      return 2;
    }
    if (w > 1 && run->ranks[0].exit_code == kExitDuplicateGpu) {
      std::cout << "NCCL refuses " << w
                << " ranks on one GPU; falling back to W = 1\n";
      continue;
    }
    std::cout << run->ranks[0].report;
    for (const auto& r : run->ranks) {
      if (r.exit_code != 0) {
        std::cerr << multiprocess::Describe(*run) << std::endl;
        return 1;
      }
    }
    return 0;
  }
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
