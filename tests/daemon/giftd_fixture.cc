#include "tests/daemon/giftd_fixture.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/testing.h"
#include "daemon/metrics/http_testutil.h"

namespace gift::testing_daemon {
namespace {

std::vector<std::string> Prefixed(const std::vector<std::string>& prefix,
                                  std::vector<std::string> argv) {
  argv.insert(argv.begin(), prefix.begin(), prefix.end());
  return argv;
}

std::string Yaml(const GiftdConfig& c, const std::string& socket,
                 const std::string& control, int metrics_port,
                 const std::string& prefix) {
  return absl::StrCat(
      "node: ", c.node, "\n", "agent_socket: ", socket, "\n",
      "control_address: ", control, "\n",
      "metrics_address: 127.0.0.1:", metrics_port, "\n", "shm_prefix: ", prefix,
      "\n", "refresh_interval: ", c.refresh_interval, "\n",
      "staleness_limit: ", c.staleness_limit, "\n",
      "probe_interval: ", c.probe_interval, "\n", "rank: ", c.rank, "\n",
      "poll_interval_ms: ", c.poll_interval_ms, "\n",
      "heartbeat_interval_ms: ", c.heartbeat_interval_ms, "\n",
      "rank_timeout_ms: ", c.rank_timeout_ms, "\n", "log_level: ", c.log_level,
      "\n", "selection:\n", "  kind: top-k\n", "  top_k: ", c.top_k, "\n",
      "  min_gain: ", c.min_gain, "\n", "  entry_gain: ", c.entry_gain, "\n",
      "  window_steps: ", c.window_steps, "\n", c.extra_yaml);
}

}  // namespace

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout,
             absl::Duration every) {
  return gift::testing::WaitUntil(done, timeout, every);
}

absl::StatusOr<std::unique_ptr<Giftd>> Giftd::Start(
    const std::string& giftd_binary, const std::string& giftctl_binary,
    const std::string& dir, const GiftdConfig& config) {
  static std::atomic<int> counter{0};
  std::unique_ptr<Giftd> d(new Giftd());
  d->giftd_binary_ = giftd_binary;
  d->giftctl_binary_ = giftctl_binary;
  d->extra_args_ = config.extra_args;
  d->command_prefix_ = config.command_prefix;
  d->dir_ = dir;
  d->config_path_ = dir + "/giftd.yaml";
  d->agent_socket_ = dir + "/agent.sock";
  // The trailing "x" keeps prefix N from matching the names of prefix N0.
  d->shm_prefix_ = absl::StrCat("/giftit-", ::getpid(), "-", counter++, "x");
  ASSIGN_OR_RETURN(const int control_port, FreePort());
  ASSIGN_OR_RETURN(d->metrics_port_, FreePort());
  d->control_address_ = absl::StrCat("127.0.0.1:", control_port);
  std::ofstream(d->config_path_)
      << Yaml(config, d->agent_socket_, d->control_address_, d->metrics_port_,
              d->shm_prefix_);
  RETURN_IF_ERROR(d->Launch());
  return d;
}

Giftd::~Giftd() {
  if (Running()) {
    // A clean stop unlinks the shared memory; SIGKILL (in ~Subprocess) only
    // if it does not come.
    (void)process_->Signal(SIGTERM);
    (void)process_->Wait(absl::Seconds(10));
  }
}

absl::Status Giftd::Launch() {
  const std::string log = absl::StrCat(dir_, "/giftd.", incarnation_++, ".log");
  std::vector<std::string> argv = {giftd_binary_, "--config", config_path_};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  ASSIGN_OR_RETURN(Subprocess p,
                   Subprocess::Start(Prefixed(command_prefix_, argv), log));
  process_ = std::move(p);
  // Serving: the log says so (at log level info), or, at any log level, the
  // agent socket exists and giftctl status answers.
  auto serving = [&] {
    if (absl::StrContains(process_->Log(), "agent on unix:")) return true;
    if (::access(agent_socket_.c_str(), F_OK) != 0) return false;
    absl::StatusOr<CommandResult> r = Ctl({"status"});
    return r.ok() && r->exit_code == 0;
  };
  const bool ready = WaitFor([&] { return !process_->Running() || serving(); },
                             absl::Seconds(20), absl::Milliseconds(20));
  if (!ready || !process_->Running()) {
    return absl::UnavailableError(
        absl::StrCat("giftd did not come up; its log:\n", process_->Log()));
  }
  return absl::OkStatus();
}

absl::Status Giftd::Restart() {
  if (Running()) return absl::FailedPreconditionError("giftd still running");
  return Launch();
}

absl::Status Giftd::Kill(int sig) {
  if (!process_) return absl::FailedPreconditionError("no giftd");
  RETURN_IF_ERROR(process_->Signal(sig));
  return process_->Wait(absl::Seconds(10)).status();
}

absl::StatusOr<CommandResult> Giftd::Ctl(
    const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {giftctl_binary_};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(Prefixed(command_prefix_, argv),
             {{"GIFT_CONTROL_ADDRESS", control_address_}});
}

absl::StatusOr<nlohmann::json> Giftd::CtlJson(
    const std::vector<std::string>& args) const {
  std::vector<std::string> a = {"--json"};
  a.insert(a.end(), args.begin(), args.end());
  ASSIGN_OR_RETURN(CommandResult r, Ctl(a));
  const std::string what =
      absl::StrCat("giftctl --json ", absl::StrJoin(args, " "));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(what, ": exit ", r.exit_code, ": ", r.err));
  }
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat(what, ": not JSON: ", r.out));
  }
  return j;
}

absl::StatusOr<std::string> Giftd::Metrics() const {
  return metrics::HttpGetBody("127.0.0.1", metrics_port_, "/metrics");
}

std::string Giftd::Log() const {
  std::string s;
  for (int i = 0; i < incarnation_; ++i) {
    absl::StrAppend(&s, "---- giftd incarnation ", i, "\n",
                    ReadFile(absl::StrCat(dir_, "/giftd.", i, ".log")));
  }
  return s;
}

absl::StatusOr<std::unique_ptr<RankGroup>> RankGroup::Start(
    const std::string& worker_binary, const std::string& dir,
    const std::string& agent_socket, const RankOptions& o) {
  std::unique_ptr<RankGroup> g(new RankGroup());
  const int count = o.count < 0 ? o.world_size : o.count;
  g->first_rank_ = o.first_rank;
  for (int r = o.first_rank; r < o.first_rank + count; ++r) {
    const std::string base = absl::StrCat(dir, "/", o.job, ".rank", r);
    g->reports_.push_back(base + ".jsonl");
    std::vector<std::string> argv = {
        worker_binary,
        absl::StrCat("--rank=", r),
        absl::StrCat("--world-size=", o.world_size),
        "--job=" + o.job,
        "--agent-socket=" + agent_socket,
        absl::StrCat("--steps=", o.steps),
        absl::StrCat("--step-sleep-ms=", o.step_sleep_ms),
        absl::StrCat("--comm-timeout-s=", o.comm_timeout_s),
        "--report=" + g->reports_.back()};
    argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
    ASSIGN_OR_RETURN(Subprocess p,
                     Subprocess::Start(Prefixed(o.command_prefix, argv),
                                       base + ".log", o.env));
    g->procs_.push_back(std::move(p));
  }
  return g;
}

std::vector<nlohmann::json> RankGroup::Report(int rank) const {
  std::vector<nlohmann::json> out;
  const std::string text = ReadFile(reports_[rank]);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // The last line may be half written: only whole lines parse.
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!line.empty() && !j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

int64_t RankGroup::MinSteps() const {
  int64_t steps = INT64_MAX;
  for (int r = 0; r < world_size(); ++r) {
    // Counting lines is enough (and cheaper than parsing them all).
    const std::string text = ReadFile(reports_[r]);
    steps =
        std::min<int64_t>(steps, std::count(text.begin(), text.end(), '\n'));
  }
  return steps;
}

absl::Status RankGroup::Stop(absl::Duration timeout) {
  if (procs_[0].Running()) (void)procs_[0].Signal(SIGTERM);
  std::string bad;
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < world_size(); ++r) {
    absl::StatusOr<int> code =
        procs_[r].Wait(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!code.ok()) {
      (void)procs_[r].Signal(SIGKILL);
      (void)procs_[r].Wait(absl::Seconds(5));
      absl::StrAppend(&bad, " rank ", first_rank_ + r, ": ",
                      code.status().message(), ";");
    } else if (*code != 0) {
      absl::StrAppend(&bad, " rank ", first_rank_ + r, " exited ", *code, ";");
    }
  }
  if (bad.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("ranks failed:", bad, "\n", Logs()));
}

bool RankGroup::AllLast(
    const std::function<bool(const nlohmann::json&)>& pred) const {
  for (int r = 0; r < world_size(); ++r) {
    const std::vector<nlohmann::json> rep = Report(r);
    if (rep.empty() || !pred(rep.back())) return false;
  }
  return true;
}

int RankGroup::EndedRank() {
  int ended = -1;
  for (int r = 0; r < world_size(); ++r) {
    if (!procs_[r].Running()) ended = r;
  }
  return ended;
}

absl::Status RankGroup::WaitForAll(
    const std::function<bool(const nlohmann::json&)>& pred,
    absl::Duration timeout) {
  int ended = -1;
  const bool ok = WaitFor(
      [&] {
        ended = EndedRank();
        return ended >= 0 || AllLast(pred);
      },
      timeout);
  if (ended >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", first_rank_ + ended, " ended"));
  }
  if (!ok) {
    const std::vector<nlohmann::json> rep = Report(0);
    return absl::DeadlineExceededError(
        absl::StrCat("timed out; rank 0's last report: ",
                     rep.empty() ? "none" : rep.back().dump()));
  }
  return absl::OkStatus();
}

std::string RankGroup::Logs() const {
  std::string s;
  for (int r = 0; r < world_size(); ++r) {
    absl::StrAppend(&s, "---- rank ", first_rank_ + r, " log\n",
                    procs_[r].Log());
  }
  return s;
}

std::map<std::string, uint64_t> ShmObjects(const std::string& prefix) {
  std::map<std::string, uint64_t> out;
  if (prefix.empty()) return out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename();
    if (absl::StartsWith(name, prefix)) out[name] = e.file_size();
  }
  return out;
}

void CleanUpRun(bool failed, const std::string& dir,
                std::unique_ptr<Giftd>* giftd,
                std::unique_ptr<RankGroup>* ranks) {
  if (failed) {
    if (*giftd) std::cerr << (*giftd)->Log();
    if (*ranks) std::cerr << (*ranks)->Logs();
    std::cerr << "(files kept in " << dir << ")\n";
  }
  ranks->reset();  // SIGKILLs ranks still running
  std::string prefix;
  if (*giftd) prefix = (*giftd)->shm_name_prefix();
  giftd->reset();  // SIGTERM, so it unlinks its shared memory
  // What a SIGKILLed giftd left behind (only this run's own prefix).
  for (const auto& [name, bytes] : ShmObjects(prefix)) {
    std::filesystem::remove("/dev/shm/" + name);
  }
  if (!failed) std::filesystem::remove_all(dir);
}

}  // namespace gift::testing_daemon
