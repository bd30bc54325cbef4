// An in-process stand-in for the Peer network between daemons, for tests of
// the daemon's multi-node logic without gRPC: a FakePeerNetwork routes the
// messages of the FakePeerLinks created through its Factory() straight to
// the other links' PeerHandlers. Asynchronous sends (telemetry, plans,
// sketches, factors, and a follower's join) are queued and delivered in
// order by one delivery thread, as the real link's senders would; blocking
// calls (ForwardControl, Store*) run on the caller's thread. Membership is
// the real link's: the leader (the link whose address equals the leader
// address) first, then followers in join order; a follower's view is the
// last plan it was given (SetPlan). No authentication, no retries: a
// message to an address that is gone or cut off is dropped and counted.
//
//   FakePeerNetwork net;
//   ASSIGN_OR_RETURN(auto leader, Daemon::Create(c0, &reg0, net.Factory()));
//   ASSIGN_OR_RETURN(auto follower, Daemon::Create(c1, &reg1, net.Factory()));
//   ASSERT_TRUE(net.Drain());  // the join and its plan have arrived
//   net.SetReachable("n1:1", false);  // a partition
//
// Thread safety: thread-safe. Handlers never run under the network's lock;
// a link's Stop() waits for the handler calls in flight to it.
#ifndef GIFT_DAEMON_PEER_FAKE_PEER_LINK_H_
#define GIFT_DAEMON_PEER_FAKE_PEER_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/peer/peer_link.h"
#include "daemon/peer/window_owners.h"

namespace gift::daemon {

class FakePeerLink;

class FakePeerNetwork {
 public:
  using Factory_t = std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
      const PeerLinkOptions&, PeerHandler*)>;

  FakePeerNetwork();
  ~FakePeerNetwork();  // REQUIRES: every link stopped (its daemon gone)

  // Creates links on this network. Addresses: options.advertise_address,
  // else listen_address (ALREADY_EXISTS when taken). A follower queues its
  // join.
  Factory_t Factory();
  // Waits until the queue is empty and no delivery runs. False on timeout.
  bool Drain(absl::Duration timeout = absl::Seconds(10));
  // Cuts an address off (false) or reconnects it: messages from or to it
  // are dropped and blocking calls fail UNAVAILABLE.
  void SetReachable(const std::string& address, bool reachable);
  // Queues the join of the follower at `address` again (after the leader
  // came back).
  void Rejoin(const std::string& address);
  // Messages dropped (unreachable or gone), all kinds together.
  int64_t dropped() const;

 private:
  friend class FakePeerLink;
  struct Endpoint {
    std::string address;
    PeerHandler* handler = nullptr;
    FakePeerLink* link = nullptr;
    v1::Member self;
    bool alive = true;
    int active = 0;  // handler calls in flight
  };
  using Call_t = std::function<absl::Status(Endpoint&)>;

  absl::Status Register(std::shared_ptr<Endpoint> e);
  void Unregister(const std::string& address);
  // Runs `fn` on the handler at `to` unless either side is cut off or gone.
  absl::Status Call(const std::string& from, const std::string& to,
                    const Call_t& fn);
  void Post(std::function<void()> delivery);
  void Admit(const v1::Member& m);
  std::vector<v1::Member> Members() const;
  // The leader's completion of a plan: members, window owners, leader.
  void CompletePlan(v1::PeerPlan& plan, const std::string& leader_instance);
  std::vector<std::string> Owners() const;  // the last completed plan's
  void Join(const std::string& address, const std::string& leader);
  void Deliver();

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> cut_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Member> members_ ABSL_GUARDED_BY(mu_);  // leader's view
  WindowOwners window_owners_ ABSL_GUARDED_BY(mu_);       // the leader's
  std::vector<std::string> owners_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> leader_of_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int delivering_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_PEER_FAKE_PEER_LINK_H_
