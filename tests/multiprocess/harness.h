// Runs the ranks of a multi-process test: forks and execs N copies of a
// binary, each with RANK, WORLD_SIZE, GIFT_STORE_DIR (an empty directory for
// the rendezvous store) and GIFT_OUT_DIR (where a rank may leave a report),
// waits for them all under one overall deadline, kills the stragglers, and
// returns every rank's exit status, elapsed time and report.
//
// Parent (the gtest case):
//   LaunchOptions launch;
//   launch.binary = GIFT_GLOO_RANK_WORKER;
//   launch.args = {"collectives"};
//   launch.world_size = 4;
//   absl::StatusOr<RunResult> run = RunRanks(launch);
//   ASSERT_OK(run);
//   for (const RankResult& r : run->ranks) {
//     EXPECT_EQ(r.exit_code, 0) << Describe(*run);
//   }
//
// Child (the rank binary):
//   absl::StatusOr<RankEnv> env = RankEnvFromEnvironment();
//   ... WriteRankReport(*env, "elapsed_ms=2003");
//
// Thread safety: concurrent RunRanks calls are safe (each reaps only its own
// children, by pid) as long as no thread changes the environment meanwhile.
#ifndef GIFT_TESTS_MULTIPROCESS_HARNESS_H_
#define GIFT_TESTS_MULTIPROCESS_HARNESS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::multiprocess {

struct LaunchOptions {
  // Executable to run for every rank. REQUIRES: not empty.
  std::string binary;
  // Arguments after argv[0]. Default: none.
  std::vector<std::string> args;
  // Number of ranks. REQUIRES: >= 1.
  int world_size = 2;
  // Overall deadline from launch; ranks still running then are killed with
  // SIGKILL and reported as killed_at_deadline. Default: 60 s.
  absl::Duration deadline = absl::Seconds(60);
  // Extra environment variables for every rank (override inherited ones).
  std::vector<std::pair<std::string, std::string>> env;
  // Keep the run directory (store and reports) for inspection. Default: no.
  bool keep_dir = false;
};

struct RankResult {
  int rank = -1;
  // Exit code when the rank exited normally, else -1.
  int exit_code = -1;
  // Terminating signal when the rank was killed, else 0.
  int term_signal = 0;
  bool killed_at_deadline = false;
  // From launch until the rank was reaped.
  absl::Duration elapsed;
  // Contents of the rank's report file, "" if it wrote none.
  std::string report;
};

struct RunResult {
  std::vector<RankResult> ranks;  // indexed by rank
  absl::Duration elapsed;         // until the last rank was reaped
};

// Launches the ranks and waits for them. Errors only when the run itself
// cannot be set up (no temp dir, fork failure); rank failures are results.
absl::StatusOr<RunResult> RunRanks(const LaunchOptions& options);

// Human-readable one-line summary of a run, for assertion messages.
std::string Describe(const RunResult& run);

// What a rank process learns from its environment.
struct RankEnv {
  int rank = -1;
  int world_size = 0;
  std::string store_dir;
  std::string out_dir;
};

// Reads RANK, WORLD_SIZE, GIFT_STORE_DIR and GIFT_OUT_DIR.
absl::StatusOr<RankEnv> RankEnvFromEnvironment();

// Writes (replaces) this rank's report, which RunRanks returns to the parent.
absl::Status WriteRankReport(const RankEnv& env, absl::string_view text);

// The environment for a child process, as execve takes it ("NAME=value"):
// this process's, minus the variables `set` names, plus `set` in its order.
// Also used by the giftd tests' Subprocess (tests/daemon/subprocess.cc).
std::vector<std::string> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& set);

}  // namespace gift::multiprocess

#endif  // GIFT_TESTS_MULTIPROCESS_HARNESS_H_
