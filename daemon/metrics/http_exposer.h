// Serves prometheus-cpp collectables over HTTP with the library's civetweb
// Exposer: GET /metrics returns the text exposition (format 0.0.4) of
// everything registered; other paths 404. What giftd adds to the library:
// address checking with clear errors (the library only says "null context"),
// options so that idle or slow connections cannot starve a scrape (64
// workers, a 2 s limit on reading a request, no keep-alive; http_exposer.cc
// says why), and a prompt stop.
//
//   auto registry = std::make_shared<metrics::Registry>();
//   ASSIGN_OR_RETURN(auto exposer,
//                    HttpExposer::Start("127.0.0.1:0", {registry}));
//   int port = exposer->port();  // the bound port (useful with :0)
//
// Thread safety: Start/destruction from one thread; civetweb serves
// requests on its own threads (Collect is thread-safe).
#ifndef GIFT_DAEMON_METRICS_HTTP_EXPOSER_H_
#define GIFT_DAEMON_METRICS_HTTP_EXPOSER_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gift::metrics {

class HttpExposer {
 public:
  // listen: "host:port" (port 0 = any free port). INVALID_ARGUMENT for a
  // malformed address, UNAVAILABLE when it cannot bind (port in use). A
  // collectable that expires is skipped by later scrapes.
  static absl::StatusOr<std::unique_ptr<HttpExposer>> Start(
      const std::string& listen,
      const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables);
  ~HttpExposer();  // stops serving

  int port() const { return port_; }

 private:
  HttpExposer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_HTTP_EXPOSER_H_
