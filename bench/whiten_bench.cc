// CPU cost of the low-rank whitening transforms against the GEMMs they are
// made of: one "GEMM pair" is P = X·U (d_out × d_in × r) then P·Uᵀ, two plain
// Eigen sgemm calls on row-major maps. Each transform (forward X·T with fused
// error feedback, inverse ·T⁻¹) is one GEMM pair's flops, so the target is
// about 1× the GEMM pair per transform and 2× for the pair. The pair also
// runs through internal::ApplyLowRankPortable (whole-matrix Eigen GEMMs plus
// an element-wise pass, the CPU path before the tiled one) for a side-by-side
// figure. After the runs a summary per shape prints each time and its ratio
// to the GEMM pair.
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

// Forward with error feedback alone: out = X T + R.
void BM_WhitenForward(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  for (auto _ : state) {
    absl::Status s =
        ApplyLowRank(p.x.data(), p.rows, {p.u.data(), p.c.data(), p.d, kRank},
                     p.residual.data(), p.out.data(), p.ws.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
}

// Inverse alone: back = X T⁻¹ (no add).
void BM_WhitenInverse(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  for (auto _ : state) {
    absl::Status s = ApplyLowRank(p.x.data(), p.rows,
                                  {p.u.data(), p.c_inv.data(), p.d, kRank},
                                  nullptr, p.back.data(), p.ws.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(p.back.data());
    benchmark::ClobberMemory();
  }
}

// The pair through `apply`: ApplyLowRank (tiled AVX2 path on this CPU) or
// internal::ApplyLowRankPortable (whole-matrix Eigen GEMMs, as before the
// tiled path).
using ApplyFn = absl::Status (*)(const float*, int64_t, const LowRankView&,
                                 const float*, float*, float*);

void WhitenPair(benchmark::State& state, ApplyFn apply) {
  Problem p(state.range(0), state.range(1));
  for (auto _ : state) {
    absl::Status s =
        apply(p.x.data(), p.rows, {p.u.data(), p.c.data(), p.d, kRank},
              p.residual.data(), p.out.data(), p.ws.data());
    s.Update(apply(p.out.data(), p.rows,
                   {p.u.data(), p.c_inv.data(), p.d, kRank}, nullptr,
                   p.back.data(), p.ws.data()));
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(p.back.data());
    benchmark::ClobberMemory();
  }
}

void BM_WhitenPair(benchmark::State& state) {
  WhitenPair(state, &ApplyLowRank);
}

void BM_WhitenPairPortable(benchmark::State& state) {
  WhitenPair(state, &internal::ApplyLowRankPortable);
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

BENCHMARK(BM_WhitenForward)->Apply(Shapes);
BENCHMARK(BM_WhitenInverse)->Apply(Shapes);
BENCHMARK(BM_WhitenPair)->Apply(Shapes);
BENCHMARK(BM_WhitenPairPortable)->Apply(Shapes);
BENCHMARK(BM_GemmPair)->Apply(Shapes);

// Console output plus the per-shape summary (seconds per iteration by run
// name, e.g. "BM_WhitenPair/1024/4096"): each whitening run against the
// GEMM pair of its shape.
class SummaryReporter : public bench::TimesReporter {
 public:
  // Ratios by wall time and by CPU time: the latter is the steadier figure
  // on a shared machine.
  void PrintSummary() const {
    static constexpr std::pair<const char*, const char*> kRuns[] = {
        {"BM_WhitenForward/", "forward+EF (expect ~1)"},
        {"BM_WhitenInverse/", "inverse (expect ~1)"},
        {"BM_WhitenPair/", "pair (expect ~2)"},
        {"BM_WhitenPairPortable/", "pair, portable path"}};
    std::printf("\n%-11s | %-22s | %8s | %12s | %s\n", "d_out×d_in",
                "transform", "ms", "GEMM pair ms", "× GEMM pair, wall / cpu");
    for (const auto& [gemm, gemm_t] : seconds_) {
      const std::string gemm_prefix = "BM_GemmPair/";
      if (gemm.rfind(gemm_prefix, 0) != 0) continue;
      const std::string shape = gemm.substr(gemm_prefix.size());
      for (const auto& [prefix, label] : kRuns) {
        const std::string name = prefix + shape;
        if (seconds_.count(name) == 0) continue;
        std::printf("%-11s | %-22s | %8.2f | %12.2f | %.2f / %.2f\n",
                    shape.c_str(), label, seconds_.at(name) * 1e3, gemm_t * 1e3,
                    seconds_.at(name) / gemm_t,
                    cpu_seconds_.at(name) / cpu_seconds_.at(gemm));
      }
    }
  }
};

}  // namespace
}  // namespace gift::kernels

int main(int argc, char** argv) {
  return gift::bench::RunWithSummary<gift::kernels::SummaryReporter>(argc,
                                                                     argv);
}
