// Daemon-side cost of a rank-32 factor refresh from a streamed Nyström sketch
// (MakeTestMatrix for the next window + NystromEigenpairs on Σ Y, p = 16
// oversampling) against the exact top-32 eigenpairs of the full matrix
// (LAPACK dsyevr), which is what the sketch avoids. The sketch Y = A Ω is
// the clients' work and is not timed. A summary line per d_in prints both
// times and the speed-up. BM_NextBasis times the next window's basis alone
// (Ω = [U | Q], U of rank 32 kept and p new columns) at r + p columns (what
// giftd builds) and at k_cap = r_cap + p = 80 (the width it once built), a
// line per d_in.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "linalg/eigen_pairs.h"
#include "linalg/nystrom.h"

namespace gift::linalg {
namespace {

constexpr int kRank = 32;
constexpr int kOversample = 16;

// A = B diag(0.9^j) Bᵀ / d + 1e-3·I with B Gaussian d × 64: a decaying
// activation spectrum over a noise floor, cheap to build at d = 4096.
Eigen::MatrixXd MakeMatrix(int64_t d) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> g;
  Eigen::MatrixXd b(d, 64);
  for (Eigen::Index i = 0; i < b.size(); ++i) b.data()[i] = g(rng);
  Eigen::VectorXd s(64);
  for (int j = 0; j < 64; ++j) s(j) = std::pow(0.9, j);
  Eigen::MatrixXd a = b * s.asDiagonal() * b.transpose() / d;
  a.diagonal().array() += 1e-3;
  return a;
}

void BM_NystromFactor(benchmark::State& state) {
  const int64_t d = state.range(0);
  const Eigen::MatrixXd a = MakeMatrix(d);
  const Eigen::MatrixXd u_prev = MakeTestMatrix(d, kRank, nullptr, 1);
  const Eigen::MatrixXd omega =
      MakeTestMatrix(d, kRank + kOversample, &u_prev, 2);
  const Eigen::MatrixXd y = a * omega;
  for (auto _ : state) {
    Eigen::MatrixXd next = MakeTestMatrix(d, kRank + kOversample, &u_prev, 2);
    absl::StatusOr<EigenPairs> e = NystromEigenpairs(y, omega, kRank);
    if (!e.ok()) state.SkipWithError(e.status().ToString().c_str());
    benchmark::DoNotOptimize(next.data());
    benchmark::DoNotOptimize(e);
  }
}

constexpr int kCapColumns = 64 + kOversample;  // r_cap 64 (RankCap) + p

void BM_NextBasis(benchmark::State& state) {
  const int64_t d = state.range(0);
  const Eigen::MatrixXd u_prev = MakeTestMatrix(d, kRank, nullptr, 1);
  for (auto _ : state) {
    Eigen::MatrixXd next = MakeTestMatrix(d, state.range(1), &u_prev, 2);
    benchmark::DoNotOptimize(next.data());
  }
}

void BM_ExactTopEigenpairs(benchmark::State& state) {
  const Eigen::MatrixXd a = MakeMatrix(state.range(0));
  for (auto _ : state) {
    absl::StatusOr<EigenPairs> e = TopEigenpairs(a, kRank);
    if (!e.ok()) state.SkipWithError(e.status().ToString().c_str());
    benchmark::DoNotOptimize(e);
  }
}

BENCHMARK(BM_NystromFactor)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NextBasis)
    ->Args({1024, kRank + kOversample})
    ->Args({1024, kCapColumns})
    ->Args({4096, kRank + kOversample})
    ->Args({4096, kCapColumns})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactTopEigenpairs)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond);

class SummaryReporter : public bench::TimesReporter {
 public:
  void PrintSummary() const {
    std::printf("\n%-6s | %12s | %12s | %s\n", "d_in", "Nyström ms", "exact ms",
                "exact / Nyström, wall / cpu");
    for (const char* d : {"1024", "4096"}) {
      const std::string ny = std::string("BM_NystromFactor/") + d;
      const std::string ex = std::string("BM_ExactTopEigenpairs/") + d;
      if (seconds_.count(ny) == 0 || seconds_.count(ex) == 0) continue;
      std::printf("%-6s | %12.2f | %12.2f | %.1f / %.1f\n", d,
                  seconds_.at(ny) * 1e3, seconds_.at(ex) * 1e3,
                  seconds_.at(ex) / seconds_.at(ny),
                  cpu_seconds_.at(ex) / cpu_seconds_.at(ny));
    }
    std::printf("\n%-6s | %14s | %14s | %s\n", "d_in", "basis r+p ms",
                "basis k_cap ms", "k_cap / r+p");
    for (const char* d : {"1024", "4096"}) {
      const std::string narrow =
          absl::StrCat("BM_NextBasis/", d, "/", kRank + kOversample);
      const std::string wide =
          absl::StrCat("BM_NextBasis/", d, "/", kCapColumns);
      if (seconds_.count(narrow) == 0 || seconds_.count(wide) == 0) continue;
      std::printf("%-6s | %14.2f | %14.2f | %.2f\n", d,
                  seconds_.at(narrow) * 1e3, seconds_.at(wide) * 1e3,
                  seconds_.at(wide) / seconds_.at(narrow));
    }
  }
};

}  // namespace
}  // namespace gift::linalg

int main(int argc, char** argv) {
  return gift::bench::RunWithSummary<gift::linalg::SummaryReporter>(argc, argv);
}
