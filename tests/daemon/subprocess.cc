#include "tests/daemon/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/multiprocess/harness.h"

namespace gift::testing_daemon {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int OpenLog(const std::string& path) {
  const char* p = path.empty() ? "/dev/null" : path.c_str();
  return ::open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// fork + exec with stdout -> out_fd, stderr -> err_fd. Everything the child
// touches is prepared before fork: the parent is multi-threaded.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv_in,
                            const std::vector<std::string>& env_in, int out_fd,
                            int err_fd) {
  if (argv_in.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<std::string> argv_s = argv_in, env_s = env_in;
  std::vector<char*> argv = CStrings(argv_s), envp = CStrings(env_s);
  const pid_t pid = ::fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(
    const std::vector<std::string>& argv, const std::string& log_file,
    const std::vector<std::pair<std::string, std::string>>& env) {
  const int fd = OpenLog(log_file);
  if (fd < 0) return Errno(absl::StrCat("open ", log_file));
  absl::StatusOr<pid_t> pid =
      Spawn(argv, multiprocess::MergeEnvironment(env), fd, fd);
  ::close(fd);
  if (!pid.ok()) return pid.status();
  return Subprocess(*pid, log_file);
}

Subprocess::Subprocess(Subprocess&& other) noexcept {
  *this = std::move(other);
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = std::exchange(other.pid_, -1);
    log_file_ = std::move(other.log_file_);
    done_ = other.done_;
    exit_code_ = other.exit_code_;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !done_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Subprocess::Reap(int status) {
  done_ = true;
  exit_code_ = DecodeStatus(status);
}

bool Subprocess::Running() {
  if (pid_ <= 0 || done_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) Reap(status);
  return !done_;
}

absl::Status Subprocess::Signal(int sig) {
  if (pid_ <= 0 || done_) {
    return absl::FailedPreconditionError("process already ended");
  }
  if (::kill(pid_, sig) != 0) return Errno("kill");
  return absl::OkStatus();
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (!gift::testing::WaitUntil([&] { return !Running(); }, timeout,
                                absl::Milliseconds(5))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
  }
  if (!done_) return absl::FailedPreconditionError("no process");
  return exit_code_;
}

std::string Subprocess::Log() const { return ReadFile(log_file_); }

absl::StatusOr<CommandResult> Run(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env,
    absl::Duration timeout) {
  absl::StatusOr<std::string> dir = MakeTempDir("gift_cmd");
  if (!dir.ok()) return dir.status();
  const std::string out_path = *dir + "/out", err_path = *dir + "/err";
  const int out = OpenLog(out_path), err = OpenLog(err_path);
  absl::StatusOr<pid_t> pid =
      (out < 0 || err < 0)
          ? Errno("open")
          : Spawn(argv, multiprocess::MergeEnvironment(env), out, err);
  if (out >= 0) ::close(out);
  if (err >= 0) ::close(err);
  CommandResult result;
  if (pid.ok()) {
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (::waitpid(*pid, &status, WNOHANG) != *pid) {
      if (absl::Now() >= deadline) {
        ::kill(*pid, SIGKILL);
        ::waitpid(*pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    result.exit_code = DecodeStatus(status);
    result.out = ReadFile(out_path);
    result.err = ReadFile(err_path);
  }
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir->c_str());
  if (!pid.ok()) return pid.status();
  return result;
}

namespace {

// The low end of the kernel's ephemeral range (outgoing connections take
// their local ports there); 32768, Linux's default, when it cannot be read.
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(f >> low) || low <= 10000) return 32768;
  return low;
}

// Binds 127.0.0.1:port and closes: OK when nobody holds it now.
bool Bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

absl::StatusOr<int> FreePort() {
  // Below the ephemeral range: a port bind(0) handed out is one the kernel
  // may give any outgoing connection (gRPC's, etcd's) before the daemon
  // listens on it ("cannot listen on 127.0.0.1:55843" in CI). Random, so
  // that tests running side by side rarely try the same one. Never twice in
  // one process: two calls before anything listens (a daemon's control and
  // metrics ports) once drew the same port ("cannot listen on control_address
  // 127.0.0.1:28038" after metrics took it, CI).
  static std::mutex mu;
  static std::mt19937 rng(std::random_device{}() ^ ::getpid());
  static std::set<int>* handed_out = new std::set<int>();
  const int low = 10000, high = EphemeralLow();
  for (int i = 0; i < 200; ++i) {
    std::lock_guard<std::mutex> lock(mu);
    const int port = std::uniform_int_distribution<int>(low, high - 1)(rng);
    if (handed_out->count(port) == 0 && Bindable(port)) {
      handed_out->insert(port);
      return port;
    }
  }
  return absl::UnavailableError(absl::StrFormat(
      "no free TCP port on 127.0.0.1 in [%d, %d) after 200 tries", low, high));
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gift::testing_daemon
