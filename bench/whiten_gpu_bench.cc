// GPU cost of the low-rank whitening pair (cuda::ApplyLowRank forward with
// fused error feedback, then inverse) against one cuBLAS GEMM pair
// (P = X·U, then P·Uᵀ) on the same stream, timed with CUDA events (manual
// time = the whitening pair). Counters: gemm_pair_us (the baseline, per
// call) and ratio = whitening pair / GEMM pair (expect ~2: the pair holds
// two GEMM pairs). Linked into kernels_gpu_bench (main from
// benchmark::benchmark_main); skipped without a device.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/whiten.h"

namespace gift::kernels {
namespace {

constexpr int kRank = 32;
constexpr int kReps = 10;  // calls between two events

gpu::Context* WhitenContext() {
  static std::unique_ptr<gpu::Context> ctx = [] {
    std::unique_ptr<gpu::Context> c;
    if (!gpu::Available()) return c;
    auto made = gpu::Context::Create();
    if (made.ok()) c = std::move(*made);
    return c;
  }();
  return ctx.get();
}

// cudaMalloc'd floats initialised from a seeded normal distribution.
class DeviceFloats {
 public:
  DeviceFloats(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> h(n);
    for (float& v : h) v = g(rng);
    if (cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(float)) !=
        cudaSuccess) {
      p_ = nullptr;
      return;
    }
    cudaMemcpy(p_, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

// Elapsed seconds between two recorded events.
double Seconds(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1e-3;
}

void BM_WhitenPairGpu(benchmark::State& state) {
  gpu::Context* ctx = WhitenContext();
  if (ctx == nullptr) {
    state.SkipWithError("no GPU");
    return;
  }
  const int rows = static_cast<int>(state.range(0));
  const int d = static_cast<int>(state.range(1));
  const size_t n = static_cast<size_t>(rows) * d;
  DeviceFloats x(n, 1, 1e-3f), residual(n, 2, 1e-5f), out(n, 3, 0.0f),
      back(n, 4, 0.0f), u(static_cast<size_t>(d) * kRank, 5, 1.0f / 64),
      c(kRank, 6, 0.1f), c_inv(kRank, 7, 0.1f),
      ws(WhitenWorkspaceFloats(rows, d, kRank), 8, 0.0f);
  if (ws.get() == nullptr || x.get() == nullptr) {
    state.SkipWithError("cudaMalloc failed");
    return;
  }
  cudaDeviceSynchronize();
  auto stream = static_cast<cudaStream_t>(ctx->stream());
  auto blas = static_cast<cublasHandle_t>(ctx->cublas());
  const LowRankView fwd{u.get(), c.get(), d, kRank};
  const LowRankView inv{u.get(), c_inv.get(), d, kRank};
  const float one = 1.0f, zero = 0.0f;
  absl::Status warm = cuda::ApplyLowRank(*ctx, x.get(), rows, fwd,
                                         residual.get(), out.get(), ws.get());
  warm.Update(ctx->Synchronize());
  if (!warm.ok()) {
    state.SkipWithError(warm.ToString().c_str());
    return;
  }
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  double pair_total = 0, gemm_total = 0;
  for (auto _ : state) {
    cudaEventRecord(e0, stream);
    for (int i = 0; i < kReps; ++i) {
      (void)cuda::ApplyLowRank(*ctx, x.get(), rows, fwd, residual.get(),
                               out.get(), ws.get());
      (void)cuda::ApplyLowRank(*ctx, out.get(), rows, inv, nullptr, back.get(),
                               ws.get());
    }
    cudaEventRecord(e1, stream);
    for (int i = 0; i < kReps; ++i) {  // row-major via the transpose trick
      cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kRank, rows, d, &one, u.get(),
                  kRank, x.get(), d, &zero, ws.get(), kRank);
      cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, d, rows, kRank, &one, u.get(),
                  kRank, ws.get(), kRank, &zero, out.get(), d);
    }
    cudaEventRecord(e2, stream);
    cudaEventSynchronize(e2);
    const double pair = Seconds(e0, e1) / kReps;
    pair_total += pair;
    gemm_total += Seconds(e1, e2) / kReps;
    state.SetIterationTime(pair);
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("CUDA error");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  if (gemm_total > 0) {
    state.counters["gemm_pair_us"] = gemm_total * 1e6 / state.iterations();
    state.counters["ratio"] = pair_total / gemm_total;
  }
}

BENCHMARK(BM_WhitenPairGpu)
    ->Args({1024, 4096})
    ->Args({4096, 1024})
    ->Args({4096, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gift::kernels
