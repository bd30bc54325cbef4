// PeerLink::Create and PeerLinkImpl's setup, accessors and sends
// (peer_link_impl.h). Membership is in peer_link_members.cc.
#include "daemon/peer/peer_link.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "daemon/peer/peer_link_impl.h"

namespace gift::daemon {
namespace internal {
namespace {

constexpr char kSelfKey[] = "<self>";  // sender key of local deliveries

// The port of "host:port" as written; "" when it does not split.
std::string PortOf(const std::string& address) {
  absl::StatusOr<net::SplitAddress> split = net::SplitHostPort(address);
  return split.ok() ? split->port : "";
}

bool IsWildcard(const std::string& address) {
  absl::StatusOr<net::SplitAddress> split = net::SplitHostPort(address);
  return split.ok() && net::IsWildcardHost(split->host);
}

// `address` with port 0 replaced by the bound `port`.
std::string WithPort(const std::string& address, int port) {
  absl::StatusOr<net::SplitAddress> split = net::SplitHostPort(address);
  if (!split.ok() || split->port != "0") return address;
  return net::JoinHostPort(split->host, port);
}

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const char* field) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxPemFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: cannot read '%s': %s", field, path, text.status().message()));
  }
  if (text->empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot read '%s' (or it is empty)", field, path));
  }
  return text;
}

absl::StatusOr<PeerTls> ReadTls(const PeerLinkOptions& o) {
  PeerTls tls;
  if (o.tls_cert_file.empty()) return tls;
  ASSIGN_OR_RETURN(tls.cert, ReadPem(o.tls_cert_file, "tls_cert_file"));
  ASSIGN_OR_RETURN(tls.key, ReadPem(o.tls_key_file, "tls_key_file"));
  ASSIGN_OR_RETURN(tls.ca, ReadPem(o.tls_ca_file, "tls_ca_file"));
  return tls;
}

absl::Status Required(const std::string& value, const char* field) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("peer link: ", field, " must not be empty"));
}

absl::Status Positive(absl::Duration d, const char* field) {
  if (d > absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("peer link: ", field, " must be > 0"));
}

std::string AdvertiseOf(const PeerLinkOptions& o) {
  return o.advertise_address.empty() ? o.listen_address : o.advertise_address;
}

}  // namespace

absl::Status ValidatePeerLinkOptions(const PeerLinkOptions& o) {
  RETURN_IF_ERROR(Required(o.job_id, "job_id"));
  RETURN_IF_ERROR(Required(o.node, "node"));
  RETURN_IF_ERROR(Required(o.instance, "instance"));
  RETURN_IF_ERROR(Required(o.listen_address, "listen_address"));
  RETURN_IF_ERROR(Required(o.leader_address, "leader_address"));
  RETURN_IF_ERROR(Required(o.token, "token"));
  if (o.advertise_address.empty() && IsWildcard(o.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer link: advertise_address is required when listen_address (",
        o.listen_address, ") is a wildcard address"));
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "peer link: tls_cert_file and tls_key_file must be set together");
  }
  if (!o.tls_cert_file.empty()) {
    RETURN_IF_ERROR(Required(o.tls_ca_file, "tls_ca_file (with TLS)"));
  }
  RETURN_IF_ERROR(Positive(o.rpc_timeout, "rpc_timeout"));
  RETURN_IF_ERROR(Positive(o.retry_interval, "retry_interval"));
  RETURN_IF_ERROR(Positive(o.member_timeout, "member_timeout"));
  if (o.queue_limit < 1) {
    return absl::InvalidArgumentError("peer link: queue_limit must be >= 1");
  }
  return absl::OkStatus();
}

PeerLinkImpl::PeerLinkImpl(const PeerLinkOptions& options, PeerHandler* handler,
                           PeerTls tls)
    : options_(options),
      handler_(handler),
      tls_(std::move(tls)),
      leader_(AdvertiseOf(options) == options.leader_address),
      service_(options, handler, this, &counters_) {}

absl::Status PeerLinkImpl::Start() {
  // Who this daemon is must be settled before the server takes calls.
  self_.set_node(options_.node);
  self_.set_instance(options_.instance);
  self_.set_address(AdvertiseOf(options_));
  leader_address_ = options_.leader_address;
  if (leader_) {
    absl::MutexLock lock(&mu_);
    members_ = {self_};
    last_seen_ = {absl::Now()};
    leader_instance_ = self_.instance();
    connected_ = true;
  }
  int port = 0;
  RETURN_IF_ERROR(StartServer(port));
  bound_address_ = WithPort(options_.listen_address, port);
  if (PortOf(self_.address()) == "0") {
    // Port 0 (tests): no peer can have called a port nobody knew yet.
    self_.set_address(WithPort(self_.address(), port));
    if (leader_) leader_address_ = self_.address();
    absl::MutexLock lock(&mu_);
    if (leader_) members_[0] = self_;
  }
  background_ = std::thread([this] {
    if (leader_) {
      ReaperLoop();
    } else {
      FollowerLoop();
    }
  });
  return absl::OkStatus();
}

absl::Status PeerLinkImpl::StartServer(int& port) {
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (!tls_.cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({tls_.key, tls_.cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second giftd would then share the
  // port silently instead of failing to bind.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options_.listen_address, credentials, &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("peer link: cannot listen on ", options_.listen_address));
  }
  return absl::OkStatus();
}

void PeerLinkImpl::Stop() {
  std::map<std::string, std::unique_ptr<PeerSender>> senders;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    senders.swap(senders_);
  }
  // Senders first: their tasks call the handler and use the channels.
  for (auto& [key, sender] : senders) sender->Stop();
  if (background_.joinable()) background_.join();
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    server_->Wait();
  }
}

std::vector<v1::Member> PeerLinkImpl::members() const {
  absl::MutexLock lock(&mu_);
  return members_;
}

v1::Member PeerLinkImpl::OwnerOf(int layer_index) const {
  absl::MutexLock lock(&mu_);
  return OwnerIn(members_, owners_, layer_index, self_);
}

bool PeerLinkImpl::IsSelf(const v1::Member& m) const {
  return m.address() == self_.address() ||
         (!m.instance().empty() && m.instance() == self_.instance());
}

PeerLinkStats PeerLinkImpl::stats() const {
  PeerLinkStats stats;
  counters_.Fill(stats);
  absl::MutexLock lock(&mu_);
  stats.connected = connected_;
  stats.leader_instance = leader_instance_;
  stats.joins = joins_;
  const absl::Time now = absl::Now();
  if (leader_) {
    for (size_t i = 0; i < members_.size() && i < last_seen_.size(); ++i) {
      const double silent = members_[i].instance() == self_.instance()
                                ? 0.0
                                : absl::ToDoubleSeconds(now - last_seen_[i]);
      stats.member_silence_seconds.emplace_back(members_[i].instance(),
                                                std::max(0.0, silent));
    }
  } else {
    stats.leader_silence_seconds =
        last_leader_ok_ == absl::Time()
            ? -1.0
            : std::max(0.0, absl::ToDoubleSeconds(now - last_leader_ok_));
  }
  return stats;
}

std::shared_ptr<grpc::Channel> PeerLinkImpl::ChannelTo(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = PeerChannel(address, tls_.ca);
  return channel;
}

void PeerLinkImpl::Enqueue(const std::string& key, PeerSender::Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  std::unique_ptr<PeerSender>& sender = senders_[key];
  if (sender == nullptr) {
    sender = std::make_unique<PeerSender>(options_.queue_limit, &counters_);
  }
  sender->Enqueue(std::move(task));
}

// ---- asynchronous sends

void PeerLinkImpl::SendTelemetry(v1::ReportTelemetryRequest r) {
  if (leader_) return;
  {
    // Detached: the join loop is at work; the leader would not know us.
    absl::MutexLock lock(&mu_);
    if (!connected_) return;
  }
  r.set_job_id(options_.job_id);
  *r.mutable_self() = self_;
  Enqueue(leader_address_, [this, r = std::move(r)] {
    int64_t joins;
    {
      absl::MutexLock lock(&mu_);
      joins = joins_;
    }
    v1::ReportTelemetryResponse reply;
    absl::Status s =
        Call(leader_address_, "telemetry", &v1::Peer::Stub::ReportTelemetry, r,
             &reply, options_.rpc_timeout);
    NoteTelemetryReply(s, reply, joins);
    return s;
  });
}

void PeerLinkImpl::BroadcastPlan(v1::PeerPlan plan) {
  if (!leader_) return;
  auto request = std::make_shared<v1::PublishPlanRequest>();
  std::vector<v1::Member> members;
  {
    absl::MutexLock lock(&mu_);
    CompletePlanLocked(plan);
    plan_epoch_ = std::max(plan_epoch_, plan.plan_epoch());
    members = members_;
  }
  *request->mutable_plan() = std::move(plan);
  for (const v1::Member& m : members) {
    if (IsSelf(m)) continue;
    Enqueue(m.address(), [this, address = m.address(), request] {
      v1::PublishPlanResponse reply;
      return Call(address, "plan", &v1::Peer::Stub::PublishPlan, *request,
                  &reply, options_.rpc_timeout);
    });
  }
}

void PeerLinkImpl::SendSketch(const v1::Member& owner,
                              v1::PushSketchRequest r) {
  if (r.job_id().empty()) r.set_job_id(options_.job_id);
  if (r.node().empty()) r.set_node(options_.node);
  auto request = std::make_shared<v1::PushSketchRequest>(std::move(r));
  if (IsSelf(owner)) {
    // On the sender thread, so the caller never runs the owner's work.
    Enqueue(kSelfKey, [this, request] { return handler_->OnSketch(*request); });
    return;
  }
  Enqueue(owner.address(), [this, address = owner.address(), request] {
    v1::PushSketchResponse reply;
    return Call(address, "sketch", &v1::Peer::Stub::PushSketch, *request,
                &reply, options_.rpc_timeout);
  });
}

void PeerLinkImpl::BroadcastFactor(v1::PublishFactorRequest r) {
  const auto request = FactorRequest(std::move(r));
  for (const v1::Member& m : members()) {
    if (!IsSelf(m)) EnqueueFactor(m.address(), request);
  }
}

void PeerLinkImpl::SendFactor(const v1::Member& to,
                              v1::PublishFactorRequest r) {
  if (!IsSelf(to)) EnqueueFactor(to.address(), FactorRequest(std::move(r)));
}

std::shared_ptr<const v1::PublishFactorRequest> PeerLinkImpl::FactorRequest(
    v1::PublishFactorRequest r) const {
  if (r.job_id().empty()) r.set_job_id(options_.job_id);
  if (r.owner().empty()) r.set_owner(options_.node);
  return std::make_shared<const v1::PublishFactorRequest>(std::move(r));
}

void PeerLinkImpl::EnqueueFactor(
    const std::string& address,
    std::shared_ptr<const v1::PublishFactorRequest> request) {
  Enqueue(address, [this, address, request] {
    v1::PublishFactorResponse reply;
    return Call(address, "factor", &v1::Peer::Stub::PublishFactor, *request,
                &reply, options_.rpc_timeout);
  });
}

// ---- blocking calls to the leader (the leader serves itself directly)

absl::StatusOr<v1::ForwardControlResponse> PeerLinkImpl::ForwardControl(
    const v1::ForwardControlRequest& r) {
  v1::ForwardControlRequest request = r;
  if (request.job_id().empty()) request.set_job_id(options_.job_id);
  if (leader_) return handler_->OnControl(request);
  v1::ForwardControlResponse reply;
  RETURN_IF_ERROR(Call(leader_address_, "control",
                       &v1::Peer::Stub::ForwardControl, request, &reply,
                       options_.rpc_timeout));
  return reply;
}

absl::Status PeerLinkImpl::StoreSet(const v1::StoreSetRequest& r) {
  v1::StoreSetRequest request = r;
  if (request.job_id().empty()) request.set_job_id(options_.job_id);
  if (leader_) return handler_->OnStoreSet(request);
  v1::StoreSetResponse reply;
  return Call(leader_address_, "store", &v1::Peer::Stub::StoreSet, request,
              &reply, options_.rpc_timeout);
}

absl::StatusOr<v1::StoreGetResponse> PeerLinkImpl::StoreGet(
    const v1::StoreGetRequest& r) {
  v1::StoreGetRequest request = r;
  if (request.job_id().empty()) request.set_job_id(options_.job_id);
  absl::Duration wait =
      absl::Milliseconds(std::max<int64_t>(request.timeout_ms(), 0));
  if (leader_) return handler_->OnStoreGet(request, wait);
  v1::StoreGetResponse reply;
  RETURN_IF_ERROR(Call(leader_address_, "store", &v1::Peer::Stub::StoreGet,
                       request, &reply, wait + options_.rpc_timeout));
  return reply;
}

absl::StatusOr<v1::StoreAddResponse> PeerLinkImpl::StoreAdd(
    const v1::StoreAddRequest& r) {
  v1::StoreAddRequest request = r;
  if (request.job_id().empty()) request.set_job_id(options_.job_id);
  if (leader_) return handler_->OnStoreAdd(request);
  v1::StoreAddResponse reply;
  RETURN_IF_ERROR(Call(leader_address_, "store", &v1::Peer::Stub::StoreAdd,
                       request, &reply, options_.rpc_timeout));
  return reply;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<PeerLink>> PeerLink::Create(
    const PeerLinkOptions& options, PeerHandler* handler) {
  if (handler == nullptr) {
    return absl::InvalidArgumentError("peer link: handler is null");
  }
  RETURN_IF_ERROR(internal::ValidatePeerLinkOptions(options));
  ASSIGN_OR_RETURN(internal::PeerTls tls, internal::ReadTls(options));
  auto link = std::make_unique<internal::PeerLinkImpl>(options, handler,
                                                       std::move(tls));
  RETURN_IF_ERROR(link->Start());
  return link;
}

}  // namespace gift::daemon
