#include "tools/giftctl/commands.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/grpc_status.h"
#include "tools/giftctl/format.h"

namespace gift::giftctl {
namespace {

// A token is a line; a CA bundle of a few hundred certificates fits too.
constexpr int64_t kMaxTokenBytes = 64 << 10;
constexpr int64_t kMaxCaBytes = 4 << 20;

// Only a regular file of at most max_bytes (common/file.h): a FIFO or
// /dev/zero given as --token-file must not hang giftctl.
absl::StatusOr<std::string> ReadFile(const std::string& what,
                                     const std::string& path,
                                     int64_t max_bytes) {
  return gift::ReadFile(path, max_bytes, what);
}

// A context with the deadline and the token. Watch streams get no deadline:
// they run until interrupted.
void Prepare(grpc::ClientContext& ctx, const Invocation& inv,
             const std::string& token, bool deadline) {
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  if (deadline) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::duration<double>(inv.timeout_seconds)));
  }
}

int Fail(std::ostream& err, const char* rpc, const grpc::Status& status) {
  absl::Status s = FromGrpcStatus(status);
  err << "giftctl: " << rpc << ": " << absl::StatusCodeToString(s.code())
      << ": " << s.message() << "\n";
  return kExitFailed;
}

// Calls a unary RPC and prints its response: JSON, or `human(response)`.
template <typename Request, typename Response, typename Call, typename Human>
int Unary(const Invocation& inv, const std::string& token, const char* rpc,
          const Request& request, Call call, Human human, std::ostream& out,
          std::ostream& err) {
  grpc::ClientContext ctx;
  Prepare(ctx, inv, token, /*deadline=*/true);
  Response response;
  grpc::Status status = call(&ctx, request, &response);
  if (!status.ok()) return Fail(err, rpc, status);
  if (inv.json) {
    out << ToJson(response, /*pretty=*/true) << "\n";
  } else {
    out << human(response);
  }
  return kExitOk;
}

// Cancels `ctx` on SIGINT/SIGTERM until destroyed.
class StopOnSignal {
 public:
  explicit StopOnSignal(grpc::ClientContext* ctx)
      : thread_([this, ctx] { Wait(ctx); }) {}
  ~StopOnSignal() {
    done_ = true;
    thread_.join();
  }
  bool stopped() const { return stopped_; }

 private:
  void Wait(grpc::ClientContext* ctx) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const timespec poll = {0, 100'000'000};  // how fast the destructor returns
    while (!done_) {
      if (sigtimedwait(&set, nullptr, &poll) > 0) {
        stopped_ = true;
        ctx->TryCancel();
        return;
      }
    }
  }

  std::atomic<bool> done_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

int Watch(const Invocation& inv, const std::string& token,
          gift::v1::Control::StubInterface& stub, std::ostream& out,
          std::ostream& err) {
  grpc::ClientContext ctx;
  Prepare(ctx, inv, token, /*deadline=*/false);
  StopOnSignal stop(&ctx);
  auto reader = stub.WatchTelemetry(&ctx, inv.watch);
  gift::v1::TelemetryUpdate update;
  int seen = 0;
  while ((inv.watch_count == 0 || seen < inv.watch_count) &&
         reader->Read(&update)) {
    ++seen;
    if (inv.json) {
      out << ToJson(update, /*pretty=*/false) << "\n";
    } else {
      out << (seen > 1 ? "\n" : "") << FormatTelemetry(update);
    }
    out.flush();
  }
  bool enough = inv.watch_count > 0 && seen >= inv.watch_count;
  if (enough) ctx.TryCancel();
  grpc::Status status = reader->Finish();
  if (enough || stop.stopped()) return kExitOk;
  if (!status.ok()) return Fail(err, "WatchTelemetry", status);
  return kExitOk;
}

std::string Epoch(int64_t epoch) {
  return absl::StrCat("plan_epoch ", epoch, "\n");
}

}  // namespace

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text =
      ReadFile("token file", path, kMaxTokenBytes);
  if (!text.ok()) return text.status();
  std::string token(absl::StripTrailingAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError("token file '" + path + "' is empty");
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const Invocation& inv) {
  if (inv.tls_ca.empty()) {
    return grpc::CreateChannel(inv.address, grpc::InsecureChannelCredentials());
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadFile("CA file", inv.tls_ca, kMaxCaBytes);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  return grpc::CreateChannel(inv.address, grpc::SslCredentials(ssl));
}

void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int RunCommand(const Invocation& inv, const std::string& token,
               gift::v1::Control::StubInterface& stub, std::ostream& out,
               std::ostream& err) {
  using namespace gift::v1;  // NOLINT: the request and response types
  auto call = [&stub](auto method) {
    return [&stub, method](auto* ctx, const auto& req, auto* resp) {
      return (stub.*method)(ctx, req, resp);
    };
  };
  switch (inv.command) {
    case Command::kStatus:
      return Unary<GetStatusRequest, GetStatusResponse>(
          inv, token, "GetStatus", GetStatusRequest(),
          call(&Control::StubInterface::GetStatus),
          [](const GetStatusResponse& r) { return FormatStatus(r); }, out, err);
    case Command::kLayers:
      return Unary<ListLayersRequest, ListLayersResponse>(
          inv, token, "ListLayers", ListLayersRequest(),
          call(&Control::StubInterface::ListLayers),
          [](const ListLayersResponse& r) { return FormatLayers(r.layers()); },
          out, err);
    case Command::kSetInterval:
      return Unary<SetRefreshIntervalRequest, SetRefreshIntervalResponse>(
          inv, token, "SetRefreshInterval", inv.set_interval,
          call(&Control::StubInterface::SetRefreshInterval),
          [](const auto& r) { return Epoch(r.plan_epoch()); }, out, err);
    case Command::kSetAuditInterval:
      return Unary<SetAuditIntervalRequest, SetAuditIntervalResponse>(
          inv, token, "SetAuditInterval", inv.set_audit_interval,
          call(&Control::StubInterface::SetAuditInterval),
          [](const auto& r) { return Epoch(r.plan_epoch()); }, out, err);
    case Command::kSetRank:
      return Unary<SetRankRequest, SetRankResponse>(
          inv, token, "SetRank", inv.set_rank,
          call(&Control::StubInterface::SetRank),
          [](const auto& r) { return Epoch(r.plan_epoch()); }, out, err);
    case Command::kSetLayerPolicy:
      return Unary<SetLayerPolicyRequest, SetLayerPolicyResponse>(
          inv, token, "SetLayerPolicy", inv.set_layer_policy,
          call(&Control::StubInterface::SetLayerPolicy),
          [](const SetLayerPolicyResponse& r) {
            google::protobuf::RepeatedPtrField<LayerStatus> one;
            *one.Add() = r.layer();
            return FormatLayers(one) + Epoch(r.plan_epoch());
          },
          out, err);
    case Command::kPolicy:
      return Unary<SetSelectionPolicyRequest, SetSelectionPolicyResponse>(
          inv, token, "SetSelectionPolicy", inv.set_policy,
          call(&Control::StubInterface::SetSelectionPolicy),
          [](const SetSelectionPolicyResponse& r) {
            return absl::StrCat("policy ", FormatPolicy(r.policy()), "\n",
                                Epoch(r.plan_epoch()));
          },
          out, err);
    case Command::kRefresh:
      return Unary<TriggerRefreshRequest, TriggerRefreshResponse>(
          inv, token, "TriggerRefresh", inv.refresh,
          call(&Control::StubInterface::TriggerRefresh),
          [](const TriggerRefreshResponse& r) {
            if (r.layers().empty()) return std::string("no layer scheduled\n");
            return absl::StrCat("scheduled ", absl::StrJoin(r.layers(), ", "),
                                "\n");
          },
          out, err);
    case Command::kWatch:
      return Watch(inv, token, stub, out, err);
    case Command::kHealth:  // not a Control call: RunHealth (health.h)
      err << "giftctl: health: run through RunHealth\n";
      return kExitFailed;
  }
  return kExitFailed;
}

}  // namespace gift::giftctl
