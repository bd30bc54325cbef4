// Internal to gift_peer_link: PeerLinkImpl, the one implementation of
// PeerLink (peer_link.h). peer_link.cc holds its setup, accessors and sends;
// peer_link_members.cc the membership (leader: admission and timeouts;
// follower: the join loop and plan adoption).
//
//   auto link = std::make_unique<PeerLinkImpl>(options, handler, tls);
//   RETURN_IF_ERROR(link->Start());
//
// Thread safety: thread-safe. mu_ is never held while calling the handler,
// a PeerSender's Stop or a blocking RPC.
#ifndef GIFT_DAEMON_PEER_PEER_LINK_IMPL_H_
#define GIFT_DAEMON_PEER_PEER_LINK_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "daemon/peer/peer_link.h"
#include "daemon/peer/peer_link_internal.h"
#include "daemon/peer/window_owners.h"

namespace gift::daemon::internal {

// The PEM texts read from the options' TLS files ("" without TLS).
struct PeerTls {
  std::string cert, key, ca;
};

class PeerLinkImpl final : public PeerLink, public PeerServerBackend {
 public:
  // REQUIRES: `options` validated (ValidatePeerLinkOptions).
  PeerLinkImpl(const PeerLinkOptions& options, PeerHandler* handler,
               PeerTls tls);
  ~PeerLinkImpl() override { Stop(); }

  // Binds the server, then starts the background thread (leader: member
  // timeouts; follower: the join loop).
  absl::Status Start();
  void Stop() override;

  bool is_leader() const override { return leader_; }
  std::string bound_address() const override { return bound_address_; }
  std::vector<v1::Member> members() const override;
  v1::Member OwnerOf(int layer_index) const override;
  bool IsSelf(const v1::Member& m) const override;
  void SetPlan(const v1::PeerPlan& plan) override;

  void SendTelemetry(v1::ReportTelemetryRequest r) override;
  void BroadcastPlan(v1::PeerPlan plan) override;
  void SendSketch(const v1::Member& owner, v1::PushSketchRequest r) override;
  void BroadcastFactor(v1::PublishFactorRequest r) override;
  void SendFactor(const v1::Member& to, v1::PublishFactorRequest r) override;

  absl::StatusOr<v1::ForwardControlResponse> ForwardControl(
      const v1::ForwardControlRequest& r) override;
  absl::Status StoreSet(const v1::StoreSetRequest& r) override;
  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& r) override;
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& r) override;

  PeerLinkStats stats() const override;

  // PeerServerBackend (peer_link_members.cc).
  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& r) override;
  absl::StatusOr<v1::ReportTelemetryResponse> Telemetry(
      const v1::ReportTelemetryRequest& r) override;
  absl::Status Plan(const v1::PeerPlan& plan) override;

 private:
  template <typename Req, typename Resp>
  using StubMethod = grpc::Status (v1::Peer::Stub::*)(grpc::ClientContext*,
                                                      const Req&, Resp*);
  // One unary call to `address`, counted in the stats.
  template <typename Req, typename Resp>
  absl::Status Call(const std::string& address, const char* kind,
                    StubMethod<Req, Resp> method, const Req& request,
                    Resp* response, absl::Duration timeout);
  // Binds and starts the Peer server; `port` is the bound port.
  absl::Status StartServer(int& port);
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  // Queues `task` for `key` (an address, or kSelfKey for local delivery).
  void Enqueue(const std::string& key, PeerSender::Task task);
  // A factor with the job and owner filled in, and its send to `address`.
  std::shared_ptr<const v1::PublishFactorRequest> FactorRequest(
      v1::PublishFactorRequest r) const;
  void EnqueueFactor(const std::string& address,
                     std::shared_ptr<const v1::PublishFactorRequest> request);

  // ---- membership (peer_link_members.cc)
  // Leader: the members with `self` in place; true when the list changed.
  bool AdmitLocked(const v1::Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan as every member must see it: members, the layers' window
  // owners and the leader instance.
  void CompletePlanLocked(v1::PeerPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AdoptPlanLocked(const v1::PeerPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaperLoop();
  void FollowerLoop();
  absl::Status TryJoin();
  // Follower: what a ReportTelemetry call says about the leader; `joins`:
  // joins_ when the call left (a reply to a call that left before the last
  // join describes the leader as it was then, and is ignored).
  void NoteTelemetryReply(const absl::Status& s,
                          const v1::ReportTelemetryResponse& reply,
                          int64_t joins);
  // True when Stop() was called; waits up to `d` for it.
  bool StoppedWithin(absl::Duration d);

  const PeerLinkOptions options_;  // advertise/leader resolved in Start()
  PeerHandler* const handler_;
  const PeerTls tls_;
  const bool leader_;
  PeerCounters counters_;
  PeerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string bound_address_;   // set in Start()
  std::string leader_address_;  // set in Start()
  v1::Member self_;             // set in Start()
  std::thread background_;

  mutable absl::Mutex mu_;
  // Leader: itself first, then followers in join order, each with the time
  // of its last join or report. Follower: the last plan's members.
  std::vector<v1::Member> members_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> last_seen_ ABSL_GUARDED_BY(mu_);
  // Leader: who owns which layer's windows, kept across plans. Both: the
  // owner node of each layer in the last plan ("" where it names none).
  WindowOwners window_owners_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> owners_ ABSL_GUARDED_BY(mu_);
  std::string leader_instance_ ABSL_GUARDED_BY(mu_);
  int64_t plan_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_leader_ok_ ABSL_GUARDED_BY(mu_);
  std::string last_join_error_;  // follower loop thread only
  // Since when the leader's replies name a newer epoch than this follower's.
  absl::Time behind_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int64_t joins_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<PeerSender>> senders_
      ABSL_GUARDED_BY(mu_);
};

// Checks `options` (INVALID_ARGUMENT naming the field).
absl::Status ValidatePeerLinkOptions(const PeerLinkOptions& options);

template <typename Req, typename Resp>
absl::Status PeerLinkImpl::Call(const std::string& address, const char* kind,
                                StubMethod<Req, Resp> method,
                                const Req& request, Resp* response,
                                absl::Duration timeout) {
  v1::Peer::Stub stub(ChannelTo(address));
  grpc::ClientContext context;
  PrepareContext(context, options_.token, timeout);
  counters_.Sent(kind, static_cast<int64_t>(request.ByteSizeLong()));
  grpc::Status s = (stub.*method)(&context, request, response);
  if (!s.ok()) {
    return FromGrpcStatus(s, absl::StrCat("Peer ", kind, " to ", address));
  }
  counters_.Received(kind, static_cast<int64_t>(response->ByteSizeLong()));
  return absl::OkStatus();
}

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_PEER_PEER_LINK_IMPL_H_
