// One rank of the allreduce benchmark: connects to its peers through a
// FileStore (Gloo over TCP, bound to this rank's host address), then for
// every bucket size and mode runs warm-up and measured steps of the same
// gradients and records, per step, the wall time of the call (each step
// starts after a barrier) and the payload bytes the communicator counted.
// Per-step times are MAX-reduced over the ranks and bytes SUM-reduced; rank
// 0 writes one result line per (size, mode) (bench_results.h).
//
// Modes: fp8, fp32, bf16 (AllReduceEngine, probe steps off so that every
// step is a steady-state step) and gloo-fp32 (Transport::AllReduce SUM in
// FP32: Gloo's own allreduce, no averaging). The fp32 mode runs first when
// present; its result is the reference of the other modes' relL2.
//
//   RankConfig config;  // from the launcher's command line
//   RETURN_IF_ERROR(RunBenchRank(config));
//
// Thread safety: one call per process.
#ifndef GIFT_BENCH_ALLREDUCE_BENCH_RANK_H_
#define GIFT_BENCH_ALLREDUCE_BENCH_RANK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace gift::bench {

struct RankConfig {
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // Rendezvous directory shared by all ranks (empty at start).
  std::string store_dir;
  // Address Gloo listens on and announces. Default: loopback.
  std::string host = "127.0.0.1";
  // Where rank 0 writes its result lines.
  std::string result_path;
  std::vector<int64_t> sizes_mib;
  std::vector<std::string> modes;
  // Measured steps per mode; 0 = by size (DefaultSteps). REQUIRES: >= 0.
  int steps = 0;
  // Unmeasured steps before them. REQUIRES: >= 0.
  int warmup = 1;
  // Bound of rendezvous and of every collective.
  absl::Duration timeout = absl::Seconds(120);
};

// Steps for a bucket size when none are given: 20 at 4 MiB, down to 3 at
// 256 MiB (about 512 MiB of bucket per mode).
int DefaultSteps(int64_t size_mib);

absl::Status RunBenchRank(const RankConfig& config);

}  // namespace gift::bench

#endif  // GIFT_BENCH_ALLREDUCE_BENCH_RANK_H_
