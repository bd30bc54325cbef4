// giftd's link to the other daemons of its job (DESIGN §4, proto
// gift/v1/peer.proto): the Peer gRPC server, the client side (join, re-join,
// per-peer send queues), membership and layer ownership, authentication.
// It moves messages; the decisions are the daemon's (PeerHandler).
//
// Roles: the daemon whose advertise address equals the job's leader
// address (or every daemon of a job without a leader address: a one-node
// job, no link at all) is the leader; the others are followers.
//  * Follower: joins the leader in the background and keeps re-joining
//    (every options.retry_interval) while the leader is unreachable or
//    after it restarted (a new leader instance in a ReportTelemetry reply,
//    or NOT_FOUND for this member); while it is detached it keeps serving
//    its ranks on the last plan (nothing here blocks the daemon).
//  * Leader: admits members (Join), drops a member whose reports stopped
//    for options.member_timeout, and tells the daemon (OnMembersChanged)
//    so that the next plan carries the new member list.
// The members are the leader first, then followers in join order. A
// layer's windows go to the owner the plan names (the leader spreads the
// sketched layers over the members: window_owners.h), else to
// members()[i % members().size()].
//
// Sends never block the caller: each peer has a bounded queue and a
// sender thread; a message that cannot be delivered within
// options.rpc_timeout is dropped and counted (the in-band agreement of the
// ranks makes a lost factor or plan only a delay, never a split). The
// blocking calls (ForwardControl, Store*) run on the caller's thread and
// must not be called under the daemon's lock.
//
// Authentication: every Peer call carries "authorization: Bearer <token>"
// (options.token, read from a file by the config) and the job id; the
// server refuses a missing or wrong token (UNAUTHENTICATED), another job id
// (PERMISSION_DENIED) and, on Join, another layout version
// (FAILED_PRECONDITION), before the handler sees anything. With TLS files
// configured the server uses them and clients verify against tls_ca_file.
//
//   PeerLinkOptions o;  // job_id, node, listen/advertise, leader, token
//   ASSIGN_OR_RETURN(auto link, PeerLink::Create(o, &daemon));
//   if (!link->is_leader()) link->SendTelemetry(report);
//   link->SendSketch(link->OwnerOf(layer_index), sketch);
//   link->BroadcastFactor(factor);
//   link->Stop();
//
// Thread safety: thread-safe. Handler callbacks run on gRPC threads, never
// under a PeerLink lock, so a handler may call back into the link.
#ifndef GIFT_DAEMON_PEER_PEER_LINK_H_
#define GIFT_DAEMON_PEER_PEER_LINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

// What the daemon does with what its peers send. Every method returns a
// status that goes back to the caller as the RPC status.
class PeerHandler {
 public:
  virtual ~PeerHandler() = default;
  // Leader: a follower joined or re-joined (the link has admitted it to the
  // members already). The daemon adopts the follower's layers when it has
  // none, continues above its epochs and versions, and returns the current
  // plan (the link fills in `members` and `leader_instance`).
  virtual absl::StatusOr<v1::PeerPlan> OnJoin(const v1::JoinRequest& r) = 0;
  // Leader: a follower's telemetry since its last report.
  virtual absl::Status OnTelemetry(const v1::ReportTelemetryRequest& r) = 0;
  // Leader: the member list changed (join, re-join, timeout); the daemon
  // publishes a new epoch so that every member learns the new owners.
  virtual void OnMembersChanged() = 0;
  // Follower: the leader's plan. Older or equal epochs are ignored.
  virtual absl::Status OnPlan(const v1::PeerPlan& plan) = 0;
  // Owner: one node's summed window of a layer this daemon owns.
  virtual absl::Status OnSketch(const v1::PushSketchRequest& r) = 0;
  // Every member: a factor from the layer's owner.
  virtual absl::Status OnFactor(const v1::PublishFactorRequest& r) = 0;
  // Leader: a Control request a follower received.
  virtual absl::StatusOr<v1::ForwardControlResponse> OnControl(
      const v1::ForwardControlRequest& r) = 0;
  // Leader: the job's rendezvous store (the daemon's own KvStore).
  virtual absl::Status OnStoreSet(const v1::StoreSetRequest& r) = 0;
  virtual absl::StatusOr<v1::StoreGetResponse> OnStoreGet(
      const v1::StoreGetRequest& r, absl::Duration max_wait) = 0;
  virtual absl::StatusOr<v1::StoreAddResponse> OnStoreAdd(
      const v1::StoreAddRequest& r) = 0;
  // Follower, when (re)joining: what this node holds (layers, world size,
  // epochs, versions, its last plan).
  virtual v1::JoinRequest JoinState() = 0;
  // Leader, answering a Join: its newest factor of every layer (the link
  // puts them in the JoinResponse; the follower's link hands each to
  // OnFactor after OnPlan). Default: none.
  virtual std::vector<v1::PublishFactorRequest> NewestFactors() { return {}; }
};

struct PeerLinkOptions {
  // REQUIRES: not empty. The job this daemon serves; peers of another job
  // are refused.
  std::string job_id;
  // This daemon's node name and instance id (Member.node / .instance).
  std::string node;
  std::string instance;
  // Where the Peer server listens, e.g. "0.0.0.0:50152". REQUIRES: not
  // empty.
  std::string listen_address;
  // How the others reach this daemon. Default: listen_address (then it
  // must not be a wildcard address).
  std::string advertise_address;
  // The leader's Peer address. REQUIRES: not empty; equal to
  // advertise_address on the leader.
  std::string leader_address;
  // REQUIRES: not empty (config: job_token_file). Never logged.
  std::string token;
  // TLS: server certificate and key (both or neither), and the CA bundle
  // clients verify the peers' certificates with (required with TLS).
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  // Bound of each call. Default: 2 s.
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Follower: between join attempts while detached. Default: 1 s.
  absl::Duration retry_interval = absl::Seconds(1);
  // Leader: a member silent this long is dropped. Default: 10 s.
  absl::Duration member_timeout = absl::Seconds(10);
  // Messages queued per peer before the oldest is dropped. Default: 64.
  int queue_limit = 64;
};

// Counters for metrics and the benchmark (bytes are serialized message
// sizes, both directions, by message kind: "join", "telemetry", "plan",
// "sketch", "factor", "control", "store").
struct PeerLinkStats {
  bool connected = false;  // follower: joined to the current leader
  std::string leader_instance;
  int64_t joins = 0;  // follower: successful joins; leader: admitted
  int64_t send_failures = 0;
  int64_t dropped = 0;  // queue overflow
  // Leader: seconds since each member's last join or report, by instance
  // (itself 0). Follower: empty.
  std::vector<std::pair<std::string, double>> member_silence_seconds;
  // Follower: seconds since the leader last answered (-1: never). Leader: 0.
  double leader_silence_seconds = 0;
  std::vector<std::pair<std::string, int64_t>> bytes_sent, bytes_received;
};

class PeerLink {
 public:
  // Validates the options (INVALID_ARGUMENT naming the field), reads the
  // TLS files, starts the Peer server (UNAVAILABLE when the address is
  // taken) and, on a follower, the join loop. `handler` must outlive Stop().
  static absl::StatusOr<std::unique_ptr<PeerLink>> Create(
      const PeerLinkOptions& options, PeerHandler* handler);
  virtual ~PeerLink() = default;
  // Stops the server, the join loop and the senders. Idempotent.
  virtual void Stop() = 0;

  virtual bool is_leader() const = 0;
  // The address the Peer server is bound to (the real port when the
  // options asked for port 0).
  virtual std::string bound_address() const = 0;
  // The current members (leader: its own view; follower: the last plan's
  // list), this daemon included.
  virtual std::vector<v1::Member> members() const = 0;
  // The owner of layer `layer_index` of the job, and whether it is this
  // daemon. With no members known (a follower not joined yet) every layer
  // is owned locally.
  virtual v1::Member OwnerOf(int layer_index) const = 0;
  virtual bool IsSelf(const v1::Member& m) const = 0;
  // Follower: called with each plan it applies (keeps members and the
  // leader instance current).
  virtual void SetPlan(const v1::PeerPlan& plan) = 0;

  // ---- asynchronous sends (queued; never block)
  virtual void SendTelemetry(v1::ReportTelemetryRequest r) = 0;  // follower
  virtual void BroadcastPlan(v1::PeerPlan plan) = 0;             // leader
  virtual void SendSketch(const v1::Member& owner, v1::PushSketchRequest r) = 0;
  virtual void BroadcastFactor(v1::PublishFactorRequest r) = 0;  // owner
  // Owner: to one member (again: its broadcast was lost).
  virtual void SendFactor(const v1::Member& to, v1::PublishFactorRequest r) = 0;

  // ---- blocking (follower → leader; never under the daemon's lock)
  virtual absl::StatusOr<v1::ForwardControlResponse> ForwardControl(
      const v1::ForwardControlRequest& r) = 0;
  virtual absl::Status StoreSet(const v1::StoreSetRequest& r) = 0;
  virtual absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& r) = 0;
  virtual absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& r) = 0;

  virtual PeerLinkStats stats() const = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_PEER_PEER_LINK_H_
