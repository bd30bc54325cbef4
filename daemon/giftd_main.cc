// giftd: the per-node GIFT daemon. See README.md ("giftd") and
// `giftd --help`.
#include <signal.h>

#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/grpc/grpc_server.h"
#include "daemon/log.h"
#include "daemon/metrics/http_exposer.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/process_collector.h"
#include "kernels/cpu_baseline.h"

namespace gift::daemon {
namespace {

// SIGTERM/SIGINT are taken by sigwait in Run: blocked before any thread
// starts so that every thread inherits the mask. Returns them.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

// The config from the command line, or the exit code when giftd ends here
// (a bad flag: 2; --help, --help-markdown, --print-config: 0).
std::optional<int> LoadOrExit(int argc, char** argv, DaemonConfig* out) {
  absl::StatusOr<DaemonConfig> config = LoadConfig(argc, argv);
  if (!config.ok()) {
    std::cerr << "giftd: " << config.status().message() << "\n"
              << "run 'giftd --help' for the options\n";
    return 2;
  }
  if (config->help_markdown) {
    std::cout << ConfigMarkdown();
    return 0;
  }
  if (config->help) {
    std::cout << ConfigHelp();
    return 0;
  }
  if (config->print_config) {
    std::cout << FormatConfig(*config);
    return 0;
  }
  *out = *std::move(config);
  return std::nullopt;
}

// The metrics listener (none without metrics_address); false when it could
// not start (logged).
bool StartExposer(const DaemonConfig& config,
                  std::shared_ptr<metrics::Registry> registry,
                  std::shared_ptr<metrics::ProcessCollector> process_metrics,
                  std::unique_ptr<metrics::HttpExposer>* exposer) {
  if (config.metrics_address.empty()) return true;
  auto e = metrics::HttpExposer::Start(config.metrics_address,
                                       {registry, process_metrics});
  if (!e.ok()) {
    LOG_ERROR("cannot serve metrics: %s", e.status().ToString());
    return false;
  }
  *exposer = *std::move(e);
  LOG_INFO("metrics on http://%s/metrics (port %d)", config.metrics_address,
           (*exposer)->port());
  return true;
}

absl::StatusOr<std::unique_ptr<GrpcServer>> StartServer(
    const DaemonConfig& config, GrpcMetrics* grpc_metrics, Daemon* daemon) {
  GrpcServerOptions options;
  options.agent_socket = config.agent_socket;
  options.control_address = config.control_address;
  options.control_token_file = config.control_token_file;
  options.tls_cert_file = config.tls_cert_file;
  options.tls_key_file = config.tls_key_file;
  options.metrics = grpc_metrics;
  return GrpcServer::Start(options, daemon);
}

int Run(int argc, char** argv) {
  if (absl::Status cpu = kernels::CheckCpuBaseline(); !cpu.ok()) {
    std::cerr << "giftd: " << cpu.message() << "\n";
    return 1;
  }
  sigset_t signals = BlockStopSignals();
  DaemonConfig config;
  if (std::optional<int> exit = LoadOrExit(argc, argv, &config)) return *exit;
  SetLogLevel(*ParseLogLevel(config.log_level));

  // Another giftd on this socket: say so before anything here touches
  // shared memory (Daemon::Create also locks the shm prefix first).
  if (absl::Status s = CheckAgentSocket(config.agent_socket); !s.ok()) {
    LOG_ERROR("cannot start: %s", s.ToString());
    return 1;
  }
  auto registry = std::make_shared<metrics::Registry>();
  auto process_metrics = std::make_shared<metrics::ProcessCollector>();
  GrpcMetrics grpc_metrics(registry.get(), config.node);
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Create(config, registry.get());
  if (!daemon.ok()) {
    LOG_ERROR("cannot start: %s", daemon.status().ToString());
    // The coordinator refused or did not answer: a configuration error
    // (credentials, endpoints), like a bad flag.
    return absl::StartsWith(daemon.status().message(), "coordinator ") ? 2 : 1;
  }
  if (const std::string role = (*daemon)->PeerRole(); !role.empty()) {
    LOG_INFO("peer: %s", role);
  }
  std::unique_ptr<metrics::HttpExposer> exposer;
  if (!StartExposer(config, registry, process_metrics, &exposer)) return 1;
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      StartServer(config, &grpc_metrics, daemon->get());
  if (!server.ok()) {
    LOG_ERROR("cannot start the gRPC services: %s", server.status().ToString());
    return 1;
  }
  LOG_INFO("agent on unix:%s, control on %s (port %d)", config.agent_socket,
           config.control_address, (*server)->control_port());

  int sig = 0;
  sigwait(&signals, &sig);
  LOG_INFO("%s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(absl::Seconds(5));
  exposer.reset();
  (*daemon)->Stop();
  LOG_INFO("stopped");
  return 0;
}

}  // namespace
}  // namespace gift::daemon

int main(int argc, char** argv) { return gift::daemon::Run(argc, argv); }
