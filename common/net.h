// Network addresses as giftd, libgift and the tools spell them:
// "host:port", IPv6 hosts in brackets ("[::1]:50151"), and the one answer
// to "is this host loopback?" (which decides whether giftd's Control service
// may run without a bearer token). Every "host:port" in the code base is
// split and joined here, so "[v6]:port" is understood the same everywhere.
//
//   absl::StatusOr<net::HostPort> hp = net::ParseHostPort("[::1]:50151");
//   // hp->host == "::1" (no brackets), hp->port == 50151
//   std::string a = net::JoinHostPort(hp->host, 8080);  // "[::1]:8080"
//   if (!net::IsLoopbackAddress(control_address)) { /* require a token */ }
//
// A caller with its own error texts for a bad host and a bad port splits
// first (SplitHostPort) and checks the port after (ParsePort).
//
// Syntax only: no name is resolved, no socket is opened. The host is not
// checked beyond the brackets (any name without ':' is a host); callers that
// want an IP literal or a DNS name check it themselves.
//
// Thread safety: pure functions, safe from any thread.
#ifndef GIFT_COMMON_NET_H_
#define GIFT_COMMON_NET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::net {

// The two parts of "host:port" as text. `host` is without the brackets of
// "[v6]:port" and may be empty (":80"); `port` is unchecked (see ParsePort).
struct SplitAddress {
  std::string host;
  std::string port;
};

// Splits at the last ':' ("h:80"), or after the closing bracket
// ("[::1]:80"). INVALID_ARGUMENT, naming `address`, when there is no ':'
// (missing port), when an unbracketed host holds a ':' (IPv6 without
// brackets), when a bracket is unmatched or misplaced, or when the brackets
// are empty ("[]:80").
absl::StatusOr<SplitAddress> SplitHostPort(absl::string_view address);

// A port number: 1 to 5 decimal digits, 0..65535 (0: any free port; callers
// that need a real port refuse 0 themselves). No sign, no spaces.
// INVALID_ARGUMENT otherwise, naming `port`.
absl::StatusOr<int> ParsePort(absl::string_view port);

struct HostPort {
  std::string host;  // without brackets; may be empty (":80")
  int port = 0;      // 0..65535
};

// SplitHostPort then ParsePort: INVALID_ARGUMENT naming `address` for a
// missing or bad port as for a bad host.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// "host:port", the host in brackets when it holds a ':' (an IPv6 literal):
// JoinHostPort("::1", 80) == "[::1]:80", JoinHostPort("h", 80) == "h:80".
// The inverse of ParseHostPort. REQUIRES: 0 <= port <= 65535.
std::string JoinHostPort(absl::string_view host, int port);

// True for a host that only this machine can reach:
//   * "localhost", in any case (taken at its word, not resolved),
//   * an IPv4 literal in 127.0.0.0/8 ("127.0.0.1", "127.1.2.3"),
//   * the IPv6 literal ::1 in any spelling ("::1", "0:0:0:0:0:0:0:1"),
//     with or without brackets.
// Anything else is not loopback: other names (even ones that resolve to
// 127.0.0.1), the wildcards ("", "0.0.0.0", "::"), and IPv4-mapped
// addresses ("::ffff:127.0.0.1").
bool IsLoopbackHost(absl::string_view host);

// IsLoopbackHost of the host of "host:port"; false when `address` does not
// split (SplitHostPort).
bool IsLoopbackAddress(absl::string_view address);

// True for a host that means "every interface": "" (":80"), the IPv4
// literal 0.0.0.0 and the IPv6 unspecified address ("::" in any spelling,
// with or without brackets). A listener bound there cannot be called back at
// that address.
bool IsWildcardHost(absl::string_view host);

}  // namespace gift::net

#endif  // GIFT_COMMON_NET_H_
