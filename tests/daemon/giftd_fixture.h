// The pieces of an end-to-end giftd run for the integration tests and the
// daemon benchmark: a giftd process started from a generated YAML file on
// free ports with its own shared-memory prefix, driven through the real
// giftctl binary (`--json` output parsed), and a group of rank processes
// whose per-step JSON-line reports are read back.
//
//   ASSIGN_OR_RETURN(auto giftd, Giftd::Start(paths, dir, GiftdConfig{}));
//   ASSIGN_OR_RETURN(nlohmann::json layers, giftd->CtlJson({"layers"}));
//   RankOptions ro;
//   ro.job = "job1";
//   ASSIGN_OR_RETURN(auto ranks, RankGroup::Start(paths.worker, dir,
//                                                 giftd->agent_socket(), ro));
//   ... WaitFor([&] { return ranks->MinSteps() >= 50; }, absl::Seconds(30));
//   RETURN_IF_ERROR(ranks->WaitForAll(
//       [](const nlohmann::json& l) { return l["attached"] == true; },
//       absl::Seconds(30)));
//   RETURN_IF_ERROR(ranks->Stop(absl::Seconds(20)));
//   // In a test's TearDown:
//   CleanUpRun(HasFailure(), dir, &giftd, &ranks);
//
// Thread safety: not thread-safe; one test thread drives everything.
#ifndef GIFT_TESTS_DAEMON_GIFTD_FIXTURE_H_
#define GIFT_TESTS_DAEMON_GIFTD_FIXTURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/subprocess.h"

namespace gift::testing_daemon {

// The committed data's real layers (tests/data): the fc1/fc2 of blocks 0-1.
inline const std::vector<std::string> kRealLayers = {
    "blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "blocks.1.mlp.fc1",
    "blocks.1.mlp.fc2"};

// Polls `done` every `every` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout,
             absl::Duration every = absl::Milliseconds(50));

struct GiftdConfig {
  int refresh_interval = 5;
  int staleness_limit = 40;
  int probe_interval = 2;
  int rank = 32;
  int top_k = 5;
  double min_gain = 0.05;
  // The synthetic jobs' fc2 layers gain about 0.17 on average, less on some
  // probe steps: the tests enter layers at min_gain, as written for it.
  double entry_gain = 0.05;
  int window_steps = 20;
  int poll_interval_ms = 20;
  int heartbeat_interval_ms = 200;
  int rank_timeout_ms = 2000;
  std::string log_level = "info";
  // Appended verbatim to the generated YAML.
  std::string extra_yaml;
  // The YAML's `node`. Default: "it-node".
  std::string node = "it-node";
  // Flags after `--config FILE` (e.g. the peer flags). Default: none.
  std::vector<std::string> extra_args;
  // Runs giftd and giftctl through this command, e.g. {"netns.sh", "exec",
  // "-p", PREFIX, "1"} to put them in a network namespace (it must exec
  // the binary, so that pid() stays giftd's). Default: none.
  std::vector<std::string> command_prefix;
};

class Giftd {
 public:
  // Writes `dir`/giftd.yaml (agent socket in `dir`, control and metrics on
  // free 127.0.0.1 ports, a shm prefix unique to this process and call),
  // starts giftd and waits until it serves.
  static absl::StatusOr<std::unique_ptr<Giftd>> Start(
      const std::string& giftd_binary, const std::string& giftctl_binary,
      const std::string& dir, const GiftdConfig& config);
  ~Giftd();

  // Starts a new giftd with the same config file (the old one must be
  // gone: Kill first) and waits until it serves.
  absl::Status Restart();
  // Sends `sig` and waits (10 s) for the process to end.
  absl::Status Kill(int sig);
  bool Running() { return process_.has_value() && process_->Running(); }
  pid_t pid() const { return process_ ? process_->pid() : -1; }

  // giftctl ARGS against this giftd.
  absl::StatusOr<CommandResult> Ctl(const std::vector<std::string>& args) const;
  // giftctl --json ARGS; an error unless it exits 0 with valid JSON.
  absl::StatusOr<nlohmann::json> CtlJson(
      const std::vector<std::string>& args) const;
  // GET /metrics.
  absl::StatusOr<std::string> Metrics() const;
  // Every incarnation's log so far.
  std::string Log() const;

  const std::string& config_path() const { return config_path_; }
  const std::string& agent_socket() const { return agent_socket_; }
  // Without the leading '/', as the names appear in /dev/shm.
  std::string shm_name_prefix() const { return shm_prefix_.substr(1); }
  const std::string& control_address() const { return control_address_; }
  int metrics_port() const { return metrics_port_; }

 private:
  Giftd() = default;
  absl::Status Launch();

  std::string giftd_binary_, giftctl_binary_, dir_, config_path_;
  std::vector<std::string> extra_args_, command_prefix_;
  std::string agent_socket_, shm_prefix_, control_address_;
  int metrics_port_ = 0;
  int incarnation_ = 0;
  std::optional<Subprocess> process_;
};

struct RankOptions {
  std::string job = "job";
  int world_size = 4;
  // The group runs ranks first_rank .. first_rank + count - 1 of the job
  // (one node's share). Defaults: 0 and -1 (= world_size: all of them).
  int first_rank = 0;
  int count = -1;
  // As GiftdConfig::command_prefix, for every rank. Default: none.
  std::vector<std::string> command_prefix;
  // Added to every rank's environment. Default: none.
  std::vector<std::pair<std::string, std::string>> env;
  int64_t steps = 1000000;  // effectively until Stop
  int step_sleep_ms = 10;
  int comm_timeout_s = 30;
  // Extra flags for every rank.
  std::vector<std::string> extra_args;
};

// Index i of a group is rank first_rank + i of the job.
class RankGroup {
 public:
  // Starts `count` rank_worker processes (reports and logs in `dir`).
  static absl::StatusOr<std::unique_ptr<RankGroup>> Start(
      const std::string& worker_binary, const std::string& dir,
      const std::string& agent_socket, const RankOptions& options);

  // The number of ranks in this group (all of the job's by default).
  int world_size() const { return static_cast<int>(procs_.size()); }
  Subprocess& process(int rank) { return procs_[rank]; }
  // The complete report lines of `rank` so far.
  std::vector<nlohmann::json> Report(int rank) const;
  // Fewest steps any rank has reported.
  int64_t MinSteps() const;
  // The last report line of every rank satisfies `pred`.
  bool AllLast(const std::function<bool(const nlohmann::json&)>& pred) const;
  // The highest rank whose process has ended, or -1 while all run.
  int EndedRank();
  // Polls until AllLast(pred). FAILED_PRECONDITION as soon as a rank
  // process ended (naming it), DEADLINE_EXCEEDED after `timeout` (with rank
  // 0's last report line).
  absl::Status WaitForAll(
      const std::function<bool(const nlohmann::json&)>& pred,
      absl::Duration timeout);
  // SIGTERM to index 0 (the ranks agree to stop after the same step), then
  // waits for every rank: an error naming each rank that did not exit 0.
  absl::Status Stop(absl::Duration timeout);
  // Each rank's log (stderr), for failure messages.
  std::string Logs() const;

 private:
  RankGroup() = default;
  int first_rank_ = 0;
  std::vector<Subprocess> procs_;
  std::vector<std::string> reports_;
};

// The /dev/shm objects whose names start with `prefix` (none for ""), with
// their sizes in bytes.
std::map<std::string, uint64_t> ShmObjects(const std::string& prefix);

// A test's end of a run in `dir`: on failure prints giftd's and the ranks'
// logs and keeps `dir`; then SIGKILLs ranks still running, stops giftd with
// SIGTERM (so that it unlinks its shared memory), removes what a SIGKILLed
// giftd left under its own shm prefix and, without failure, `dir`. Either
// pointer may hold null.
void CleanUpRun(bool failed, const std::string& dir,
                std::unique_ptr<Giftd>* giftd,
                std::unique_ptr<RankGroup>* ranks);

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_GIFTD_FIXTURE_H_
