#include "daemon/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "daemon/grpc/grpc_services.h"

namespace gift::daemon {
namespace {

constexpr char kAgentServiceName[] = "gift.v1.Agent";
constexpr char kControlServiceName[] = "gift.v1.Control";

// The Control bearer token; "" when none is configured (loopback only).
absl::StatusOr<std::string> ReadToken(const GrpcServerOptions& options) {
  if (options.control_token_file.empty()) {
    if (!net::IsLoopbackAddress(options.control_address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "control_address ", options.control_address,
          " is not loopback: a bearer token file (control_token_file) is "
          "required"));
    }
    return std::string();
  }
  ASSIGN_OR_RETURN(std::string token,
                   ReadFile(options.control_token_file, kMaxTokenFileBytes,
                            "control_token_file"));
  absl::StripTrailingAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control_token_file ", options.control_token_file, " is empty"));
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ControlCredentials(
    const GrpcServerOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file must be set together");
  }
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(
      pair.cert_chain,
      ReadFile(options.tls_cert_file, kMaxPemFileBytes, "tls_cert_file"));
  ASSIGN_OR_RETURN(
      pair.private_key,
      ReadFile(options.tls_key_file, kMaxPemFileBytes, "tls_key_file"));
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(ssl);
}

// mkdir -p with mode 0700 for every directory created here (existing ones
// are left alone: the operator chose their mode).
absl::Status MakeParentDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create directory ", dir, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// True when a process accepts connections on the unix socket at `path`.
bool SocketIsLive(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool live =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

// Leaves `path` free to bind: creates its directory, removes a stale socket
// (one nobody listens on, left by a crashed giftd). A live socket or any
// other file there is an error, never deleted.
absl::Status PrepareSocketPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("agent_socket is empty");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent_socket ", path, " is longer than ",
                     sizeof(sockaddr_un::sun_path) - 1, " bytes"));
  }
  RETURN_IF_ERROR(MakeParentDirs(path));
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent_socket ", path, " exists and is not a socket"));
  }
  RETURN_IF_ERROR(CheckAgentSocket(path));
  if (unlink(path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot remove stale agent_socket ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Process-wide gRPC settings that every server built afterwards picks up;
// neither call is thread-safe, hence once.
void InitGrpcPlugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

void SetServing(grpc::Server* server, const char* service) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", true);
  health->SetServingStatus(service, true);
}

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(DaemonCore* core, const std::string& token,
                 GrpcMetrics* metrics)
      : metrics_(metrics),
        agent_(core, &drain_),
        control_(core, &drain_, token) {}
  ~GrpcServerImpl() override { Shutdown(absl::Seconds(1)); }

  absl::Status StartAgent(const std::string& socket_path);
  absl::Status StartControl(
      const std::string& address,
      const std::shared_ptr<grpc::ServerCredentials>& credentials);

  int control_port() const override { return control_port_; }
  void Shutdown(absl::Duration deadline) override;

 private:
  // Interceptors of a builder about to be built (none without metrics).
  void AddMetrics(grpc::ServerBuilder& builder) {
    if (metrics_ != nullptr) {
      builder.experimental().SetInterceptorCreators(metrics_->Interceptors());
    }
  }

  GrpcMetrics* const metrics_;
  internal::DrainSignal drain_;
  internal::AgentService agent_;
  internal::ControlService control_;
  // Declared after the services: a server must go before its services.
  std::unique_ptr<grpc::Server> agent_server_;
  std::unique_ptr<grpc::Server> control_server_;
  std::string socket_path_;  // set once this server owns the socket file
  int control_port_ = 0;
  bool shut_down_ = false;
};

absl::Status GrpcServerImpl::StartAgent(const std::string& socket_path) {
  RETURN_IF_ERROR(PrepareSocketPath(socket_path));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&agent_);
  AddMetrics(builder);
  agent_server_ = builder.BuildAndStart();
  if (agent_server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", socket_path));
  }
  socket_path_ = socket_path;
  // Owner only: any local process that can connect could register ranks.
  if (chmod(socket_path.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("chmod 0600 ", socket_path, ": ", strerror(errno)));
  }
  SetServing(agent_server_.get(), kAgentServiceName);
  return absl::OkStatus();
}

absl::Status GrpcServerImpl::StartControl(
    const std::string& address,
    const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second giftd would then share the
  // port silently instead of failing to bind.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, credentials, &control_port_);
  builder.RegisterService(&control_);
  AddMetrics(builder);
  control_server_ = builder.BuildAndStart();
  if (control_server_ == nullptr || control_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on control_address ", address));
  }
  SetServing(control_server_.get(), kControlServiceName);
  return absl::OkStatus();
}

void GrpcServerImpl::Shutdown(absl::Duration deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  grpc::Server* servers[] = {control_server_.get(), agent_server_.get()};
  for (grpc::Server* server : servers) {
    if (server == nullptr || server->GetHealthCheckService() == nullptr) {
      continue;
    }
    server->GetHealthCheckService()->SetServingStatus(false);
  }
  drain_.Notify();  // ends watch streams and store waits now
  const auto when = absl::ToChronoTime(absl::Now() + deadline);
  for (grpc::Server* server : servers) {
    if (server != nullptr) server->Shutdown(when);
  }
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
}

}  // namespace

absl::Status CheckAgentSocket(const std::string& path) {
  if (path.size() < sizeof(sockaddr_un::sun_path) && SocketIsLive(path)) {
    return absl::UnavailableError(
        absl::StrCat("agent_socket ", path, " is in use by a running process"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const GrpcServerOptions& options, DaemonCore* core) {
  if (options.control_address.empty()) {
    return absl::InvalidArgumentError("control_address is empty");
  }
  // Every option is checked before anything is bound or removed.
  ASSIGN_OR_RETURN(std::string token, ReadToken(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ControlCredentials(options));
  InitGrpcPlugins();
  auto server = std::make_unique<GrpcServerImpl>(core, token, options.metrics);
  RETURN_IF_ERROR(server->StartAgent(options.agent_socket));
  RETURN_IF_ERROR(server->StartControl(options.control_address, credentials));
  return server;
}

}  // namespace gift::daemon
