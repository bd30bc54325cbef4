// CPU cost of one step's activation sketch of a layer (kernels::
// SketchAccumulate: Y += Aᵀ(A Ω) for `rows` sampled input rows of width d)
// at the two sketch widths giftd has used: k = r + p = 48 columns of Ω for
// the default rank 32 (DESIGN §3, what a window sketches) against the
// buffer's k_cap = max_rank + p = 80 (what every window sketched before).
// After the runs a summary line per shape prints both CPU times and their
// ratio (the cost is two rows × d × k GEMMs, so about 48 / 80 = 0.6).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/sketch.h"

namespace gift::kernels {
namespace {

constexpr int64_t kNarrow = 48, kWide = 80;

// Args: rows, d, k.
void BM_Sketch(benchmark::State& state) {
  const int64_t rows = state.range(0), d = state.range(1), k = state.range(2);
  const std::vector<float> a = bench::NormalData(rows * d, 1, 1.0f);
  const std::vector<float> omega =
      bench::NormalData(d * k, 2, 1.0f / std::sqrt(static_cast<float>(d)));
  std::vector<float> y(d * k), ws(SketchWorkspaceFloats(rows, k));
  double trace = 0;
  int64_t count = 0;
  for (auto _ : state) {
    absl::Status s = SketchAccumulate(a.data(), rows, d, omega.data(), k,
                                      {y.data(), &trace, &count}, ws.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

// The multi-host benchmark's MLP output projection (256 rows a step, d_in
// 1280) and a 4096-wide layer at giftd's default sketch_rows (512).
void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [rows, d] : {std::pair<int64_t, int64_t>{256, 1280},
                                std::pair<int64_t, int64_t>{512, 4096}}) {
    b->Args({rows, d, kNarrow})->Args({rows, d, kWide});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Sketch)->Apply(Shapes);

// Console output plus the per-shape summary (CPU seconds per iteration by
// run name, e.g. "BM_Sketch/256/1280/48").
class SummaryReporter : public bench::TimesReporter {
 public:
  void PrintSummary() const {
    std::printf("\n%-11s | %12s | %12s | %s\n", "rows×d", "k=48 us", "k=80 us",
                "ratio (CPU time)");
    for (const auto& [name, t] : cpu_seconds_) {
      // "BM_Sketch/rows/d/k": the narrow run of a shape and its wide twin.
      const size_t last = name.rfind('/');
      if (last == std::string::npos ||
          std::atoll(name.c_str() + last + 1) != kNarrow) {
        continue;
      }
      const std::string shape = name.substr(0, last);
      const auto wide = cpu_seconds_.find(shape + "/" + std::to_string(kWide));
      if (wide == cpu_seconds_.end()) continue;
      std::printf("%-11s | %12.1f | %12.1f | %.2f\n",
                  shape.c_str() + shape.find('/') + 1, t * 1e6,
                  wide->second * 1e6, t / wide->second);
    }
  }
};

}  // namespace
}  // namespace gift::kernels

int main(int argc, char** argv) {
  return gift::bench::RunWithSummary<gift::kernels::SummaryReporter>(argc,
                                                                     argv);
}
