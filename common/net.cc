#include "common/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gift::net {
namespace {

absl::Status Bad(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("address '", address, "': ", why));
}

// `host` without the brackets of "[v6]", if it has both.
absl::string_view Unbracketed(absl::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

bool ParseV4(absl::string_view host, in_addr* out) {
  return inet_pton(AF_INET, std::string(host).c_str(), out) == 1;
}

bool ParseV6(absl::string_view host, in6_addr* out) {
  return inet_pton(AF_INET6, std::string(host).c_str(), out) == 1;
}

}  // namespace

absl::StatusOr<SplitAddress> SplitHostPort(absl::string_view address) {
  SplitAddress out;
  absl::string_view rest;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) {
      return Bad(address, "missing ']' (want [IPv6]:port)");
    }
    if (close == 1) return Bad(address, "empty host in brackets");
    out.host = std::string(address.substr(1, close - 1));
    rest = address.substr(close + 1);
    if (rest.empty()) return Bad(address, "missing port (want [IPv6]:port)");
    if (rest.front() != ':') {
      return Bad(address, "want [IPv6]:port, ':' after ']'");
    }
    rest.remove_prefix(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return Bad(address, "missing port (want host:port)");
    }
    out.host = std::string(address.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return Bad(address, "IPv6 hosts must be in brackets ([v6]:port)");
    }
    rest = address.substr(colon + 1);
  }
  if (out.host.find_first_of("[]") != std::string::npos) {
    return Bad(address, "misplaced '[' or ']'");
  }
  out.port = std::string(rest);
  return out;
}

absl::StatusOr<int> ParsePort(absl::string_view port) {
  int p = -1;
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      port.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!digits || !absl::SimpleAtoi(port, &p) || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be a number in 0..65535 (got '", port, "')"));
  }
  return p;
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  absl::StatusOr<SplitAddress> split = SplitHostPort(address);
  if (!split.ok()) return split.status();
  absl::StatusOr<int> port = ParsePort(split->port);
  if (!port.ok()) return Bad(address, port.status().message());
  return HostPort{std::move(split->host), *port};
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

bool IsLoopbackHost(absl::string_view host) {
  host = Unbracketed(host);
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4;
  if (ParseV4(host, &v4)) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return ParseV6(host, &v6) && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::StatusOr<SplitAddress> split = SplitHostPort(address);
  return split.ok() && IsLoopbackHost(split->host);
}

bool IsWildcardHost(absl::string_view host) {
  host = Unbracketed(host);
  if (host.empty()) return true;
  in_addr v4;
  if (ParseV4(host, &v4)) return v4.s_addr == htonl(INADDR_ANY);
  in6_addr v6;
  return ParseV6(host, &v6) && IN6_IS_ADDR_UNSPECIFIED(&v6);
}

}  // namespace gift::net
