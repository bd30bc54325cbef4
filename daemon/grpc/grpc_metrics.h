// Request metrics of giftd's gRPC servers (DESIGN §6): a server interceptor
// that counts every finished request by service, method and status code and
// observes how long it took (a streaming call: its whole life), for the
// per-node dashboard (dashboards/gift-node.json).
//
//   gift_grpc_requests_total{node, service, method, code}
//   gift_grpc_request_duration_seconds{node, service, method}
//
//   GrpcMetrics metrics(&registry, "node-a");
//   builder.experimental().SetInterceptorCreators(metrics.Interceptors());
//
// Thread safety: thread-safe; the interceptors run on gRPC's threads.
#ifndef GIFT_DAEMON_GRPC_GRPC_METRICS_H_
#define GIFT_DAEMON_GRPC_GRPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/metrics/metrics.h"

namespace gift::daemon {

class GrpcMetrics {
 public:
  // Adds the two families to `registry`. REQUIRES: registry outlives this
  // and every server built with Interceptors(); called once per registry.
  GrpcMetrics(metrics::Registry* registry, std::string node);

  // Fresh interceptor factories for one ServerBuilder.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors();

  // "/gift.v1.Agent/Register" → {"gift.v1.Agent", "Register"}; a name
  // without that shape → {"", name}.
  static std::pair<std::string, std::string> SplitMethod(
      const std::string& full);

  // Records one finished request.
  void Record(const std::string& full_method, int code, double seconds);

 private:
  const std::string node_;
  const std::vector<double> bounds_;  // of duration_
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Histogram>& duration_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_GRPC_GRPC_METRICS_H_
