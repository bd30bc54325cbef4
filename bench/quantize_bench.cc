// CPU throughput of the FP8 and FP4 (nvfp4, mxfp4) quantize / dequantize /
// accumulate kernels against
// memcpy of the same tensor, measured side by side in this process. Bytes
// processed = bytes read + bytes written by the kernel (memcpy: 8 per float),
// so the ratio to memcpy is the fraction of the achievable copy bandwidth.
// After the runs a summary table "kernel | GB/s | ratio to memcpy" is printed.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/accumulate.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::kernels {
namespace {

std::vector<float> RandomData(int64_t n) {
  return bench::NormalData(n, 1, 1e-3f);
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = RandomData(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * sizeof(float));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void RunQuantize(benchmark::State& state, int64_t block, bool residual) {
  const int64_t n = state.range(0);
  auto x = RandomData(n);
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(NumScales(n, block));
  QuantizeStats st;
  for (auto _ : state) {
    // In place, as error feedback runs: the residual replaces x.
    if (!Quantize(x.data(), n, {Fp8Format::kE4M3, block}, codes.data(),
                  scales.data(), residual ? x.data() : nullptr, &st)
             .ok()) {
      state.SkipWithError("Quantize failed");
      break;
    }
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * (residual ? 9 : 5));
}

void BM_QuantizeTensor(benchmark::State& state) {
  RunQuantize(state, 0, false);
}
void BM_QuantizeTensorResidual(benchmark::State& state) {
  RunQuantize(state, 0, true);
}
void BM_QuantizeBlock512(benchmark::State& state) {
  RunQuantize(state, 512, false);
}

void BM_Dequantize(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = RandomData(n);
  std::vector<uint8_t> codes(n);
  float scale;
  (void)Quantize(x.data(), n, {}, codes.data(), &scale, nullptr, nullptr);
  std::vector<float> out(n);
  for (auto _ : state) {
    (void)Dequantize(codes.data(), &scale, n, {}, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 5);
}

void BM_DequantizeAccumulate4(benchmark::State& state) {
  const int64_t n = state.range(0);
  constexpr int kSources = 4;
  const auto x = RandomData(n);
  std::vector<std::vector<uint8_t>> codes(kSources, std::vector<uint8_t>(n));
  std::vector<float> scales(kSources);
  std::vector<Fp8Source> src;
  for (int k = 0; k < kSources; ++k) {
    (void)Quantize(x.data(), n, {}, codes[k].data(), &scales[k], nullptr,
                   nullptr);
    src.push_back({codes[k].data(), &scales[k]});
  }
  std::vector<float> acc(n);
  for (auto _ : state) {
    (void)DequantizeAccumulate(src.data(), kSources, n, {}, true, acc.data());
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  // Codes of every source read, acc written (zero_first: not read).
  state.SetBytesProcessed(state.iterations() * n * (kSources + 4));
}

// 4-bit: in place with the residual and the telemetry, as error feedback
// runs (bytes: x read, residual written, codes and block scales written).
void RunQuantizeFp4(benchmark::State& state, Fp4Format f) {
  const int64_t n = state.range(0);
  auto x = RandomData(n);
  std::vector<uint8_t> codes(Fp4PackedBytes(n)), scales(Fp4NumBlocks(n, f));
  float tensor_scale = 0;
  QuantizeStats st;
  for (auto _ : state) {
    if (!QuantizeFp4(x.data(), n, f, codes.data(), scales.data(), &tensor_scale,
                     x.data(), &st)
             .ok()) {
      state.SkipWithError("QuantizeFp4 failed");
      break;
    }
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() *
                          (n * 8 + Fp4PackedBytes(n) + Fp4NumBlocks(n, f)));
}
void BM_QuantizeNvfp4Residual(benchmark::State& state) {
  RunQuantizeFp4(state, Fp4Format::kNvfp4);
}
void BM_QuantizeMxfp4Residual(benchmark::State& state) {
  RunQuantizeFp4(state, Fp4Format::kMxfp4);
}

void RunDequantizeAccumulateFp4(benchmark::State& state, Fp4Format f) {
  const int64_t n = state.range(0);
  constexpr int kSources = 4;
  const auto x = RandomData(n);
  std::vector<std::vector<uint8_t>> codes(
      kSources, std::vector<uint8_t>(Fp4PackedBytes(n)));
  std::vector<std::vector<uint8_t>> scales(
      kSources, std::vector<uint8_t>(Fp4NumBlocks(n, f)));
  std::vector<float> tensor(kSources);
  std::vector<Fp4Source> src;
  for (int k = 0; k < kSources; ++k) {
    (void)QuantizeFp4(x.data(), n, f, codes[k].data(), scales[k].data(),
                      &tensor[k], nullptr, nullptr);
    src.push_back({codes[k].data(), scales[k].data(), &tensor[k]});
  }
  std::vector<float> acc(n);
  for (auto _ : state) {
    (void)DequantizeAccumulateFp4(src.data(), kSources, n, f, true, acc.data());
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      state.iterations() *
      (kSources * (Fp4PackedBytes(n) + Fp4NumBlocks(n, f)) + n * 4));
}
void BM_DequantizeAccumulate4Nvfp4(benchmark::State& state) {
  RunDequantizeAccumulateFp4(state, Fp4Format::kNvfp4);
}
void BM_DequantizeAccumulate4Mxfp4(benchmark::State& state) {
  RunDequantizeAccumulateFp4(state, Fp4Format::kMxfp4);
}

constexpr int64_t kSizes[] = {1 << 20, 1 << 24};
#define GIFT_SIZES \
  ->Arg(kSizes[0])->Arg(kSizes[1])->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_Memcpy) GIFT_SIZES;
BENCHMARK(BM_QuantizeTensor) GIFT_SIZES;
BENCHMARK(BM_QuantizeTensorResidual) GIFT_SIZES;
BENCHMARK(BM_QuantizeBlock512) GIFT_SIZES;
BENCHMARK(BM_Dequantize) GIFT_SIZES;
BENCHMARK(BM_DequantizeAccumulate4) GIFT_SIZES;
BENCHMARK(BM_QuantizeNvfp4Residual) GIFT_SIZES;
BENCHMARK(BM_QuantizeMxfp4Residual) GIFT_SIZES;
BENCHMARK(BM_DequantizeAccumulate4Nvfp4) GIFT_SIZES;
BENCHMARK(BM_DequantizeAccumulate4Mxfp4) GIFT_SIZES;
#undef GIFT_SIZES

// Console output as usual, plus the bytes/s of every run for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      const auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) {
        rows_.emplace_back(r.benchmark_name(), it->second.value);
      }
    }
  }

  void PrintSummary() const {
    std::map<std::string, double> memcpy_by_size;
    for (const auto& [name, bps] : rows_) {
      if (name.rfind("BM_Memcpy/", 0) == 0) {
        memcpy_by_size[name.substr(name.find('/'))] = bps;
      }
    }
    std::printf("\n%-36s | %8s | %s\n", "kernel", "GB/s", "ratio to memcpy");
    for (const auto& [name, bps] : rows_) {
      const auto m = memcpy_by_size.find(name.substr(name.find('/')));
      const double ratio = m == memcpy_by_size.end() ? 0 : bps / m->second;
      std::printf("%-36s | %8.2f | %.2f\n", name.c_str(), bps / 1e9, ratio);
    }
  }

 private:
  std::vector<std::pair<std::string, double>> rows_;
};

}  // namespace
}  // namespace gift::kernels

int main(int argc, char** argv) {
  return gift::bench::RunWithSummary<gift::kernels::SummaryReporter>(argc,
                                                                     argv);
}
