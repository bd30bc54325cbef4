#include "daemon/grpc/grpc_server.h"

#include <gmock/gmock.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/grpc/fake_core.h"
#include "gift/v1/agent.grpc.pb.h"
#include "gift/v1/control.grpc.pb.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// ---- Generic calls for services whose stubs are not generated here ---------

grpc::ByteBuffer ToBuffer(const google::protobuf::UnknownFieldSet& fields) {
  std::string bytes;
  fields.SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// UnknownFieldSet can be neither copied nor moved, hence the out-parameter.
void FromBuffer(const grpc::ByteBuffer& buffer,
                google::protobuf::UnknownFieldSet* fields) {
  grpc::Slice slice;
  buffer.DumpToSingleSlice(&slice);
  fields->ParseFromArray(slice.begin(), static_cast<int>(slice.size()));
}

void Await(grpc::CompletionQueue* cq, bool* ok) {
  void* tag;
  ASSERT_TRUE(cq->Next(&tag, ok));
}

// grpc.health.v1.Health/Check; returns HealthCheckResponse.status
// (1 SERVING, 2 NOT_SERVING).
absl::StatusOr<int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service) {
  google::protobuf::UnknownFieldSet request;
  request.AddLengthDelimited(1, service);  // HealthCheckRequest.service
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check",
                                    ToBuffer(request), &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, nullptr);
  bool ok;
  Await(&cq, &ok);
  if (!status.ok()) return FromGrpcStatus(status);
  google::protobuf::UnknownFieldSet fields;
  FromBuffer(response, &fields);
  return fields.field_count() == 0 ? 0
                                   : static_cast<int>(fields.field(0).varint());
}

// Service names listed by grpc.reflection.v1alpha's list_services.
std::vector<std::string> ReflectedServices(
    const std::shared_ptr<grpc::Channel>& channel) {
  google::protobuf::UnknownFieldSet request;
  request.AddLengthDelimited(7, "*");  // ServerReflectionRequest.list_services
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  bool ok;
  call->StartCall(nullptr);
  Await(&cq, &ok);
  call->Write(ToBuffer(request), nullptr);
  Await(&cq, &ok);
  call->WritesDone(nullptr);
  Await(&cq, &ok);
  grpc::ByteBuffer response;
  call->Read(&response, nullptr);
  Await(&cq, &ok);
  std::vector<std::string> names;
  if (!ok) return names;
  grpc::Status status;
  call->Finish(&status, nullptr);
  Await(&cq, &ok);
  // ServerReflectionResponse.list_services_response (6) { service (1) {
  // name (1) } }.
  google::protobuf::UnknownFieldSet top;
  FromBuffer(response, &top);
  for (int i = 0; i < top.field_count(); ++i) {
    if (top.field(i).number() != 6) continue;
    google::protobuf::UnknownFieldSet list;
    list.ParseFromString(top.field(i).length_delimited());
    for (int j = 0; j < list.field_count(); ++j) {
      google::protobuf::UnknownFieldSet service;
      service.ParseFromString(list.field(j).length_delimited());
      names.push_back(service.field(0).length_delimited());
    }
  }
  return names;
}

// ---- Fixture ---------------------------------------------------------------

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    // A directory giftd must create (0700) itself.
    options_.agent_socket = dir_ + "/run/agent.sock";
    options_.control_address = "127.0.0.1:0";
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(1));
  }

  void StartServer() {
    absl::StatusOr<std::unique_ptr<GrpcServer>> server =
        GrpcServer::Start(options_, &core_);
    ASSERT_OK(server);
    server_ = *std::move(server);
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::shared_ptr<grpc::Channel> AgentChannel() {
    return grpc::CreateChannel("unix:" + options_.agent_socket,
                               grpc::InsecureChannelCredentials());
  }
  std::shared_ptr<grpc::Channel> ControlChannel() {
    return grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->control_port()),
        grpc::InsecureChannelCredentials());
  }

  grpc::Status GetStatus(const std::string& authorization,
                         v1::GetStatusResponse* response) {
    grpc::ClientContext context;
    if (!authorization.empty()) {
      context.AddMetadata("authorization", authorization);
    }
    return v1::Control::NewStub(ControlChannel())
        ->GetStatus(&context, v1::GetStatusRequest(), response);
  }

  gift::testing::TempDir tmp_{"giftd-grpc"};
  std::string dir_;
  GrpcServerOptions options_;
  FakeCore core_;
  std::unique_ptr<GrpcServer> server_;
};

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// ---- Agent -----------------------------------------------------------------

TEST_F(GrpcServerTest, AgentRegistersAndHeartbeatsOverOwnerOnlySocket) {
  StartServer();
  EXPECT_EQ(ModeOf(options_.agent_socket), 0600);
  EXPECT_EQ(ModeOf(dir_ + "/run"), 0700);

  auto agent = v1::Agent::NewStub(AgentChannel());
  v1::RegisterRequest request;
  request.set_rank(3);
  request.set_layout_version(1);
  v1::RegisterResponse registered;
  grpc::ClientContext c1;
  ASSERT_TRUE(agent->Register(&c1, request, &registered).ok());
  EXPECT_EQ(registered.session_id(), "s3");

  v1::HeartbeatRequest beat;
  beat.set_session_id("s3");
  beat.set_step(41);
  v1::HeartbeatResponse beat_response;
  grpc::ClientContext c2;
  ASSERT_TRUE(agent->Heartbeat(&c2, beat, &beat_response).ok());
  EXPECT_EQ(beat_response.plan_epoch(), 42);
}

TEST_F(GrpcServerTest, CoreErrorsReachTheClientWithCodeAndMessage) {
  StartServer();
  v1::RegisterRequest request;
  request.set_layout_version(7);
  v1::RegisterResponse response;
  grpc::ClientContext c1;
  grpc::Status status =
      v1::Agent::NewStub(AgentChannel())->Register(&c1, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "layout version 7 != daemon's 1");

  v1::SetRefreshIntervalResponse k;
  grpc::ClientContext c2;
  status = v1::Control::NewStub(ControlChannel())
               ->SetRefreshInterval(&c2, v1::SetRefreshIntervalRequest(), &k);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "steps must be >= 1, got 0");
}

// Every finished request is counted by service, method and code, and
// timed, on both servers.
TEST_F(GrpcServerTest, RequestsAreCountedByMethodAndCode) {
  metrics::Registry registry;
  GrpcMetrics metrics(&registry, "n0");
  options_.metrics = &metrics;
  StartServer();
  v1::RegisterRequest request;
  request.set_layout_version(7);  // FakeCore refuses it
  v1::RegisterResponse response;
  grpc::ClientContext c1;
  v1::Agent::NewStub(AgentChannel())->Register(&c1, request, &response);
  v1::GetStatusResponse status;
  ASSERT_TRUE(GetStatus("", &status).ok());
  // The server records a call once it is closed, which may be just after
  // the client has its answer.
  std::string text;
  gift::testing::WaitUntil(
      [&] {
        text = metrics::Serialize(registry);
        return absl::StrContains(text, "GetStatus\"} 1") &&
               absl::StrContains(text, "FAILED_PRECONDITION");
      },
      absl::Seconds(10), absl::Milliseconds(5));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "gift_grpc_requests_total{code=\"FAILED_PRECONDITION\","
                        "method=\"Register\",node=\"n0\","
                        "service=\"gift.v1.Agent\"} 1"));
  EXPECT_THAT(text, ::testing::HasSubstr("gift_grpc_requests_total{code=\"OK\","
                                         "method=\"GetStatus\",node=\"n0\","
                                         "service=\"gift.v1.Control\"} 1"));
  EXPECT_THAT(text,
              ::testing::HasSubstr("gift_grpc_request_duration_seconds_count{"
                                   "method=\"GetStatus\",node=\"n0\","
                                   "service=\"gift.v1.Control\"} 1"));
}

TEST(GrpcMetricsTest, SplitsFullMethodNames) {
  EXPECT_EQ(
      GrpcMetrics::SplitMethod("/gift.v1.Agent/Register"),
      std::make_pair(std::string("gift.v1.Agent"), std::string("Register")));
  EXPECT_EQ(GrpcMetrics::SplitMethod("odd"),
            std::make_pair(std::string(""), std::string("odd")));
}

TEST_F(GrpcServerTest, StoreGetWaitsForTheKeyWithBoundedWait) {
  StartServer();
  auto agent = v1::Agent::NewStub(AgentChannel());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(150));  // longer than one poll slice
    v1::StoreSetRequest set;
    set.set_key("nccl-id");
    set.set_value("xyz");
    v1::StoreSetResponse unused;
    grpc::ClientContext context;
    EXPECT_TRUE(agent->StoreSet(&context, set, &unused).ok());
  });
  v1::StoreGetRequest get;
  get.set_key("nccl-id");
  get.set_timeout_ms(60000);
  v1::StoreGetResponse got;
  grpc::ClientContext context;
  grpc::Status status = agent->StoreGet(&context, get, &got);
  setter.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.value(), "xyz");
  EXPECT_GT(core_.largest_max_wait(), absl::ZeroDuration());
  EXPECT_LE(core_.largest_max_wait(), absl::Seconds(30));

  get.set_key("missing");
  get.set_timeout_ms(0);
  grpc::ClientContext once;
  status = agent->StoreGet(&once, get, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(status.error_message(), "key missing");
}

TEST_F(GrpcServerTest, ShutdownEndsAWaitingStoreGet) {
  StartServer();
  grpc::Status status;
  std::thread waiter([&] {
    v1::StoreGetRequest get;
    get.set_key("never");
    get.set_timeout_ms(600000);
    v1::StoreGetResponse got;
    grpc::ClientContext context;
    status = v1::Agent::NewStub(AgentChannel())->StoreGet(&context, get, &got);
  });
  while (core_.largest_max_wait() == absl::ZeroDuration()) {
    absl::SleepFor(absl::Milliseconds(5));  // until the call is in the core
  }
  server_->Shutdown(absl::Seconds(30));
  waiter.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
}

// ---- Socket file handling --------------------------------------------------

TEST_F(GrpcServerTest, StaleSocketIsReplacedAndShutdownRemovesIt) {
  std::filesystem::create_directories(dir_ + "/run");
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, options_.agent_socket.c_str(),
               sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);  // a crashed daemon's leftover: the file stays, nobody listens
  ASSERT_TRUE(std::filesystem::exists(options_.agent_socket));

  StartServer();
  EXPECT_EQ(ModeOf(options_.agent_socket), 0600);
  EXPECT_EQ(HealthCheck(AgentChannel(), "gift.v1.Agent").value_or(-1), 1);
  server_->Shutdown(absl::Seconds(1));
  EXPECT_FALSE(std::filesystem::exists(options_.agent_socket));
  server_->Shutdown(absl::Seconds(1));  // idempotent
}

TEST_F(GrpcServerTest, LiveSocketOrOtherFileIsNeverReplaced) {
  StartServer();
  FakeCore other_core;
  EXPECT_THAT(GrpcServer::Start(options_, &other_core),
              StatusIs(absl::StatusCode::kUnavailable));
  // The running server still owns and serves its socket.
  EXPECT_EQ(HealthCheck(AgentChannel(), "").value_or(-1), 1);

  options_.agent_socket = WriteFile("plain-file", "data");
  EXPECT_THAT(GrpcServer::Start(options_, &other_core),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(std::filesystem::exists(options_.agent_socket));
}

TEST_F(GrpcServerTest, ControlPortInUseIsUnavailableAndCleansUp) {
  StartServer();
  GrpcServerOptions second = options_;
  second.agent_socket = dir_ + "/second.sock";
  second.control_address = absl::StrCat("127.0.0.1:", server_->control_port());
  FakeCore other_core;
  EXPECT_THAT(GrpcServer::Start(second, &other_core),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(std::filesystem::exists(second.agent_socket));
  v1::GetStatusResponse response;
  EXPECT_TRUE(GetStatus("", &response).ok());
  EXPECT_EQ(other_core.control_calls(), 0);
}

TEST_F(GrpcServerTest, DestructorShutsDownAndRemovesTheSocket) {
  StartServer();
  server_.reset();
  EXPECT_FALSE(std::filesystem::exists(options_.agent_socket));
}

// ---- Control: transport and authentication ----------------------------------

TEST_F(GrpcServerTest, ControlGetStatusOverLoopbackTcp) {
  StartServer();
  EXPECT_GT(server_->control_port(), 0);
  v1::GetStatusResponse response;
  grpc::Status status = GetStatus("", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.node(), "fake-node");
}

TEST_F(GrpcServerTest, TokenFileRequiresTheBearerToken) {
  options_.control_token_file = WriteFile("token", "s3cret\n");
  StartServer();
  v1::GetStatusResponse response;
  for (const char* bad : {"", "Bearer wrong!", "Bearer s3cre", "s3cret",
                          "Bearer s3cret ", "bearer s3cret"}) {
    grpc::Status status = GetStatus(bad, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_EQ(status.error_message(), "missing or invalid bearer token");
  }
  EXPECT_EQ(core_.control_calls(), 0);  // rejected before the core
  grpc::Status status = GetStatus("Bearer s3cret", &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(core_.control_calls(), 1);

  // Every Control method is guarded, streaming included.
  grpc::ClientContext context;
  auto stream = v1::Control::NewStub(ControlChannel())
                    ->WatchTelemetry(&context, v1::WatchTelemetryRequest());
  v1::TelemetryUpdate update;
  EXPECT_FALSE(stream->Read(&update));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(GrpcServerTest, OffLoopbackNeedsATokenFile) {
  for (const char* address : {"0.0.0.0:0", "[::]:0", ":0", "10.1.2.3:7070"}) {
    options_.control_address = address;
    absl::StatusOr<std::unique_ptr<GrpcServer>> server =
        GrpcServer::Start(options_, &core_);
    EXPECT_THAT(server, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(server.status().message(),
              absl::StrCat("control_address ", address,
                           " is not loopback: a bearer token file "
                           "(control_token_file) is required"));
  }
  EXPECT_FALSE(std::filesystem::exists(options_.agent_socket));

  options_.control_address = "0.0.0.0:0";
  options_.control_token_file = WriteFile("token", "t0k");
  StartServer();
  v1::GetStatusResponse response;
  EXPECT_TRUE(GetStatus("Bearer t0k", &response).ok());
}

TEST_F(GrpcServerTest, LoopbackAddressesNeedNoToken) {
  for (const char* address : {"localhost:0", "[::1]:0", "127.0.0.1:0"}) {
    options_.control_address = address;
    absl::StatusOr<std::unique_ptr<GrpcServer>> server =
        GrpcServer::Start(options_, &core_);
    // [::1] may be unavailable where IPv6 is off; that is a bind failure,
    // never the token check.
    EXPECT_THAT(
        server.status().code(),
        ::testing::AnyOf(absl::StatusCode::kOk, absl::StatusCode::kUnavailable))
        << address << ": " << server.status();
  }
}

TEST_F(GrpcServerTest, BadCredentialFilesAreInvalidArgument) {
  options_.control_token_file = WriteFile("empty-token", " \n\t\n");
  EXPECT_THAT(GrpcServer::Start(options_, &core_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options_.control_token_file = dir_ + "/no-such-token";
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(options_, &core_);
  EXPECT_THAT(server, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(server.status().message(), HasSubstr("no-such-token"));

  options_.control_token_file.clear();
  options_.tls_cert_file = WriteFile("cert.pem", "x");
  EXPECT_THAT(GrpcServer::Start(options_, &core_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options_.tls_key_file = dir_ + "/no-such-key.pem";
  server = GrpcServer::Start(options_, &core_);
  EXPECT_THAT(server, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(server.status().message(), HasSubstr("no-such-key.pem"));
  EXPECT_FALSE(std::filesystem::exists(options_.agent_socket));
}

TEST_F(GrpcServerTest, ServesTlsWithTheGivenCertificate) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "openssl CLI not installed";
  }
  const std::string key = dir_ + "/key.pem", cert = dir_ + "/cert.pem";
  const std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost "
      "-keyout ",
      key, " -out ", cert, " -days 1 >/dev/null 2>&1");
  ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
  options_.tls_cert_file = cert;
  options_.tls_key_file = key;
  options_.control_token_file = WriteFile("token", "t0k");
  StartServer();

  std::ifstream in(cert);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), {});
  auto channel =
      grpc::CreateChannel(absl::StrCat("localhost:", server_->control_port()),
                          grpc::SslCredentials(ssl));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer t0k");
  v1::GetStatusResponse response;
  grpc::Status status = v1::Control::NewStub(channel)->GetStatus(
      &context, v1::GetStatusRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.node(), "fake-node");

  // A plaintext client cannot talk to the TLS port.
  grpc::ClientContext plain_context;
  plain_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  plain_context.AddMetadata("authorization", "Bearer t0k");
  EXPECT_FALSE(
      v1::Control::NewStub(ControlChannel())
          ->GetStatus(&plain_context, v1::GetStatusRequest(), &response)
          .ok());
}

// ---- Health and reflection
// ---------------------------------------------------

TEST_F(GrpcServerTest, HealthServiceReportsServing) {
  StartServer();
  EXPECT_EQ(HealthCheck(ControlChannel(), "").value_or(-1), 1);
  EXPECT_EQ(HealthCheck(ControlChannel(), "gift.v1.Control").value_or(-1), 1);
  EXPECT_EQ(HealthCheck(AgentChannel(), "").value_or(-1), 1);
  EXPECT_EQ(HealthCheck(AgentChannel(), "gift.v1.Agent").value_or(-1), 1);
  EXPECT_THAT(HealthCheck(ControlChannel(), "no.such.Service"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(GrpcServerTest, ReflectionListsTheServices) {
  StartServer();
  EXPECT_THAT(
      ReflectedServices(ControlChannel()),
      ::testing::IsSupersetOf({"gift.v1.Control", "grpc.health.v1.Health"}));
  EXPECT_THAT(ReflectedServices(AgentChannel()),
              ::testing::Contains("gift.v1.Agent"));
}

// ---- WatchTelemetry
// ----------------------------------------------------------

TEST_F(GrpcServerTest, WatchTelemetryStreamsUntilTheClientCancels) {
  StartServer();
  grpc::ClientContext context;
  v1::WatchTelemetryRequest request;
  request.set_interval_ms(50);
  auto stream =
      v1::Control::NewStub(ControlChannel())->WatchTelemetry(&context, request);
  std::vector<int64_t> steps;
  v1::TelemetryUpdate update;
  while (steps.size() < 3 && stream->Read(&update)) {
    steps.push_back(update.status().step());
  }
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_LT(steps[0], steps[1]);
  EXPECT_LT(steps[1], steps[2]);
  context.TryCancel();
  while (stream->Read(&update)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(GrpcServerTest, WatchTelemetryRejectsABadInterval) {
  StartServer();
  auto control = v1::Control::NewStub(ControlChannel());
  for (int interval : {-1, 10, 49, 60001}) {
    grpc::ClientContext context;
    v1::WatchTelemetryRequest request;
    request.set_interval_ms(interval);
    auto stream = control->WatchTelemetry(&context, request);
    v1::TelemetryUpdate update;
    EXPECT_FALSE(stream->Read(&update));
    grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("interval_ms"));
  }
}

TEST_F(GrpcServerTest, ShutdownEndsAnOpenWatchPromptly) {
  StartServer();
  grpc::ClientContext context;
  v1::WatchTelemetryRequest request;
  request.set_interval_ms(60000);  // would hold a thread for a minute
  auto stream =
      v1::Control::NewStub(ControlChannel())->WatchTelemetry(&context, request);
  v1::TelemetryUpdate update;
  ASSERT_TRUE(stream->Read(&update));  // the first update comes at once
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(30));
  // Woken by the drain signal, not cut off by the deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_FALSE(stream->Read(&update));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
  EXPECT_FALSE(std::filesystem::exists(options_.agent_socket));
}

}  // namespace
}  // namespace gift::daemon
