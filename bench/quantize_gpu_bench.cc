// GPU throughput of the FP8 quantize / dequantize / accumulate kernels, timed
// with CUDA events (manual time). Bytes processed = bytes read + written by
// the kernel; the counter vs_memcpy is the kernel's bandwidth over that of a
// device-to-device cudaMemcpyAsync moving the same number of bytes, measured
// right after it in the same process. Linked into kernels_gpu_bench (main
// from benchmark::benchmark_main).
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/accumulate.h"
#include "kernels/gpu.h"
#include "kernels/quantize.h"

namespace gift::kernels {
namespace {

gpu::Context* SharedContext() {
  static std::unique_ptr<gpu::Context> ctx = [] {
    std::unique_ptr<gpu::Context> c;
    if (!gpu::Available()) return c;
    auto made = gpu::Context::Create();
    if (made.ok()) c = std::move(*made);
    return c;
  }();
  return ctx.get();
}

cudaStream_t Stream(gpu::Context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}

// Seconds per call of fn, averaged over `reps` calls between two events.
double TimeCalls(gpu::Context& ctx, int reps, const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, Stream(ctx));
  for (int i = 0; i < reps; ++i) fn();
  cudaEventRecord(stop, Stream(ctx));
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / reps;
}

// Runs the timing loop for `fn`, which moves `bytes` bytes per call, and
// reports bytes/s and the ratio to a D2D copy of the same traffic.
void Measure(benchmark::State& state, gpu::Context& ctx, int64_t bytes,
             const std::function<void()>& fn) {
  fn();  // warm-up
  cudaStreamSynchronize(Stream(ctx));
  double kernel_s = 0;
  for (auto _ : state) {
    const double s = TimeCalls(ctx, 1, fn);
    state.SetIterationTime(s);
    kernel_s += s;
  }
  if (cudaGetLastError() != cudaSuccess) {
    state.SkipWithError("CUDA error");
    return;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  const size_t half = static_cast<size_t>(bytes / 2);  // read + write = bytes
  gpu::RawDeviceBuffer a, b;
  if (!a.Allocate(half).ok() || !b.Allocate(half).ok()) return;
  const double copy_s = TimeCalls(ctx, 20, [&] {
    cudaMemcpyAsync(b.get(), a.get(), half, cudaMemcpyDeviceToDevice,
                    Stream(ctx));
  });
  const double mean_s = kernel_s / state.iterations();
  state.counters["vs_memcpy"] = copy_s / mean_s;
  state.counters["memcpy_GBps"] = bytes / copy_s / 1e9;
}

std::vector<float> RandomData(int64_t n) {
  return bench::NormalData(n, 1, 1e-3f);
}

struct Buffers {
  gpu::DeviceBuffer<float> x, scales, out;
  gpu::DeviceBuffer<uint8_t> codes;
  gpu::DeviceBuffer<QuantizeStats> stats;
};

bool Setup(benchmark::State& state, int64_t n, int64_t block, Buffers* b) {
  const auto host = RandomData(n);
  if (!b->x.Allocate(n).ok() || !b->x.Upload(host.data(), n).ok() ||
      !b->codes.Allocate(n).ok() || !b->out.Allocate(n).ok() ||
      !b->scales.Allocate(NumScales(n, block)).ok() ||
      !b->stats.Allocate(1).ok()) {
    state.SkipWithError("device allocation failed");
    return false;
  }
  return true;
}

void RunQuantize(benchmark::State& state, int64_t block, bool residual) {
  gpu::Context* ctx = SharedContext();
  if (ctx == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0);
  Buffers b;
  if (!Setup(state, n, block, &b)) return;
  const QuantizeSpec spec{Fp8Format::kE4M3, block};
  Measure(state, *ctx, n * (residual ? 9 : 5), [&] {
    (void)cuda::Quantize(*ctx, b.x.get(), n, spec, b.codes.get(),
                         b.scales.get(), residual ? b.out.get() : nullptr,
                         b.stats.get());
  });
}

void BM_GpuMemcpy(benchmark::State& state) {
  gpu::Context* ctx = SharedContext();
  if (ctx == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0);
  Buffers b;
  if (!Setup(state, n, 0, &b)) return;
  Measure(state, *ctx, n * 8, [&] {
    cudaMemcpyAsync(b.out.get(), b.x.get(), n * 4, cudaMemcpyDeviceToDevice,
                    Stream(*ctx));
  });
}

void BM_GpuQuantizeTensor(benchmark::State& state) {
  RunQuantize(state, 0, false);
}
void BM_GpuQuantizeTensorResidual(benchmark::State& state) {
  RunQuantize(state, 0, true);
}
void BM_GpuQuantizeBlock512(benchmark::State& state) {
  RunQuantize(state, 512, false);
}

void BM_GpuDequantize(benchmark::State& state) {
  gpu::Context* ctx = SharedContext();
  if (ctx == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0);
  Buffers b;
  if (!Setup(state, n, 0, &b)) return;
  (void)cuda::Quantize(*ctx, b.x.get(), n, {}, b.codes.get(), b.scales.get(),
                       nullptr, nullptr);
  Measure(state, *ctx, n * 5, [&] {
    (void)cuda::Dequantize(*ctx, b.codes.get(), b.scales.get(), n, {},
                           b.out.get());
  });
}

void BM_GpuDequantizeAccumulate4(benchmark::State& state) {
  gpu::Context* ctx = SharedContext();
  if (ctx == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0);
  constexpr int kSources = 4;
  Buffers b;
  if (!Setup(state, n, 0, &b)) return;
  std::vector<gpu::DeviceBuffer<uint8_t>> codes(kSources);
  gpu::DeviceBuffer<float> scales;
  if (!scales.Allocate(kSources).ok()) return state.SkipWithError("alloc");
  std::vector<Fp8Source> src;
  for (int k = 0; k < kSources; ++k) {
    if (!codes[k].Allocate(n).ok()) return state.SkipWithError("alloc");
    (void)cuda::Quantize(*ctx, b.x.get(), n, {}, codes[k].get(),
                         scales.get() + k, nullptr, nullptr);
    src.push_back({codes[k].get(), scales.get() + k});
  }
  // acc read and written, every source's codes read.
  Measure(state, *ctx, n * (kSources + 8), [&] {
    (void)cuda::DequantizeAccumulate(*ctx, src.data(), kSources, n, {}, false,
                                     b.out.get());
  });
}

#define GIFT_GPU_SIZES                                               \
  ->Arg(1 << 20)->Arg(1 << 24)->Arg(1 << 26)->UseManualTime()->Unit( \
      benchmark::kMicrosecond)
BENCHMARK(BM_GpuMemcpy) GIFT_GPU_SIZES;
BENCHMARK(BM_GpuQuantizeTensor) GIFT_GPU_SIZES;
BENCHMARK(BM_GpuQuantizeTensorResidual) GIFT_GPU_SIZES;
BENCHMARK(BM_GpuQuantizeBlock512) GIFT_GPU_SIZES;
BENCHMARK(BM_GpuDequantize) GIFT_GPU_SIZES;
BENCHMARK(BM_GpuDequantizeAccumulate4) GIFT_GPU_SIZES;
#undef GIFT_GPU_SIZES

}  // namespace
}  // namespace gift::kernels
