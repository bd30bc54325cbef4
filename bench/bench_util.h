// What the kernel benchmarks share: their random inputs, and the closing
// summary (a console reporter that also keeps each run's wall and CPU
// seconds per iteration by run name; the main() that runs every benchmark
// through a summary reporter and prints its summary after the runs).
#ifndef GIFT_BENCH_BENCH_UTIL_H_
#define GIFT_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace gift::bench {

// n samples of N(0, stddev²), the same for the same seed.
inline std::vector<float> NormalData(int64_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

class TimesReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || r.iterations == 0) continue;
      const double n = static_cast<double>(r.iterations);
      seconds_[r.benchmark_name()] = r.real_accumulated_time / n;
      cpu_seconds_[r.benchmark_name()] = r.cpu_accumulated_time / n;
    }
    ConsoleReporter::ReportRuns(runs);
  }

 protected:
  std::map<std::string, double> seconds_;      // wall time per iteration
  std::map<std::string, double> cpu_seconds_;  // CPU time per iteration
};

// main() of a benchmark: Reporter is a ConsoleReporter with a
// `void PrintSummary() const`, printed once every benchmark ran.
template <typename Reporter>
int RunWithSummary(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}

}  // namespace gift::bench

#endif  // GIFT_BENCH_BENCH_UTIL_H_
