// Figures of the allreduce benchmark, one row per (bucket size, mode), and
// their hand-off from rank 0 to the launcher (one tab-separated line per
// row), the table printed at the end, and the JSON file.
//
// Ratios are taken within one bucket size: bytes against the `fp32` mode,
// time against Gloo's own FP32 allreduce (`gloo-fp32`) and against `fp32`.
//
//   std::vector<ModeResult> rows = ...;
//   std::cout << FormatTable(rows);
//
// Thread safety: plain data and pure functions.
#ifndef GIFT_BENCH_ALLREDUCE_BENCH_RESULTS_H_
#define GIFT_BENCH_ALLREDUCE_BENCH_RESULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::bench {

struct ModeResult {
  int64_t size_mib = 0;
  std::string mode;  // fp8 | fp32 | bf16 | gloo-fp32
  int steps = 0;     // measured steps (after warm-up)
  // Payload bytes one rank put on the wire per step (communicator
  // counters), averaged over ranks and steps.
  double bytes_per_rank = 0;
  // Per-step wall time, max over ranks, then median / p90 over steps.
  double median_ms = 0;
  double p90_ms = 0;
  // ‖result − fp32 result‖ / ‖fp32 result‖ over the bucket; < 0 when not
  // measured (no fp32 run, or a mode that sums instead of averaging).
  double rel_l2_vs_fp32 = -1;
};

std::string ToLine(const ModeResult& r);
absl::StatusOr<ModeResult> FromLine(absl::string_view line);

// Median and nearest-rank p90 of `v` (copied). REQUIRES: not empty.
double Median(std::vector<double> v);
double P90(std::vector<double> v);

// The table: one line per row with the bytes and time ratios.
std::string FormatTable(const std::vector<ModeResult>& rows);

// Writes {"config": config_json, "results": [...]} to `path`; config_json
// must be a JSON object text.
absl::Status WriteJson(const std::string& path, const std::string& config_json,
                       const std::vector<ModeResult>& rows);

}  // namespace gift::bench

#endif  // GIFT_BENCH_ALLREDUCE_BENCH_RESULTS_H_
