// PeerCounters, PeerSender and the client-side helpers of peer_link.h.
#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/peer/peer_link_internal.h"

namespace gift::daemon::internal {

void PeerCounters::Sent(const std::string& kind, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  sent_[kind] += bytes;
}

void PeerCounters::Received(const std::string& kind, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  received_[kind] += bytes;
}

void PeerCounters::Failure() {
  absl::MutexLock lock(&mu_);
  ++failures_;
}

void PeerCounters::Dropped() {
  absl::MutexLock lock(&mu_);
  ++dropped_;
}

void PeerCounters::Fill(PeerLinkStats& stats) const {
  absl::MutexLock lock(&mu_);
  stats.send_failures = failures_;
  stats.dropped = dropped_;
  stats.bytes_sent.clear();
  stats.bytes_received.clear();
  for (const char* kind : kPeerKinds) {
    auto sent = sent_.find(kind);
    auto received = received_.find(kind);
    stats.bytes_sent.emplace_back(kind, sent == sent_.end() ? 0 : sent->second);
    stats.bytes_received.emplace_back(
        kind, received == received_.end() ? 0 : received->second);
  }
}

PeerSender::PeerSender(int limit, PeerCounters* counters)
    : limit_(limit < 1 ? 1 : limit),
      counters_(counters),
      thread_([this] { Run(); }) {}

PeerSender::~PeerSender() { Stop(); }

void PeerSender::Enqueue(Task task) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  if (static_cast<int>(queue_.size()) >= limit_) {
    // The newest message supersedes the oldest (a newer plan, factor or
    // window); the receivers treat a lost one as a delay.
    queue_.pop_front();
    counters_->Dropped();
  }
  queue_.push_back(std::move(task));
}

void PeerSender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    queue_.clear();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void PeerSender::Run() {
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  };
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!task().ok()) counters_->Failure();
  }
}

std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address,
                                           const std::string& ca_pem) {
  grpc::ChannelArguments args;
  // gRPC's reconnect backoff grows to 120 s by default; a restarted leader
  // must be reachable again within about a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(address, credentials, args);
}

void PrepareContext(grpc::ClientContext& context, const std::string& token,
                    absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

}  // namespace gift::daemon::internal
