#include "daemon/metrics/http_exposer.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gift::metrics {
namespace {

constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";
// civetweb's worker threads and request timeout (see Start).
constexpr int kThreads = 64;
constexpr int kRequestTimeoutMs = 2000;
constexpr char kTextType[] = "text/plain; charset=utf-8";
constexpr char kIndex[] =
    "<html><head><title>giftd</title></head><body>"
    "<h1>giftd</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

// A parsed "host:port": civetweb's listening_ports value, and an address on
// which this process can reach the socket (loopback for the wildcard).
struct ListenAddress {
  std::string option;  // "127.0.0.1:80", "[::1]:80", or "80" (all IPv4)
  sockaddr_storage reach{};
  socklen_t reach_len = 0;
};

absl::StatusOr<ListenAddress> ParseListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon + 1 == listen.size() ||
      listen.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address \"", listen, "\": want host:port"));
  }
  std::string host = listen.substr(0, colon);
  ListenAddress out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.reach);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.reach);
  if (host.empty() || host == "*" || host == "0.0.0.0") {
    out.option = std::to_string(port);
    host = "127.0.0.1";
  } else if (host == "localhost") {
    host = "127.0.0.1";
  }
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.reach_len = sizeof(sockaddr_in);
  } else if (host.size() > 2 && host.front() == '[' && host.back() == ']' &&
             inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(),
                       &v6->sin6_addr) == 1) {
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
  if (out.option.empty()) out.option = absl::StrCat(host, ":", port);
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

void Respond(mg_connection* conn, int status, const char* content_type,
             std::string_view body, bool allow_get = false) {
  mg_response_header_start(conn, status);
  mg_response_header_add(conn, "Content-Type", content_type, -1);
  mg_response_header_add(conn, "Content-Length",
                         std::to_string(body.size()).c_str(), -1);
  if (allow_get) mg_response_header_add(conn, "Allow", "GET", -1);
  mg_response_header_send(conn);
  mg_write(conn, body.data(), body.size());
}

}  // namespace

struct HttpExposer::Impl {
  const Registry* registry = nullptr;
  mg_context* ctx = nullptr;
  ListenAddress address;
  // civetweb reports why binding failed ("cannot bind to ...: Address
  // already in use") only through its log; mg_start2's error text is
  // generic. Messages are kept while starting and dropped afterwards.
  std::atomic<bool> starting{true};
  std::string start_log;  // written only while `starting`, by Start's thread

  // mg_stop joins civetweb's threads, but its master thread sees the stop
  // flag only between polls of the listening socket, and that poll's
  // timeout is compiled into libcivetweb (2 s). A connection wakes the
  // poll, so keep poking until mg_stop returns: milliseconds, not seconds.
  ~Impl() {
    if (ctx == nullptr) return;
    std::atomic<bool> stopped{false};
    std::thread stopper([this, &stopped] {
      mg_stop(ctx);
      stopped.store(true);
    });
    while (!stopped.load()) {
      Poke(address);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stopper.join();
  }

  // log_message callback: civetweb would print to stderr otherwise.
  static int Log(const mg_connection* conn, const char* message) {
    const mg_context* ctx = conn ? mg_get_context(conn) : nullptr;
    auto* self = ctx ? static_cast<Impl*>(mg_get_user_data(ctx)) : nullptr;
    if (self != nullptr && self->starting.load()) {
      absl::StrAppend(&self->start_log, self->start_log.empty() ? "" : "; ",
                      message);
    }
    return 1;
  }

  // Every request lands here (begin_request), so routing is explicit and
  // civetweb never falls back to serving files.
  static int Handle(mg_connection* conn) {
    const mg_request_info* info = mg_get_request_info(conn);
    auto* self = static_cast<Impl*>(info->user_data);
    const std::string_view uri = info->local_uri ? info->local_uri : "";
    if (uri != "/metrics" && uri != "/") {
      Respond(conn, 404, kTextType, "Not found\n");
      return 404;
    }
    if (std::strcmp(info->request_method, "GET") != 0) {
      Respond(conn, 405, kTextType, "Method not allowed\n", /*allow_get=*/true);
      return 405;
    }
    if (uri == "/") {
      Respond(conn, 200, "text/html; charset=utf-8", kIndex);
    } else {
      Respond(conn, 200, kMetricsType, self->registry->Serialize());
    }
    return 200;
  }
};

absl::StatusOr<std::unique_ptr<HttpExposer>> HttpExposer::Start(
    const std::string& listen, const Registry* registry) {
  absl::StatusOr<ListenAddress> address = ParseListen(listen);
  if (!address.ok()) return address.status();
  std::unique_ptr<HttpExposer> exposer(new HttpExposer());
  exposer->impl_ = std::make_unique<Impl>();
  Impl* impl = exposer->impl_.get();
  impl->registry = registry;
  impl->address = *address;

  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &Impl::Handle;
  callbacks.log_message = &Impl::Log;
  // civetweb serves one connection per worker thread, and a connection that
  // sends no request holds its worker until request_timeout_ms: a scrape
  // behind N idle connections waits about N / num_threads request
  // timeouts. So: many workers (64; each a mostly unused 1 MiB stack, see
  // thread_stack_floor.cc) and a short timeout (2 s for the whole request
  // head: a scraper sends it at once), so that 50 idle connections cost a
  // scrape nothing and 200 about 6 s, inside Prometheus' 10 s. No
  // keep-alive: a scraper connects per scrape, and an idle kept-alive
  // connection would hold a worker too. civetweb 1.15 has no limit on
  // connections; connection_queue bounds the accepted ones waiting for a
  // worker (the rest wait in the kernel's listen backlog, not in giftd).
  const std::string threads = std::to_string(kThreads);
  const std::string timeout = std::to_string(kRequestTimeoutMs);
  const char* options[] = {"listening_ports",
                           impl->address.option.c_str(),
                           "num_threads",
                           threads.c_str(),
                           "request_timeout_ms",
                           timeout.c_str(),
                           "enable_keep_alive",
                           "no",
                           "connection_queue",
                           "128",
                           "listen_backlog",
                           "256",
                           nullptr};
  mg_init_data init = {&callbacks, impl, options};
  char error_text[256] = "";
  mg_error_data error = {nullptr, error_text, sizeof(error_text)};
  impl->ctx = mg_start2(&init, &error);
  impl->starting.store(false);
  if (impl->ctx == nullptr) {
    std::string reason = !impl->start_log.empty() ? impl->start_log
                         : error_text[0] != '\0'  ? error_text
                                                  : "civetweb failed to start";
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen, ": ", reason));
  }
  mg_server_port bound;
  if (mg_get_server_ports(impl->ctx, 1, &bound) != 1 || bound.port <= 0) {
    return absl::InternalError(
        absl::StrCat("metrics: no bound port for ", listen));
  }
  exposer->port_ = bound.port;
  SetPort(&impl->address, bound.port);
  return exposer;
}

HttpExposer::~HttpExposer() = default;

}  // namespace gift::metrics
