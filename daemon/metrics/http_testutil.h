// Test helper: a minimal blocking HTTP client for scraping an HttpExposer
// (the exposer's unit test, giftd's /metrics in the integration tests and the
// daemon benchmark). One request with "Connection: close", read to EOF, the
// status line, headers and body split apart. A 2 s receive timeout makes a
// hung server fail the test instead of hanging it.
//
//   absl::StatusOr<HttpResponse> r = HttpFetch("127.0.0.1", port, "/metrics");
//   ASSERT_OK(r);
//   EXPECT_EQ(r->status_line, "HTTP/1.1 200 OK");
//   absl::StatusOr<std::string> body = HttpGetBody("127.0.0.1", port, "/");
//
// Thread safety: no shared state; call from any thread.
#ifndef GIFT_DAEMON_METRICS_HTTP_TESTUTIL_H_
#define GIFT_DAEMON_METRICS_HTTP_TESTUTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace gift::metrics {

struct HttpResponse {
  std::string status_line;                     // "HTTP/1.1 200 OK"
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A TCP connection to host:port (an IPv4 literal) with the receive timeout
// set; the socket, or -1 when it cannot connect.
inline int ConnectTcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Splits a raw response at the blank line; DATA_LOSS without one.
inline absl::StatusOr<HttpResponse> ParseHttpResponse(const std::string& raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return absl::DataLossError("no header end");
  HttpResponse response;
  response.body = raw.substr(end + 4);
  std::istringstream head(raw.substr(0, end));
  std::getline(head, response.status_line);
  absl::StripTrailingAsciiWhitespace(&response.status_line);
  for (std::string line; std::getline(head, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    absl::StripAsciiWhitespace(&value);
    response.headers[absl::AsciiStrToLower(line.substr(0, colon))] = value;
  }
  return response;
}

// One request. UNAVAILABLE when it cannot connect or send, DEADLINE_EXCEEDED
// when the read fails or times out; any HTTP status is a response.
inline absl::StatusOr<HttpResponse> HttpFetch(
    const std::string& host, int port, const std::string& path,
    const std::string& method = "GET") {
  const int fd = ConnectTcp(host, port);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("connect ", host, ":", port));
  }
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", host,
                   "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    raw.append(buf, n);
  }
  ::close(fd);
  if (n < 0) return absl::DeadlineExceededError("read failed or timed out");
  return ParseHttpResponse(raw);
}

// The body of a GET answered 200; UNAVAILABLE naming the status line for any
// other status.
inline absl::StatusOr<std::string> HttpGetBody(const std::string& host,
                                               int port,
                                               const std::string& path) {
  absl::StatusOr<HttpResponse> r = HttpFetch(host, port, path);
  if (!r.ok()) return r.status();
  if (r->status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("GET ", path, ": ", r->status_line));
  }
  return std::move(r->body);
}

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_HTTP_TESTUTIL_H_
