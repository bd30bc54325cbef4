// Network stand-ins for daemon/coord's tests (gift_coord_testutil):
//  * TcpForwarder: a loopback TCP proxy to a port; Cut() partitions it
//    (open connections are dropped, new ones are accepted and then left
//    silent, like a black hole); Restore() forwards again.
//  * FakeHttpServer: answers each HTTP request with whatever a handler
//    returns (raw bytes, so tests can send garbage, 500s, truncated bodies).
//
//   auto fwd = TcpForwarder::Start(etcd->client_port());
//   o.endpoints = {fwd->endpoint()};  ... fwd->Cut(); ... fwd->Restore();
//
// Thread safety: thread-safe; each runs one thread of its own.
#ifndef GIFT_DAEMON_COORD_TEST_NET_H_
#define GIFT_DAEMON_COORD_TEST_NET_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gift::daemon::coord {

class TcpForwarder {
 public:
  static absl::StatusOr<std::unique_ptr<TcpForwarder>> Start(int target_port);
  ~TcpForwarder();
  std::string endpoint() const;  // http://127.0.0.1:<port>
  void Cut();
  void Restore();

 private:
  TcpForwarder() = default;
  void Loop();

  int listen_fd_ = -1;
  int port_ = 0;
  int target_port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<bool> cut_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class FakeHttpServer {
 public:
  // Gets the request path and body; returns the whole raw response.
  using Handler = std::function<std::string(const std::string& path,
                                            const std::string& body)>;
  static absl::StatusOr<std::unique_ptr<FakeHttpServer>> Start(Handler handler);
  ~FakeHttpServer();
  std::string endpoint() const;

  // A well-formed response with `status` and `body`.
  static std::string Response(int status, const std::string& body);

 private:
  FakeHttpServer() = default;
  void Loop();
  void Serve(int fd);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gift::daemon::coord

#endif  // GIFT_DAEMON_COORD_TEST_NET_H_
