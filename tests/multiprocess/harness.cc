#include "tests/multiprocess/harness.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing.h"

extern char** environ;

namespace gift::multiprocess {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

std::string ReportPath(const std::string& out_dir, int rank) {
  return absl::StrCat(out_dir, "/rank", rank, ".txt");
}

// The environment of one rank: ours, minus the names we set, plus ours.
std::vector<std::string> RankEnvironment(const LaunchOptions& options, int rank,
                                         const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", absl::StrCat(rank)},
      {"WORLD_SIZE", absl::StrCat(options.world_size)},
      {"GIFT_STORE_DIR", dir + "/store"},
      {"GIFT_OUT_DIR", dir + "/out"},
  };
  set.insert(set.end(), options.env.begin(), options.env.end());
  return MergeEnvironment(set);
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void Record(int status, RankResult& r) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
}

}  // namespace

absl::StatusOr<RunResult> RunRanks(const LaunchOptions& options) {
  if (options.binary.empty() || options.world_size < 1) {
    return absl::InvalidArgumentError("RunRanks: binary and world_size >= 1");
  }
  absl::StatusOr<std::string> made = gift::testing::MakeTempDir("gift_mp");
  if (!made.ok()) return made.status();
  const std::string dir = *std::move(made);
  std::error_code ec;
  std::filesystem::create_directory(dir + "/store", ec);
  std::filesystem::create_directory(dir + "/out", ec);

  // Everything the children need is built before fork: after it, a child of
  // this (multi-threaded) process may only exec.
  std::vector<std::string> argv_s = {options.binary};
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv = CStrings(argv_s);
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < options.world_size; ++r) {
    envs.push_back(RankEnvironment(options, r, dir));
  }

  RunResult run;
  run.ranks.resize(options.world_size);
  std::vector<pid_t> pids(options.world_size, -1);
  const absl::Time start = absl::Now();
  for (int r = 0; r < options.world_size; ++r) {
    run.ranks[r].rank = r;
    std::vector<char*> envp = CStrings(envs[r]);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (pid < 0) {
      for (int k = 0; k < r; ++k) {
        ::kill(pids[k], SIGKILL);
        ::waitpid(pids[k], nullptr, 0);
      }
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    pids[r] = pid;
  }

  int running = options.world_size;
  const absl::Time deadline = start + options.deadline;
  while (running > 0) {
    for (int r = 0; r < options.world_size; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        Record(status, run.ranks[r]);
        run.ranks[r].elapsed = absl::Now() - start;
        pids[r] = -1;
        --running;
      }
    }
    if (running == 0) break;
    if (absl::Now() >= deadline) {
      for (int r = 0; r < options.world_size; ++r) {
        if (pids[r] < 0) continue;
        ::kill(pids[r], SIGKILL);
        int status = 0;
        ::waitpid(pids[r], &status, 0);
        Record(status, run.ranks[r]);
        run.ranks[r].killed_at_deadline = true;
        run.ranks[r].elapsed = absl::Now() - start;
        pids[r] = -1;
      }
      break;
    }
    absl::SleepFor(kPollInterval);
  }
  run.elapsed = absl::Now() - start;

  for (int r = 0; r < options.world_size; ++r) {
    std::ifstream in(ReportPath(dir + "/out", r));
    std::stringstream ss;
    ss << in.rdbuf();
    run.ranks[r].report = ss.str();
  }
  if (!options.keep_dir) std::filesystem::remove_all(dir, ec);
  return run;
}

std::string Describe(const RunResult& run) {
  std::string s =
      absl::StrCat("run of ", absl::FormatDuration(run.elapsed), ":");
  for (const RankResult& r : run.ranks) {
    absl::StrAppend(
        &s, " [rank ", r.rank, " exit=", r.exit_code,
        r.term_signal ? absl::StrCat(" signal=", r.term_signal) : "",
        r.killed_at_deadline ? " killed" : "", " after ",
        absl::FormatDuration(r.elapsed), " report=\"", r.report, "\"]");
  }
  return s;
}

absl::StatusOr<RankEnv> RankEnvFromEnvironment() {
  RankEnv env;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  const char* store = std::getenv("GIFT_STORE_DIR");
  const char* out = std::getenv("GIFT_OUT_DIR");
  if (rank == nullptr || world == nullptr || store == nullptr ||
      out == nullptr || !absl::SimpleAtoi(rank, &env.rank) ||
      !absl::SimpleAtoi(world, &env.world_size) || env.rank < 0 ||
      env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        "RANK, WORLD_SIZE, GIFT_STORE_DIR and GIFT_OUT_DIR must be set "
        "(0 <= RANK < WORLD_SIZE); run this binary through RunRanks");
  }
  env.store_dir = store;
  env.out_dir = out;
  return env;
}

absl::Status WriteRankReport(const RankEnv& env, absl::string_view text) {
  const std::string path = ReportPath(env.out_dir, env.rank);
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::vector<std::string> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool overridden = false;
    for (const auto& [name, value] : set) {
      overridden |= absl::StartsWith(*e, name + "=");
    }
    if (!overridden) env.emplace_back(*e);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

}  // namespace gift::multiprocess
