// Test helpers for daemon/coord (test-only library gift_coord_testutil):
//  * TestEtcd: a real etcd on free loopback ports and a temporary data
//    directory, started by the test and killed when the object goes (also
//    when the test fails or the test process dies: PR_SET_PDEATHSIG).
//  * Child: another program started by the test, SIGKILLed at the end.
//  * FreePort: a loopback TCP port nobody listens on right now.
//  * TestEtcdTest: a gtest fixture with a TestEtcd of its own (etcd_),
//    skipped where etcd is not installed.
//
//   class MyTest : public TestEtcdTest {};
//   TEST_F(MyTest, X) {
//     EtcdOptions o;
//     o.endpoints = {etcd_->endpoint()};
//     etcd_->Stop(); ASSERT_OK(etcd_->Restart());  // same data dir
//   }
//
// Thread safety: not thread-safe; one test thread drives each object.
#ifndef GIFT_DAEMON_COORD_TEST_ETCD_H_
#define GIFT_DAEMON_COORD_TEST_ETCD_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace gift::daemon::coord {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";
inline constexpr char kEtcdctlBinary[] = "/usr/bin/etcdctl";

absl::StatusOr<int> FreePort();

// A child process; SIGKILLed and reaped by the destructor.
class Child {
 public:
  // Starts argv[0] with argv; its stdout and stderr go to `log_path`
  // ("" keeps the test's).
  static absl::StatusOr<std::unique_ptr<Child>> Spawn(
      const std::vector<std::string>& argv, const std::string& log_path);
  ~Child();
  pid_t pid() const { return pid_; }
  bool Running();  // not exited yet (reaps it when it has)
  void Kill();     // SIGKILL and reap

 private:
  explicit Child(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// Runs a program to completion; its exit status must be 0.
absl::Status RunProgram(const std::vector<std::string>& argv);

class TestEtcd {
 public:
  static constexpr char kMissing[] =
      "/usr/bin/etcd is not installed (apt-get install etcd-server "
      "etcd-client; scripts/install-deps.sh)";
  static bool Available();
  // Starts etcd and waits until it answers (up to 30 s).
  static absl::StatusOr<std::unique_ptr<TestEtcd>> Start();
  ~TestEtcd();

  const std::string& endpoint() const { return endpoint_; }  // http://…
  int client_port() const { return client_port_; }
  // Kills etcd (SIGKILL: no goodbye to anyone) and starts it again on the
  // same ports and data directory.
  void Stop();
  absl::Status Restart();
  // etcdctl against this etcd, e.g. {"user", "add", "root:pw"}.
  absl::Status Etcdctl(const std::vector<std::string>& args);

 private:
  TestEtcd() = default;
  absl::Status Launch();

  std::string dir_;
  std::string endpoint_;
  int client_port_ = 0;
  int peer_port_ = 0;
  std::unique_ptr<Child> process_;
};

class TestEtcdTest : public ::testing::Test {
 protected:
  // Skips the test without etcd; else starts it (a fatal failure when it
  // does not answer). A fixture's own SetUp calls this first and returns
  // when IsSkipped() or HasFatalFailure().
  void SetUp() override;

  std::unique_ptr<TestEtcd> etcd_;
};

}  // namespace gift::daemon::coord

#endif  // GIFT_DAEMON_COORD_TEST_ETCD_H_
