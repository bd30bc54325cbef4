// Internal to gift_peer_link (peer_link.h): the pieces the link is built
// from. PeerCounters holds the stats; PeerSender is one destination's
// bounded queue and sender thread; PeerService is the thin gRPC adapter of
// the Peer service, which checks the token, the job id and the layout
// version before anything reaches the link (PeerServerBackend) or the
// daemon (PeerHandler).
//
//   PeerCounters counters;
//   PeerSender sender(64, &counters);
//   sender.Enqueue([&] { return CallSomething(); });  // runs on its thread
//   PeerService service(options, handler, &backend, &counters);
//   builder.RegisterService(&service);
//
// Thread safety: every class here is thread-safe.
#ifndef GIFT_DAEMON_PEER_PEER_LINK_INTERNAL_H_
#define GIFT_DAEMON_PEER_PEER_LINK_INTERNAL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/peer/peer_link.h"
#include "gift/v1/peer.grpc.pb.h"

namespace gift::daemon::internal {

// The message kinds of PeerLinkStats, in the order stats() lists them.
inline constexpr const char* kPeerKinds[] = {
    "join", "telemetry", "plan", "sketch", "factor", "control", "store"};

class PeerCounters {
 public:
  void Sent(const std::string& kind, int64_t bytes);
  void Received(const std::string& kind, int64_t bytes);
  void Failure();
  void Dropped();
  // Fills the counter fields of `stats` (bytes_*, send_failures, dropped).
  void Fill(PeerLinkStats& stats) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> sent_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> received_ ABSL_GUARDED_BY(mu_);
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// One destination's queue: Enqueue never blocks (the oldest task goes when
// the queue is full); the thread runs the tasks in order and counts every
// task that returns an error as a send failure. A task bounds its own time
// (its RPC deadline).
class PeerSender {
 public:
  using Task = std::function<absl::Status()>;
  // REQUIRES: limit >= 1; `counters` outlives the sender.
  PeerSender(int limit, PeerCounters* counters);
  ~PeerSender();  // Stop()
  void Enqueue(Task task);
  // Drops what is queued, waits for the running task, joins the thread.
  void Stop();

 private:
  void Run();

  const int limit_;
  PeerCounters* const counters_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What the Peer service needs from the link beyond the handler: the
// membership side of Join and ReportTelemetry, and plan bookkeeping.
class PeerServerBackend {
 public:
  virtual ~PeerServerBackend() = default;
  virtual bool is_leader() const = 0;
  virtual absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& r) = 0;
  virtual absl::StatusOr<v1::ReportTelemetryResponse> Telemetry(
      const v1::ReportTelemetryRequest& r) = 0;
  // Follower: the leader published `plan` (job id checked already).
  virtual absl::Status Plan(const v1::PeerPlan& plan) = 0;
};

class PeerService final : public v1::Peer::Service {
 public:
  // `handler` and `backend` outlive the server this service is part of.
  PeerService(const PeerLinkOptions& options, PeerHandler* handler,
              PeerServerBackend* backend, PeerCounters* counters);

  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* r,
                    v1::JoinResponse* response) override;
  grpc::Status ReportTelemetry(grpc::ServerContext* context,
                               const v1::ReportTelemetryRequest* r,
                               v1::ReportTelemetryResponse* response) override;
  grpc::Status PublishPlan(grpc::ServerContext* context,
                           const v1::PublishPlanRequest* r,
                           v1::PublishPlanResponse* response) override;
  grpc::Status PushSketch(grpc::ServerContext* context,
                          const v1::PushSketchRequest* r,
                          v1::PushSketchResponse* response) override;
  grpc::Status PublishFactor(grpc::ServerContext* context,
                             const v1::PublishFactorRequest* r,
                             v1::PublishFactorResponse* response) override;
  grpc::Status ForwardControl(grpc::ServerContext* context,
                              const v1::ForwardControlRequest* r,
                              v1::ForwardControlResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext* context,
                        const v1::StoreSetRequest* r,
                        v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context,
                        const v1::StoreGetRequest* r,
                        v1::StoreGetResponse* response) override;
  grpc::Status StoreAdd(grpc::ServerContext* context,
                        const v1::StoreAddRequest* r,
                        v1::StoreAddResponse* response) override;

 private:
  // UNAUTHENTICATED, then PERMISSION_DENIED; counts the request's bytes.
  grpc::Status Admit(const grpc::ServerContext& context,
                     const std::string& job_id,
                     const google::protobuf::Message& request,
                     const char* kind) const;
  // FAILED_PRECONDITION on a follower (leader-only calls).
  grpc::Status LeaderOnly() const;
  template <typename T>
  grpc::Status Reply(absl::StatusOr<T> result, T* response, const char* kind);

  const std::string authorization_;  // "Bearer <token>"
  const std::string job_id_;
  PeerHandler* const handler_;
  PeerServerBackend* const backend_;
  PeerCounters* const counters_;
};

// A channel to `address`: TLS verified against `ca_pem` when it is not
// empty, else insecure.
std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address,
                                           const std::string& ca_pem);

// Deadline `timeout` from now and the bearer token.
void PrepareContext(grpc::ClientContext& context, const std::string& token,
                    absl::Duration timeout);

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_PEER_PEER_LINK_INTERNAL_H_
