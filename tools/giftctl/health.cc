// The wire format of grpc.health.v1 (health.proto): HealthCheckRequest
// { string service = 1; } and HealthCheckResponse { ServingStatus status =
// 1; } with UNKNOWN 0, SERVING 1, NOT_SERVING 2, SERVICE_UNKNOWN 3.
#include "tools/giftctl/health.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "tools/giftctl/commands.h"

namespace gift::giftctl {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr int kServing = 1;

grpc::ByteBuffer EncodeRequest(const std::string& service) {
  google::protobuf::UnknownFieldSet request;
  request.AddLengthDelimited(1, service);
  std::string bytes;
  request.SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// The status field; UNKNOWN (0) when absent, as proto3 reads it.
int DecodeStatus(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  google::protobuf::UnknownFieldSet fields;
  fields.ParseFromString(bytes);
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.number() == 1 &&
        f.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return static_cast<int>(f.varint());
    }
  }
  return 0;
}

grpc::Status Check(const Invocation& inv, const std::string& token,
                   const std::shared_ptr<grpc::ChannelInterface>& channel,
                   int* status) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::duration<double>(inv.timeout_seconds)));
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, kCheckMethod,
                                    EncodeRequest(inv.health_service), &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status result;
  call->Finish(&response, &result, nullptr);
  void* tag;
  bool ok;
  // Finish always completes (at the latest at the deadline).
  if (!cq.Next(&tag, &ok)) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "completion queue shut");
  }
  if (result.ok()) *status = DecodeStatus(response);
  return result;
}

}  // namespace

std::string ServingStatusName(int status) {
  switch (status) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
  }
  return absl::StrCat("STATUS_", status);
}

int RunHealth(const Invocation& inv, const std::string& token,
              const std::shared_ptr<grpc::ChannelInterface>& channel,
              std::ostream& out, std::ostream& err) {
  int status = 0;
  grpc::Status result = Check(inv, token, channel, &status);
  if (!result.ok()) {
    absl::Status s = FromGrpcStatus(result);
    err << "giftctl: Health/Check: " << absl::StatusCodeToString(s.code())
        << ": " << s.message() << "\n";
    return kExitFailed;
  }
  if (inv.json) {
    out << "{\"status\": \"" << ServingStatusName(status) << "\"}\n";
  } else {
    out << ServingStatusName(status) << "\n";
  }
  return status == kServing ? kExitOk : kExitFailed;
}

}  // namespace gift::giftctl
