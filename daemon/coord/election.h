// Leader election for one job on etcd (issue 16): the job's daemons
// campaign for one key, the winner leads, the others follow whoever holds
// it, and the members are the live lease-holders.
//
// Each Election holds one etcd lease of options.ttl and two keys on it:
//   /gift/jobs/<job_id>/members/<instance>  {"instance":…,"address":…}
//   /gift/jobs/<job_id>/leader              the same, for the holder
// The leader key is created only when absent (a transaction), so exactly
// one lease holds it; when that lease ends (revoked by Stop, or expired
// after a SIGKILL or a partition) the key goes and the next campaign wins.
// The term is the leader key's create_revision: it grows with every new
// holder, so plans stamped with it fence off an older leader.
//
// Every ttl/4 a thread renews the lease and reads the leader key and the
// members. A leader that has not renewed its lease for the TTL (etcd down,
// or this node cut off from it) steps down by itself, measured from when
// the last successful renewal was sent, so it stops leading no later than
// etcd expires its lease; when etcd answers again it starts over with a new
// lease. Followers keep the last leader they saw while etcd is away.
//
//   ElectionOptions o{.job_id = "llama", .instance = "node3-4711",
//                     .address = "10.0.0.3:7070"};
//   ASSIGN_OR_RETURN(auto etcd, EtcdClient::Create(etcd_options));
//   auto election = Election::Start(std::move(etcd), o,
//                                   [](const ElectionState& s) { ... });
//   if (election->state().leader) ...
//   election->Stop();  // hands leadership over at once
//
// Thread safety: thread-safe. on_change runs on the election's threads,
// outside its locks, one call at a time and in order; it may call state()
// but not Stop().
#ifndef GIFT_DAEMON_COORD_ELECTION_H_
#define GIFT_DAEMON_COORD_ELECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coord/etcd_client.h"

namespace gift::daemon::coord {

struct ElectionOptions {
  // The job; the keys live under /gift/jobs/<job_id>/.
  // REQUIRES: non-empty, no '/'.
  std::string job_id;
  // This daemon, unique in the job (e.g. "<host>-<pid>"). REQUIRES: as
  // job_id.
  std::string instance;
  // What followers connect to when this daemon leads ("host:port").
  // REQUIRES: non-empty.
  std::string address;
  // The lease: how long a dead or cut-off leader keeps the key.
  // Default: 5 s. REQUIRES: >= 2 s (etcd's shortest lease), whole seconds.
  absl::Duration ttl = absl::Seconds(5);
};

struct Member {
  std::string instance;
  std::string address;
  bool operator==(const Member&) const = default;
};

struct ElectionState {
  bool leader = false;  // this daemon leads
  // The leader seen last; empty when none is known (or this daemon just
  // stepped down).
  std::string leader_address;
  std::string leader_instance;
  // The leader key's create_revision; never decreases. 0: none seen yet.
  int64_t term = 0;
  std::vector<Member> members;         // live lease-holders, by instance
  bool coordinator_reachable = false;  // the last call to etcd worked
  bool operator==(const ElectionState&) const = default;
};

class Election {
 public:
  using OnChange = std::function<void(const ElectionState&)>;

  // Starts campaigning in the background (it never blocks on etcd).
  static absl::StatusOr<std::unique_ptr<Election>> Start(
      std::unique_ptr<EtcdClient> etcd, ElectionOptions options,
      OnChange on_change = nullptr);
  ~Election();  // Stop()
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  ElectionState state() const;
  // Ends the campaign and revokes the lease (a graceful handover: the
  // others elect a new leader at once). Idempotent.
  void Stop();

  static std::string LeaderKey(const std::string& job_id);
  static std::string MembersPrefix(const std::string& job_id);

 private:
  Election(std::unique_ptr<EtcdClient> etcd, ElectionOptions options,
           OnChange on_change);
  void Run();       // the campaign thread
  void Watchdog();  // steps a leader down when its lease may have expired
  void Tick();      // one round with etcd
  bool RevokeStale();
  bool EnsureLease();
  bool Renew();
  void Observe(int64_t lease, const TxnResult& leader,
               std::vector<Member> members);
  void Unreachable();
  // Drops the lease (it may have expired); revoked once etcd answers.
  void DropLeaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateLocked(ElectionState next, const char* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify();
  bool Stopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; }
  bool WatchdogWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<EtcdClient> etcd_;
  const ElectionOptions options_;
  const OnChange on_change_;
  const std::string value_;  // this daemon's leader/member value

  mutable absl::Mutex mu_;
  ElectionState state_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;        // 0: none
  int64_t stale_lease_ ABSL_GUARDED_BY(mu_) = 0;  // to revoke
  // The lease is surely alive until then (etcd may keep it longer), on
  // the steady clock (MonotonicNow in election.cc).
  absl::Duration lease_deadline_ ABSL_GUARDED_BY(mu_);
  int64_t deadline_changes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t watchdog_seen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;  // state_ versions
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex notify_mu_;  // serialises on_change calls
  int64_t notified_seq_ ABSL_GUARDED_BY(notify_mu_) = 0;

  std::thread run_thread_;
  std::thread watchdog_thread_;
  std::once_flag stop_once_;
};

}  // namespace gift::daemon::coord

#endif  // GIFT_DAEMON_COORD_ELECTION_H_
