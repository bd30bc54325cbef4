#include "daemon/metrics/http_exposer.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/net.h"

namespace gift::metrics {
namespace {

// civetweb's worker threads and request timeout (see Start).
constexpr int kThreads = 64;
constexpr int kRequestTimeoutMs = 2000;

// A parsed "host:port": civetweb's listening_ports value, and an address on
// which this process can reach the socket (loopback for the wildcard).
struct ListenAddress {
  std::string option;  // "127.0.0.1:80", "[::1]:80", or "80" (all IPv4)
  sockaddr_storage reach{};
  socklen_t reach_len = 0;
};

absl::StatusOr<ListenAddress> ParseListen(const std::string& listen) {
  absl::StatusOr<net::HostPort> parsed = net::ParseHostPort(listen);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address \"", listen, "\": want host:port"));
  }
  std::string host = parsed->host;
  const int port = parsed->port;
  const bool bracketed = listen.front() == '[';  // "[v6]:port"
  ListenAddress out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.reach);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.reach);
  if (!bracketed && (host.empty() || host == "*" || host == "0.0.0.0")) {
    out.option = std::to_string(port);
    host = "127.0.0.1";
  } else if (!bracketed && host == "localhost") {
    host = "127.0.0.1";
  }
  if (!bracketed && inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.reach_len = sizeof(sockaddr_in);
  } else if (bracketed &&
             inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    if (mg_check_feature(8) == 0) {  // 8: USE_IPV6; Debian 12 builds without
      return absl::InvalidArgumentError(
          absl::StrCat("metrics listen address \"", listen,
                       "\": this civetweb build has no IPv6 support"));
    }
    if (IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr)) {
      v6->sin6_addr = in6addr_loopback;
    }
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out.reach_len = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address \"", listen,
                     "\": host must be an IP literal, [IPv6] or localhost"));
  }
  if (out.option.empty()) out.option = net::JoinHostPort(host, port);
  return out;
}

void SetPort(ListenAddress* address, int port) {
  if (address->reach.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&address->reach)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&address->reach)->sin6_port = htons(port);
  }
}

// Opens and closes one TCP connection (best effort).
void Poke(const ListenAddress& address) {
  int fd = socket(address.reach.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  connect(fd, reinterpret_cast<const sockaddr*>(&address.reach),
          address.reach_len);
  close(fd);
}

// civetweb reports why binding failed ("cannot bind to ...: Address
// already in use") only through its log_message callback, on the thread
// that starts it; the library's exception says only "null context". The
// messages of one start are collected here.
thread_local std::string* start_log = nullptr;

int LogMessage(const mg_connection*, const char* message) {
  if (start_log != nullptr) {
    absl::StrAppend(start_log, start_log->empty() ? "" : "; ", message);
  }
  return 1;  // handled: civetweb would print to stderr otherwise
}

}  // namespace

struct HttpExposer::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
  ListenAddress address;

  // The Exposer's destructor stops civetweb (mg_stop), which joins its
  // threads, but civetweb's master thread sees the stop flag only between
  // polls of the listening socket, and that poll's timeout is compiled into
  // libcivetweb (2 s). A connection wakes the poll, so keep poking until the
  // Exposer is gone: milliseconds, not seconds.
  ~Impl() {
    if (exposer == nullptr) return;
    std::atomic<bool> stopped{false};
    std::thread stopper([this, &stopped] {
      exposer.reset();
      stopped.store(true);
    });
    while (!stopped.load()) {
      Poke(address);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stopper.join();
  }
};

absl::StatusOr<std::unique_ptr<HttpExposer>> HttpExposer::Start(
    const std::string& listen,
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  absl::StatusOr<ListenAddress> address = ParseListen(listen);
  if (!address.ok()) return address.status();
  std::unique_ptr<HttpExposer> exposer(new HttpExposer());
  exposer->impl_ = std::make_unique<Impl>();
  Impl* impl = exposer->impl_.get();
  impl->address = *address;

  // civetweb serves one connection per worker thread, and a connection that
  // sends no request holds its worker until request_timeout_ms: a scrape
  // behind N idle connections waits about N / num_threads request
  // timeouts. So: many workers (64; each a mostly unused 1 MiB stack, see
  // thread_stack_floor.cc: the library's civetweb threads need that floor
  // too) and a short timeout (2 s for the whole request head: a scraper
  // sends it at once), so that 50 idle connections cost a scrape nothing
  // and 200 about 6 s, inside Prometheus' 10 s. No keep-alive: a scraper
  // connects per scrape, and an idle kept-alive connection would hold a
  // worker too. civetweb 1.15 has no limit on connections; connection_queue
  // bounds the accepted ones waiting for a worker (the rest wait in the
  // kernel's listen backlog, not in giftd).
  std::vector<std::string> options = {
      "listening_ports",    impl->address.option,
      "num_threads",        std::to_string(kThreads),
      "request_timeout_ms", std::to_string(kRequestTimeoutMs),
      "enable_keep_alive",  "no",
      "connection_queue",   "128",
      "listen_backlog",     "256"};
  CivetCallbacks callbacks;
  callbacks.log_message = &LogMessage;
  std::string log;
  start_log = &log;
  try {
    impl->exposer =
        std::make_unique<prometheus::Exposer>(std::move(options), &callbacks);
  } catch (const std::exception& e) {
    start_log = nullptr;
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ",
                                               listen, ": ",
                                               log.empty() ? e.what() : log));
  }
  start_log = nullptr;
  for (const auto& c : collectables) impl->exposer->RegisterCollectable(c);
  const std::vector<int> ports = impl->exposer->GetListeningPorts();
  if (ports.empty() || ports[0] <= 0) {
    return absl::InternalError(
        absl::StrCat("metrics: no bound port for ", listen));
  }
  exposer->port_ = ports[0];
  SetPort(&impl->address, ports[0]);
  return exposer;
}

HttpExposer::~HttpExposer() = default;

}  // namespace gift::metrics
