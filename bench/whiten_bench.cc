// CPU cost of the low-rank whitening pair (forward X·T with fused error
// feedback, then inverse ·T⁻¹) against the GEMMs it is made of: one "GEMM
// pair" is P = X·U (d_out × d_in × r) then P·Uᵀ, issued with the same Eigen
// row-major maps. The whitening pair contains two GEMM pairs plus the
// element-wise adds, so the expected ratio is about 2. After the runs a
// summary line per shape prints both times and the ratio.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/whiten.h"

namespace gift::kernels {
namespace {

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr int64_t kRank = 32;

struct Problem {
  int64_t rows, d;
  std::vector<float> x, residual, u, c, c_inv, out, back, ws;
  Problem(int64_t rows_in, int64_t d_in) : rows(rows_in), d(d_in) {
    x = bench::NormalData(rows * d, 1, 1e-3f);
    residual = bench::NormalData(rows * d, 2, 1e-5f);
    u = bench::NormalData(d * kRank, 3,
                          1.0f / std::sqrt(static_cast<float>(d)));
    c.assign(kRank, -0.5f);
    c_inv.assign(kRank, 1.0f);
    out.resize(rows * d);
    back.resize(rows * d);
    ws.resize(WhitenWorkspaceFloats(rows, d, kRank));
  }
};

void BM_WhitenPair(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  for (auto _ : state) {
    absl::Status s =
        ApplyLowRank(p.x.data(), p.rows, {p.u.data(), p.c.data(), p.d, kRank},
                     p.residual.data(), p.out.data(), p.ws.data());
    s.Update(ApplyLowRank(p.out.data(), p.rows,
                          {p.u.data(), p.c_inv.data(), p.d, kRank}, nullptr,
                          p.back.data(), p.ws.data()));
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(p.back.data());
    benchmark::ClobberMemory();
  }
}

void BM_GemmPair(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  Eigen::Map<const RowMat> x(p.x.data(), p.rows, p.d);
  Eigen::Map<const RowMat> u(p.u.data(), p.d, kRank);
  Eigen::Map<RowMat> proj(p.ws.data(), p.rows, kRank);
  Eigen::Map<RowMat> out(p.out.data(), p.rows, p.d);
  for (auto _ : state) {
    proj.noalias() = x * u;
    out.noalias() = proj * u.transpose();
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 4096})->Args({4096, 1024})->Args({4096, 4096});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_WhitenPair)->Apply(Shapes);
BENCHMARK(BM_GemmPair)->Apply(Shapes);

// Console output plus the per-shape summary (seconds per iteration by run
// name, e.g. "BM_WhitenPair/1024/4096").
class SummaryReporter : public bench::TimesReporter {
 public:
  // Ratios by wall time and by CPU time: the latter is the steadier figure
  // on a shared machine.
  void PrintSummary() const {
    std::printf("\n%-11s | %12s | %14s | %s\n", "d_out×d_in", "pair ms",
                "GEMM pair ms", "ratio wall / cpu (expect ~2)");
    for (const auto& [name, t] : seconds_) {
      const std::string prefix = "BM_WhitenPair/";
      if (name.rfind(prefix, 0) != 0) continue;
      const std::string gemm = "BM_GemmPair/" + name.substr(prefix.size());
      if (seconds_.count(gemm) == 0) continue;
      std::printf("%-11s | %12.2f | %14.2f | %.2f / %.2f\n",
                  name.substr(prefix.size()).c_str(), t * 1e3,
                  seconds_.at(gemm) * 1e3, t / seconds_.at(gemm),
                  cpu_seconds_.at(name) / cpu_seconds_.at(gemm));
    }
  }
};

}  // namespace
}  // namespace gift::kernels

int main(int argc, char** argv) {
  return gift::bench::RunWithSummary<gift::kernels::SummaryReporter>(argc,
                                                                     argv);
}
