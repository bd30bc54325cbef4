#include "daemon/grpc/grpc_metrics.h"

#include <grpcpp/support/interceptor.h>
#include <grpcpp/support/status.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gift::daemon {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

// One per call: notes the start and the status the server sends, records
// both when the call is done.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(GrpcMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = methods->GetSendStatus().error_code();
      sent_status_ = true;
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_CLOSE) &&
        sent_status_ && !recorded_) {
      recorded_ = true;
      metrics_->Record(method_, code_,
                       absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  GrpcMetrics* const metrics_;
  const std::string method_;
  const absl::Time start_;
  int code_ = 0;
  bool sent_status_ = false;
  bool recorded_ = false;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(GrpcMetrics* metrics)
      : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(metrics_, info->method());
  }

 private:
  GrpcMetrics* const metrics_;
};

}  // namespace

GrpcMetrics::GrpcMetrics(metrics::Registry* registry, std::string node)
    : node_(std::move(node)),
      bounds_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
               0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      requests_(prometheus::BuildCounter()
                    .Name("gift_grpc_requests_total")
                    .Help("gRPC requests handled, by service, method and "
                          "status code.")
                    .Register(*registry)),
      duration_(prometheus::BuildHistogram()
                    .Name("gift_grpc_request_duration_seconds")
                    .Help("Time to handle a gRPC request (a streaming call: "
                          "its whole life).")
                    .Register(*registry)) {}

std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
GrpcMetrics::Interceptors() {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      out;
  out.push_back(std::make_unique<MetricsInterceptorFactory>(this));
  return out;
}

std::pair<std::string, std::string> GrpcMetrics::SplitMethod(
    const std::string& full) {
  const size_t slash = full.rfind('/');
  if (full.empty() || full[0] != '/' || slash == 0 ||
      slash == std::string::npos) {
    return {"", full};
  }
  return {full.substr(1, slash - 1), full.substr(slash + 1)};
}

void GrpcMetrics::Record(const std::string& full_method, int code,
                         double seconds) {
  auto [service, method] = SplitMethod(full_method);
  const std::string code_name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  requests_
      .Add({{"node", node_},
            {"service", service},
            {"method", method},
            {"code", code_name}})
      .Increment();
  duration_
      .Add({{"node", node_}, {"service", service}, {"method", method}}, bounds_)
      .Observe(seconds);
}

}  // namespace gift::daemon
