// One HTTP(S) POST of a JSON body through libcurl, for EtcdClient (internal
// to daemon/coord). A transport failure (no connection, timeout, TLS error,
// a truncated or oversized answer) is UNAVAILABLE naming the URL; any HTTP
// status comes back as it is, for the caller to judge.
//
// Thread safety: thread-safe (each call uses its own curl handle).
#ifndef GIFT_DAEMON_COORD_HTTP_POST_H_
#define GIFT_DAEMON_COORD_HTTP_POST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gift::daemon::coord {

struct HttpRequest {
  std::string url;
  std::string body;
  std::string authorization;  // the Authorization header; "" for none
  std::string ca_file, cert_file, key_file;  // TLS; "" for the defaults
  absl::Duration timeout = absl::Seconds(2);
};

struct HttpResponse {
  long status = 0;  // NOLINT(runtime/int): libcurl's type
  std::string body;
};

// The most bytes of an answer HttpPost keeps; a longer one is an error.
inline constexpr size_t kMaxResponseBytes = 16 << 20;

absl::StatusOr<HttpResponse> HttpPost(const HttpRequest& request);

}  // namespace gift::daemon::coord

#endif  // GIFT_DAEMON_COORD_HTTP_POST_H_
