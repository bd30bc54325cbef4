// Starts the rank processes of the allreduce benchmark, each with its own
// command line (so a rank can be wrapped in `ip netns exec NS ...`), and
// waits for them under one deadline. When a rank fails, or the deadline
// passes, the others are killed (SIGKILL) rather than left to time out one
// collective at a time.
//
//   ASSIGN_OR_RETURN(std::vector<RankExit> exits,
//                    LaunchRanks({{self, "--rank=0"}, {self, "--rank=1"}},
//                                absl::Minutes(10)));
//
// Thread safety: reaps only its own children (by pid); not meant to be run
// from several threads at once.
#ifndef GIFT_BENCH_ALLREDUCE_RANK_LAUNCHER_H_
#define GIFT_BENCH_ALLREDUCE_RANK_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gift::bench {

struct RankExit {
  // Exit code when the process exited, else -1.
  int exit_code = -1;
  // Terminating signal, else 0.
  int term_signal = 0;
  // Killed by us: the deadline passed or another rank failed.
  bool killed = false;
};

// Runs argvs[r] (argv[0] looked up in PATH) for every rank r. Errors only
// when a process cannot be started (the ones already started are killed).
// REQUIRES: every argv non-empty; deadline > 0.
absl::StatusOr<std::vector<RankExit>> LaunchRanks(
    const std::vector<std::vector<std::string>>& argvs,
    absl::Duration deadline);

// "rank 0: exit 0, rank 1: signal 9 (killed)", for messages.
std::string DescribeExits(const std::vector<RankExit>& exits);

}  // namespace gift::bench

#endif  // GIFT_BENCH_ALLREDUCE_RANK_LAUNCHER_H_
