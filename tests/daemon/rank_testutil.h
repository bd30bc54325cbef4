// Test helper for the binaries that giftd's integration tests and the daemon
// benchmark run (rank_worker.cc, gpu_rank_worker.cc,
// bench/daemon/bench_rank.cc and step_time_bench.cc): the parts of their
// main loop that are the same in all of them. Flags are `--key=value` or
// `--key value`, each bound to a variable; RankFlags are the ones every rank
// binary takes. In the rank binaries SIGTERM asks the loop to stop, and
// every rank MAX-reduces that request after each step, so all ranks stop
// after the same step and none is left waiting in a collective.
//
//   struct Flags { RankFlags rank; int layers = 4; };
//   Flags f;
//   std::map<std::string, FlagTarget> targets = RankFlagTargets(&f.rank);
//   targets["layers"] = &f.layers;
//   RETURN_IF_ERROR(ParseFlagsInto(argc, argv, targets));
//   RETURN_IF_ERROR(CheckRankFlags(f.rank));
//   StopOnSigterm();
//   ... set up comm ...
//   RETURN_IF_ERROR(RunSteps(*comm, f.rank.steps, f.rank.step_sleep_ms,
//                            [&](int64_t step) { return Step(step); }));
//
// Thread safety: ParseFlagsInto and RunSteps are called from the one main
// thread; the stop request is an atomic set from the signal handler.
#ifndef GIFT_TESTS_DAEMON_RANK_TESTUTIL_H_
#define GIFT_TESTS_DAEMON_RANK_TESTUTIL_H_

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/transport.h"
#include "common/status_macros.h"

namespace gift::testing_daemon {

// Where a flag's value goes. Integers are parsed and range-checked for the
// variable's type; a bool flag takes no value (`--keep-dir`), or one that
// absl::SimpleAtob reads (`--keep-dir=false`).
using FlagTarget = std::variant<int*, int64_t*, std::string*, bool*>;

// Parses argv (argv[0] skipped) into `targets`, keyed by the name without
// "--". Flags not given leave their variable unchanged. INVALID_ARGUMENT for
// a stray argument, an unknown flag, a missing or malformed value.
inline absl::Status ParseFlagsInto(
    int argc, char** argv, const std::map<std::string, FlagTarget>& targets) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError("unexpected argument " + a);
    }
    const size_t eq = a.find('=');
    const std::string name =
        eq == std::string::npos ? a.substr(2) : a.substr(2, eq - 2);
    const auto it = targets.find(name);
    if (it == targets.end()) {
      return absl::InvalidArgumentError("unknown flag --" + name);
    }
    const bool is_bool = std::holds_alternative<bool*>(it->second);
    std::string value = is_bool ? "true" : "";
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (!is_bool && i + 1 < argc) {
      value = argv[++i];
    } else if (!is_bool) {
      return absl::InvalidArgumentError("missing value for " + a);
    }
    const bool ok = std::visit(
        [&value](auto* out) {
          using T = std::remove_pointer_t<decltype(out)>;
          if constexpr (std::is_same_v<T, std::string>) {
            *out = value;
            return true;
          } else if constexpr (std::is_same_v<T, bool>) {
            return absl::SimpleAtob(value, out);
          } else {
            return absl::SimpleAtoi(value, out);
          }
        },
        it->second);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": not ", is_bool ? "a bool" : "an integer",
                       ": ", value));
    }
  }
  return absl::OkStatus();
}

// The flags of every rank binary (rank_worker, gpu_rank_worker and the
// benchmark's rank), with the test ranks' defaults.
struct RankFlags {
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // REQUIRES: not empty (both).
  std::string job;
  std::string agent_socket;
  // "daemon": rendezvous through giftd's store; otherwise a FileStore
  // directory. Default: "daemon".
  std::string store = "daemon";
  int64_t steps = 100;
  // Sleep after each step, standing in for forward and backward. Default: 0.
  int step_sleep_ms = 0;
  // JSON-lines report, one line a step. Default: "" (none).
  std::string report;
  int comm_timeout_s = 30;
  int probe_interval = 2;
  // 1: keep the audits' drift sums (AllReduceEngineOptions::audit_drift).
  int audit_drift = 0;
};

// ParseFlagsInto targets for `f`: --rank, --world-size, --job,
// --agent-socket, --store, --steps, --step-sleep-ms, --report,
// --comm-timeout-s, --probe-interval and --audit-drift. A binary adds its
// own.
inline std::map<std::string, FlagTarget> RankFlagTargets(RankFlags* f) {
  return {{"rank", &f->rank},
          {"world-size", &f->world_size},
          {"job", &f->job},
          {"agent-socket", &f->agent_socket},
          {"store", &f->store},
          {"steps", &f->steps},
          {"step-sleep-ms", &f->step_sleep_ms},
          {"report", &f->report},
          {"comm-timeout-s", &f->comm_timeout_s},
          {"probe-interval", &f->probe_interval},
          {"audit-drift", &f->audit_drift}};
}

// INVALID_ARGUMENT unless 0 <= rank < world_size and job and agent socket
// are given.
inline absl::Status CheckRankFlags(const RankFlags& f) {
  if (f.rank < 0 || f.rank >= f.world_size || f.job.empty() ||
      f.agent_socket.empty()) {
    return absl::InvalidArgumentError(
        "need --rank R --world-size W (0 <= R < W) --job J --agent-socket S");
  }
  return absl::OkStatus();
}

inline std::atomic<bool> g_stop_requested{false};

// Makes SIGTERM ask RunSteps to stop after the current step.
inline void StopOnSigterm() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop_requested.store(true); };
  sigaction(SIGTERM, &sa, nullptr);
}

// Runs step(0), step(1), ... step(steps - 1), sleeping `step_sleep_ms`
// (standing in for forward and backward) after each, and stops early, on
// every rank after the same step, once any rank got SIGTERM:
// `any_rank_stops(stop)` is this rank's request MAX-reduced over all ranks.
inline absl::Status RunSteps(
    int64_t steps, int step_sleep_ms,
    const std::function<absl::Status(int64_t)>& step,
    const std::function<absl::StatusOr<bool>(bool)>& any_rank_stops) {
  for (int64_t s = 0; s < steps; ++s) {
    RETURN_IF_ERROR(step(s));
    if (step_sleep_ms > 0) absl::SleepFor(absl::Milliseconds(step_sleep_ms));
    ASSIGN_OR_RETURN(const bool stop, any_rank_stops(g_stop_requested.load()));
    if (stop) break;
  }
  return absl::OkStatus();
}

// The same, reducing the stop request with `comm` in host memory.
inline absl::Status RunSteps(client::Transport& comm, int64_t steps,
                             int step_sleep_ms,
                             const std::function<absl::Status(int64_t)>& step) {
  return RunSteps(
      steps, step_sleep_ms, step,
      [&comm](bool stop_here) -> absl::StatusOr<bool> {
        int64_t stop = stop_here ? 1 : 0;
        RETURN_IF_ERROR(comm.AllReduce(
            &stop, &stop, 1, client::DataType::kInt64, client::ReduceOp::kMax));
        return stop != 0;
      });
}

// The end of a rank binary's main: 0 for OK, else 2 after printing
// "`who` `rank`: `s`" to stderr.
inline int RankExitCode(const char* who, int rank, const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << who << " " << rank << ": " << s << "\n";
  return 2;
}

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_RANK_TESTUTIL_H_
