// A child process for the daemon integration tests and the daemon benchmark:
// fork/exec of a binary with its stdout and stderr redirected to files,
// signalled and reaped by pid only (never by name), and killed with SIGKILL
// when the object goes away while it still runs. Also a blocking "run a
// command and capture its output" helper for the CLI (giftctl), and a free
// TCP port picker.
//
//   absl::StatusOr<Subprocess> d = Subprocess::Start(
//       {GIFT_GIFTD, "--config", config}, dir + "/giftd.log");
//   ...
//   d->Signal(SIGKILL);
//   absl::StatusOr<int> code = d->Wait(absl::Seconds(5));
//
// Thread safety: a Subprocess is used by one thread; Run and FreePort are
// thread-safe (no shared state) as long as no thread changes the
// environment meanwhile.
#ifndef GIFT_TESTS_DAEMON_SUBPROCESS_H_
#define GIFT_TESTS_DAEMON_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing.h"

namespace gift::testing_daemon {

class Subprocess {
 public:
  // Starts argv[0] (a path) with argv; stdout and stderr both go to
  // `log_file` (truncated), or to /dev/null when it is empty. `env` adds or
  // overrides environment variables.
  static absl::StatusOr<Subprocess> Start(
      const std::vector<std::string>& argv, const std::string& log_file,
      const std::vector<std::pair<std::string, std::string>>& env = {});

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // SIGKILLs and reaps the child if it still runs.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  const std::string& log_file() const { return log_file_; }
  // Still running (not yet reaped, and waitpid WNOHANG says so).
  bool Running();
  absl::Status Signal(int sig);
  // Waits up to `timeout` for the child to end. The exit code, or 128 +
  // signal when it was killed; DEADLINE_EXCEEDED if it still runs.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // The log file's contents so far.
  std::string Log() const;

 private:
  Subprocess(pid_t pid, std::string log_file)
      : pid_(pid), log_file_(std::move(log_file)) {}
  void Reap(int status);

  pid_t pid_ = -1;
  std::string log_file_;
  bool done_ = false;
  int exit_code_ = -1;
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs argv to completion (SIGKILL after `timeout`, then exit_code 137) and
// captures stdout and stderr separately; `env` as for Subprocess::Start.
absl::StatusOr<CommandResult> Run(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env = {},
    absl::Duration timeout = absl::Seconds(20));

// A TCP port on 127.0.0.1 that was free a moment ago: a random one below
// the kernel's ephemeral range (which outgoing connections draw from), that
// bind accepted. Another test may still take it before it is used; good
// enough for tests on one machine.
absl::StatusOr<int> FreePort();

// A fresh directory under $TMPDIR (or /tmp) named prefix_XXXXXX: the
// shared test helper's (common/testing.h).
using ::gift::testing::MakeTempDir;

// The first executable `name` in $PATH, or "".
std::string FindOnPath(const std::string& name);

// Whole file, "" when it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_SUBPROCESS_H_
