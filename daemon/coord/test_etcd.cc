#include "daemon/coord/test_etcd.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/coord/http_post.h"

namespace gift::daemon::coord {

absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::InternalError(strerror(errno));
  }
  close(fd);
  return ntohs(a.sin_port);
}

absl::StatusOr<std::unique_ptr<Child>> Child::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd =
        open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
      return absl::InternalError(absl::StrCat(log_path, ": ", strerror(errno)));
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {  // only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  return std::unique_ptr<Child>(new Child(pid));
}

Child::~Child() { Kill(); }

bool Child::Running() {
  if (pid_ <= 0) return false;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == 0) return true;
  pid_ = -1;
  return false;
}

void Child::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::Status RunProgram(const std::vector<std::string>& argv) {
  auto child = Child::Spawn(argv, "");
  if (!child.ok()) return child.status();
  int status = 0;
  pid_t pid = (*child)->pid();
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("'", absl::StrJoin(argv, " "),
                                            "' failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

bool TestEtcd::Available() { return access(kEtcdBinary, X_OK) == 0; }

absl::StatusOr<std::unique_ptr<TestEtcd>> TestEtcd::Start() {
  std::unique_ptr<TestEtcd> etcd(new TestEtcd);
  absl::StatusOr<std::string> dir = gift::testing::MakeTempDir("gift_etcd");
  if (!dir.ok()) return dir.status();
  etcd->dir_ = *std::move(dir);
  absl::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a port may be taken
    auto client = FreePort();
    auto peer = FreePort();
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    etcd->client_port_ = *client;
    etcd->peer_port_ = *peer;
    etcd->endpoint_ = absl::StrCat("http://127.0.0.1:", *client);
    s = etcd->Launch();
    if (s.ok()) return etcd;
    etcd->Stop();
    std::filesystem::remove_all(etcd->dir_ + "/data");
  }
  return s;
}

absl::Status TestEtcd::Launch() {
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
  const std::string name =
      absl::StrCat("gift-test-", getpid(), "-", client_port_);
  auto child = Child::Spawn({kEtcdBinary,
                             "--name",
                             name,
                             "--data-dir",
                             dir_ + "/data",
                             "--listen-client-urls",
                             endpoint_,
                             "--advertise-client-urls",
                             endpoint_,
                             "--listen-peer-urls",
                             peer,
                             "--initial-advertise-peer-urls",
                             peer,
                             "--initial-cluster",
                             absl::StrCat(name, "=", peer),
                             "--auth-token-ttl",
                             "2",
                             "--logger",
                             "zap",
                             "--log-outputs",
                             "stderr"},
                            dir_ + "/etcd.log");
  if (!child.ok()) return child.status();
  process_ = std::move(*child);
  bool ready = false;
  gift::testing::WaitUntil(
      [&] {
        if (!process_->Running()) return true;  // gone: not ready
        auto r = HttpPost({endpoint_ + "/v3/kv/range", R"({"key":"Lw=="})", "",
                           "", "", "", absl::Seconds(1)});
        ready = r.ok() && (r->status == 200 || r->status == 400);
        return ready;
      },
      absl::Seconds(30), absl::Milliseconds(100));
  if (ready) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "etcd did not answer at ", endpoint_, "; see ", dir_, "/etcd.log"));
}

TestEtcd::~TestEtcd() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

void TestEtcd::Stop() {
  if (process_ != nullptr) process_->Kill();
  process_.reset();
}

absl::Status TestEtcd::Restart() {
  Stop();
  return Launch();
}

absl::Status TestEtcd::Etcdctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kEtcdctlBinary, "--endpoints", endpoint_};
  argv.insert(argv.end(), args.begin(), args.end());
  setenv("ETCDCTL_API", "3", 1);
  return RunProgram(argv);
}

void TestEtcdTest::SetUp() {
  if (!TestEtcd::Available()) GTEST_SKIP() << TestEtcd::kMissing;
  absl::StatusOr<std::unique_ptr<TestEtcd>> etcd = TestEtcd::Start();
  ASSERT_OK(etcd);
  etcd_ = *std::move(etcd);
}

}  // namespace gift::daemon::coord
