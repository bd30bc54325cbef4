// Who leads a multi-node job and the link to it (DESIGN §4, issue 16): the
// Peer link (peer_link.h) this daemon leads or follows with, and with
// config.coordinator the leader election on etcd (daemon/coord/election.h)
// that decides which daemon leads. The election's callback only records
// what it saw (and steps a lost leader down at once); the poll thread
// rebuilds the link to lead or to follow the new leader (ApplyElection),
// outside the daemon's lock. Every plan, join and factor carries the term
// (the leader key's etcd create_revision), and a daemon refuses those of a
// term older than the newest it has seen (CheckTerm), so a deposed or
// partitioned leader cannot split the job. Without config.peer_address
// there is no link and IsFollower() is false.
//
// What the daemon does when its role changes (resume the plan, a new
// epoch) is the daemon's: the Hooks, which the coordinator calls with the
// daemon's mutex held (it takes it).
//
//   PeerCoordinator peers(config, instance, &daemon_mu);
//   RETURN_IF_ERROR(peers.Prepare(factory));       // options, token
//   RETURN_IF_ERROR(peers.Connect(handler, hooks));  // link or election
//   if (peers.IsFollower()) return peers.Forward(request);
//   // poll thread, outside the daemon's mutex:
//   peers.ApplyElection();
//
// Thread safety: thread-safe. The link pointer, the term and the role are
// atomics; the election's pending state and the leader address have their
// own mutex; the link's owner and the options are the start-up thread's and
// then the poll thread's only (Prepare, Connect, ApplyElection, Stop*).
#ifndef GIFT_DAEMON_CORE_PEER_COORDINATOR_H_
#define GIFT_DAEMON_CORE_PEER_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config.h"
#include "daemon/coord/election.h"
#include "daemon/peer/peer_link.h"
#include "gift/v1/control.pb.h"
#include "gift/v1/peer.pb.h"

namespace gift::daemon {

// Makes the link to the job's other daemons (PeerLink::Create, or a fake in
// tests).
using PeerLinkFactory = std::function<absl::StatusOr<std::unique_ptr<PeerLink>>(
    const PeerLinkOptions&, PeerHandler*)>;

class PeerCoordinator {
 public:
  // Called with the daemon's mutex held (the coordinator takes it).
  struct Hooks {
    // A new link was built for election state `s` (the link already
    // replaced; with s.leader: resume the plan, set_leading(true), a new
    // epoch).
    std::function<void(const coord::ElectionState& s)> on_new_link;
    // Elected again while the link already leads (a new epoch).
    std::function<void(int64_t term)> on_leads_again;
  };

  // `config` must outlive the coordinator; `daemon_mu` is the daemon's
  // mutex (taken around the Hooks and the link's replacement).
  PeerCoordinator(const DaemonConfig& config, const std::string& instance,
                  absl::Mutex* daemon_mu);
  PeerCoordinator(const PeerCoordinator&) = delete;
  PeerCoordinator& operator=(const PeerCoordinator&) = delete;

  bool peered() const { return peered_; }
  bool coordinated() const { return coordinated_; }
  // Null without peers (and while a link is being rebuilt).
  PeerLink* link() const { return link_.load(std::memory_order_acquire); }
  // With peers and not the leader: the leader decides. With a coordinator,
  // the leader is the election's winner once its link leads (a daemon that
  // lost or cannot confirm its lease decides nothing).
  bool IsFollower() const;
  // The newest leader term seen, and the leader changes so far.
  int64_t term() const { return term_.load(); }
  // Marks this daemon the elected leader (Hooks::on_new_link).
  void set_leading(bool leading) {
    coord_leader_.store(leading, std::memory_order_release);
  }

  // ---- start and stop
  // Checks the peer options (INVALID_ARGUMENT), reads the job token and
  // keeps the link options. `factory` Default: PeerLink::Create.
  absl::Status Prepare(PeerLinkFactory factory);
  // Builds the link (`handler` answers the peers; it must outlive
  // StopLinks), or with a coordinator starts the election and waits for
  // the first leader (StartElection).
  absl::Status Connect(PeerHandler* handler, Hooks hooks);
  // A graceful handover: the lease is revoked, another daemon leads at
  // once.
  void StopElection();
  // Stops the link and frees the ones replaced by a rebuild. The handler
  // is called no more.
  void StopLinks();

  // ---- the election (config.coordinator)
  // The election's callback (its thread): steps down at once when the lease
  // is lost, remembers the newest term and leaves the rest to the poll.
  void OnElection(const coord::ElectionState& s);
  // Poll thread, outside the daemon's mutex: a new leader (or this daemon
  // elected) rebuilds the Peer link to follow it (or to lead). False when
  // the link could not be built (retried at the next poll).
  bool ApplyElection();

  // ---- terms
  // Fencing: FAILED_PRECONDITION for a message of a term older than the
  // newest this daemon has seen (`kind` names it); a newer one raises it.
  absl::Status CheckTerm(int64_t term, const char* kind);
  void RaiseTerm(int64_t term);

  // ---- messages
  // PERMISSION_DENIED for a peer message of another job.
  absl::Status CheckPeerJob(const std::string& job_id) const;
  // A follower's Control request, to the leader (UNAVAILABLE while no
  // leader is known). Blocks: call it without the daemon's mutex.
  absl::StatusOr<v1::ForwardControlResponse> Forward(
      v1::ForwardControlRequest r) const;
  // "" without peers, else "leader of job J at ADDR" / "follower of ADDR
  // in job J".
  std::string PeerRole() const;
  // The role, the leader, the connection and the members as GetStatus
  // reports them (takes the link's lock, not the daemon's).
  v1::PeerStatus Status() const;

 private:
  // Connects to etcd (a clear error for bad credentials or no answer),
  // starts campaigning and waits up to ttl + 5 s for a leader; builds the
  // first link to it.
  absl::Status StartElection();
  absl::Status RebuildLink(const coord::ElectionState& s);
  std::string LeaderAddress() const;

  const DaemonConfig& config_;
  const std::string instance_;
  absl::Mutex* const daemon_mu_;
  const bool peered_;
  const bool coordinated_;
  PeerHandler* handler_ = nullptr;
  Hooks hooks_;

  std::unique_ptr<PeerLink> link_owner_;
  std::atomic<PeerLink*> link_{nullptr};
  PeerLinkOptions link_options_;  // as first built (coordinated: rebuilt)
  PeerLinkFactory link_factory_;
  std::unique_ptr<coord::Election> election_;
  // The poll thread's: links replaced by a rebuild, stopped, freed at Stop
  // (a handler or a caller may still hold their pointer until then).
  std::vector<std::unique_ptr<PeerLink>> retired_links_;
  std::string link_leader_;  // the leader address the current link follows

  mutable absl::Mutex coord_mu_;
  std::optional<coord::ElectionState> coord_pending_ ABSL_GUARDED_BY(coord_mu_);
  // The leader address for readers on other threads (Status, PeerRole).
  std::string leader_address_ ABSL_GUARDED_BY(coord_mu_);
  std::atomic<bool> coord_leader_{false};
  std::atomic<int64_t> term_{0};
  std::atomic<int64_t> leader_changes_{0};
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_PEER_COORDINATOR_H_
