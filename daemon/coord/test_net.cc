#include "daemon/coord/test_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gift::daemon::coord {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A listening socket on 127.0.0.1:0; *port gets the port.
absl::StatusOr<int> Listen(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Loopback(0);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("listen: ", strerror(errno)));
  }
  *port = ntohs(a.sin_port);
  return fd;
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Moves what `from` has to `to`; false when either side is done.
bool Pump(int from, int to) {
  char buf[16384];
  ssize_t n = read(from, buf, sizeof(buf));
  return n > 0 && WriteAll(to, buf, static_cast<size_t>(n));
}

}  // namespace

// ---- TcpForwarder
// ------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpForwarder>> TcpForwarder::Start(
    int target_port) {
  std::unique_ptr<TcpForwarder> f(new TcpForwarder);
  auto fd = Listen(&f->port_);
  if (!fd.ok()) return fd.status();
  f->listen_fd_ = *fd;
  f->target_port_ = target_port;
  if (pipe(f->wake_) != 0) return absl::InternalError(strerror(errno));
  f->thread_ = std::thread([p = f.get()] { p->Loop(); });
  return f;
}

TcpForwarder::~TcpForwarder() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

std::string TcpForwarder::endpoint() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void TcpForwarder::Cut() {
  cut_ = true;
  (void)!write(wake_[1], "x", 1);
}

void TcpForwarder::Restore() {
  cut_ = false;
  (void)!write(wake_[1], "x", 1);
}

void TcpForwarder::Loop() {
  std::vector<std::pair<int, int>> pairs;  // client, etcd
  std::vector<int> held;                   // accepted while cut
  auto close_all = [](auto& fds, auto each) {
    for (auto& e : fds) each(e);
    fds.clear();
  };
  while (!stop_) {
    std::vector<pollfd> p = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    for (auto [a, b] : pairs) {
      p.push_back({a, POLLIN, 0});
      p.push_back({b, POLLIN, 0});
    }
    if (poll(p.data(), p.size(), 200) < 0 && errno != EINTR) return;
    if (p[1].revents != 0) {
      char buf[64];
      (void)!read(wake_[0], buf, sizeof(buf));
      if (cut_) {
        close_all(pairs, [](auto& e) { close(e.first), close(e.second); });
      } else {
        close_all(held, [](int fd) { close(fd); });
      }
      continue;  // `p` no longer matches `pairs`
    }
    const size_t polled = pairs.size();
    if (p[0].revents & POLLIN) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0 && cut_) {
        held.push_back(c);  // never answered: the far side is unreachable
      } else if (c >= 0) {
        int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a = Loopback(target_port_);
        if (t >= 0 &&
            connect(t, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
          pairs.emplace_back(c, t);
        } else {
          close(c);
          if (t >= 0) close(t);
        }
      }
    }
    std::vector<std::pair<int, int>> live;
    for (size_t i = 0; i < polled; ++i) {
      auto [a, b] = pairs[i];
      bool ok = true;
      if (p[2 + 2 * i].revents != 0) ok = Pump(a, b);
      if (ok && p[3 + 2 * i].revents != 0) ok = Pump(b, a);
      if (ok) {
        live.emplace_back(a, b);
      } else {
        close(a);
        close(b);
      }
    }
    for (size_t i = polled; i < pairs.size(); ++i) live.push_back(pairs[i]);
    pairs = std::move(live);
  }
  close_all(pairs, [](auto& e) { close(e.first), close(e.second); });
  close_all(held, [](int fd) { close(fd); });
}

// ---- FakeHttpServer
// ----------------------------------------------------------

absl::StatusOr<std::unique_ptr<FakeHttpServer>> FakeHttpServer::Start(
    Handler handler) {
  std::unique_ptr<FakeHttpServer> s(new FakeHttpServer);
  s->handler_ = std::move(handler);
  auto fd = Listen(&s->port_);
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = *fd;
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

FakeHttpServer::~FakeHttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string FakeHttpServer::endpoint() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

std::string FakeHttpServer::Response(int status, const std::string& body) {
  return absl::StrCat(
      "HTTP/1.1 ", status, " X\r\nContent-Type: application/json\r\n",
      "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

void FakeHttpServer::Loop() {
  while (!stop_) {
    pollfd p = {listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void FakeHttpServer::Serve(int fd) {
  std::string in;
  char buf[4096];
  size_t header_end;
  while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
  size_t length = 0;
  for (absl::string_view line :
       absl::StrSplit(in.substr(0, header_end), "\r\n")) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (absl::AsciiStrToLower(kv.first) == "content-length") {
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &length);
    }
  }
  while (in.size() < header_end + 4 + length) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
  std::vector<std::string> first =
      absl::StrSplit(in.substr(0, in.find("\r\n")), ' ');
  const std::string out = handler_(first.size() > 1 ? first[1] : "",
                                   in.substr(header_end + 4, length));
  WriteAll(fd, out.data(), out.size());
}

}  // namespace gift::daemon::coord
