#include "bench/allreduce/rank_launcher.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gift::bench {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(5);

void KillRunning(const std::vector<pid_t>& pids, std::vector<RankExit>& exits) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    ::kill(pids[r], SIGKILL);
    exits[r].killed = true;
  }
}

// Reaps every child in `pids` that has exited; marks it 0 in `pids`.
// Returns true when one of them failed.
bool ReapExited(std::vector<pid_t>& pids, std::vector<RankExit>& exits) {
  bool failed = false;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    int status = 0;
    const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
    if (got != pids[r]) continue;
    pids[r] = 0;
    if (WIFEXITED(status)) exits[r].exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exits[r].term_signal = WTERMSIG(status);
    failed |= exits[r].exit_code != 0;
  }
  return failed;
}

bool AnyRunning(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<RankExit>> LaunchRanks(
    const std::vector<std::vector<std::string>>& argvs,
    absl::Duration deadline) {
  std::vector<pid_t> pids(argvs.size(), 0);
  std::vector<RankExit> exits(argvs.size());
  for (size_t r = 0; r < argvs.size(); ++r) {
    std::vector<std::string> args = argvs[r];
    std::vector<char*> c_args;
    for (std::string& a : args) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execvp(c_args[0], c_args.data());
      ::_exit(127);
    }
    if (pid < 0) {
      const int err = errno;
      KillRunning(pids, exits);
      while (AnyRunning(pids)) ReapExited(pids, exits);
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
    }
    pids[r] = pid;
  }
  const absl::Time end = absl::Now() + deadline;
  bool killed = false;
  while (AnyRunning(pids)) {
    const bool failed = ReapExited(pids, exits);
    if (!killed && (failed || absl::Now() > end)) {
      KillRunning(pids, exits);
      killed = true;
    }
    if (AnyRunning(pids)) absl::SleepFor(kPoll);
  }
  return exits;
}

std::string DescribeExits(const std::vector<RankExit>& exits) {
  std::vector<std::string> parts;
  for (size_t r = 0; r < exits.size(); ++r) {
    const RankExit& e = exits[r];
    parts.push_back(e.term_signal != 0
                        ? absl::StrCat("rank ", r, ": signal ", e.term_signal,
                                       e.killed ? " (killed)" : "")
                        : absl::StrCat("rank ", r, ": exit ", e.exit_code));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace gift::bench
