#include "client/daemon_store.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "gift/v1/agent.grpc.pb.h"

namespace gift::client {
namespace {

// Margin on top of a Get's own timeout for the RPC deadline.
constexpr absl::Duration kRpcSlack = absl::Seconds(5);

}  // namespace

struct DaemonStore::Impl {
  std::string job_id;
  std::unique_ptr<v1::Agent::Stub> stub;

  void Deadline(grpc::ClientContext* ctx, absl::Duration d) const {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
  }
};

DaemonStore::DaemonStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DaemonStore::~DaemonStore() = default;

absl::StatusOr<std::unique_ptr<DaemonStore>> DaemonStore::Connect(
    const std::string& agent_socket, const std::string& job_id) {
  if (agent_socket.empty() || job_id.empty()) {
    return absl::InvalidArgumentError(
        "DaemonStore: agent socket and job id must be set");
  }
  auto impl = std::make_unique<Impl>();
  impl->job_id = job_id;
  impl->stub = v1::Agent::NewStub(grpc::CreateChannel(
      "unix:" + agent_socket, grpc::InsecureChannelCredentials()));
  return std::unique_ptr<DaemonStore>(new DaemonStore(std::move(impl)));
}

absl::Status DaemonStore::Set(absl::string_view key, absl::string_view value) {
  v1::StoreSetRequest req;
  req.set_job_id(impl_->job_id);
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  v1::StoreSetResponse resp;
  grpc::ClientContext ctx;
  impl_->Deadline(&ctx, kRpcSlack);
  return FromGrpcStatus(impl_->stub->StoreSet(&ctx, req, &resp), "StoreSet");
}

absl::StatusOr<std::string> DaemonStore::Get(absl::string_view key,
                                             absl::Duration timeout) {
  v1::StoreGetRequest req;
  req.set_job_id(impl_->job_id);
  req.set_key(std::string(key));
  req.set_timeout_ms(
      absl::ToInt64Milliseconds(std::max(timeout, absl::ZeroDuration())));
  v1::StoreGetResponse resp;
  grpc::ClientContext ctx;
  impl_->Deadline(&ctx, timeout + kRpcSlack);
  RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->StoreGet(&ctx, req, &resp), "StoreGet"));
  return resp.value();
}

absl::Status DaemonStore::Wait(const std::vector<std::string>& keys,
                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    RETURN_IF_ERROR(
        Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()))
            .status());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DaemonStore::Add(absl::string_view key, int64_t delta) {
  v1::StoreAddRequest req;
  req.set_job_id(impl_->job_id);
  req.set_key(std::string(key));
  req.set_delta(delta);
  v1::StoreAddResponse resp;
  grpc::ClientContext ctx;
  impl_->Deadline(&ctx, kRpcSlack);
  RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->StoreAdd(&ctx, req, &resp), "StoreAdd"));
  return resp.value();
}

}  // namespace gift::client
