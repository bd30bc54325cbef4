// Serves a metrics Registry over HTTP with civetweb: GET /metrics returns
// Registry::Serialize() as "text/plain; version=0.0.4; charset=utf-8";
// GET / a short index; anything else 404. Separate from the registry so the
// registry never includes HTTP code. Idle or slow connections cannot starve
// a scrape: 64 workers, a 2 s limit on reading a request, no keep-alive
// (http_exposer.cc says why).
//
//   ASSIGN_OR_RETURN(auto exposer, HttpExposer::Start("127.0.0.1:0",
//                                                     &registry));
//   int port = exposer->port();  // the bound port (useful with :0)
//
// Thread safety: Start/destruction from one thread; civetweb serves
// requests on its own threads (Serialize is thread-safe).
#ifndef GIFT_DAEMON_METRICS_HTTP_EXPOSER_H_
#define GIFT_DAEMON_METRICS_HTTP_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/metrics/registry.h"

namespace gift::metrics {

class HttpExposer {
 public:
  // listen: "host:port" (port 0 = any free port). INVALID_ARGUMENT for a
  // malformed address, UNAVAILABLE when it cannot bind (port in use).
  // REQUIRES: registry outlives the exposer.
  static absl::StatusOr<std::unique_ptr<HttpExposer>> Start(
      const std::string& listen, const Registry* registry);
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
