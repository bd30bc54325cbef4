// The node's rank sessions (DESIGN §5): who is registered, the limits on
// how many (per node, per process), heartbeats, which ranks are dead
// (process gone, or no heartbeat within the timeout) or broke their shared
// memory too often, and the sessions kept after they were dropped: a
// device session whose process is still alive may still write into its
// CUDA IPC regions, which are freed only once the process is gone.
// The table decides nothing about the job (layers, plans, factors) and
// exports no metrics: the daemon does both around it.
//
//   SessionTable sessions;
//   RETURN_IF_ERROR(sessions.CheckCapacity(pid, replaced, limits));
//   auto [id, prefix] = sessions.NextIds(instance, shm_prefix);
//   ... RankSession::Create(spec) ...
//   RankSession& s = sessions.Add(std::move(session));
//   sessions.ExchangeBeats(absl::Now());  // every poll
//   for (auto& [id, why] : sessions.Dead(absl::Now(), timeout)) ...
//   for (auto& [id, s] : sessions) ...  // in session id order
//
// Thread safety: not thread-safe; the daemon holds its mutex around every
// use.
#ifndef GIFT_DAEMON_CORE_SESSION_TABLE_H_
#define GIFT_DAEMON_CORE_SESSION_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/session.h"
#include "daemon/limits.h"

namespace gift::daemon {

// Whether process `pid` is gone (kill(pid, 0) fails with ESRCH).
bool ProcessGone(int64_t pid);

class SessionTable {
 public:
  using Map = std::map<std::string, std::unique_ptr<RankSession>>;

  // In session id order.
  Map::iterator begin() { return sessions_.begin(); }
  Map::iterator end() { return sessions_.end(); }
  Map::const_iterator begin() const { return sessions_.begin(); }
  Map::const_iterator end() const { return sessions_.end(); }
  size_t size() const { return sessions_.size(); }
  bool empty() const { return sessions_.empty(); }
  bool contains(const std::string& id) const { return sessions_.count(id); }
  // Null for an unknown id.
  RankSession* Find(const std::string& id) const;
  // The session of `rank`; null for none.
  RankSession* FindRank(int rank) const;

  // Room for one more session of process `pid` when the session `replaced`
  // ("" for none) gives way: RESOURCE_EXHAUSTED naming the limit
  // (max_local_ranks, max_sessions_per_pid).
  absl::Status CheckCapacity(int64_t pid, const std::string& replaced,
                             const Limits& limits) const;
  // The sessions there would be without `replaced` ("" for none).
  int CountWithout(const std::string& replaced) const;
  // A new session's id ("<instance>-<n>") and shared-memory name prefix
  // ("<shm_prefix>-<instance>-s<n>").
  std::pair<std::string, std::string> NextIds(const std::string& instance,
                                              const std::string& shm_prefix);
  // REQUIRES: no session with its id.
  RankSession& Add(std::unique_ptr<RankSession> s);

  // Records a heartbeat at `now`: false for an unknown session.
  bool Heartbeat(const std::string& id, int64_t step, absl::Time now);
  // The heartbeats through the control blocks (DESIGN §5), once per poll:
  // advances every block's daemon_beat (its rank then skips the Heartbeat
  // RPC) and records a beat at `now` for each rank whose heartbeat word
  // changed since the last call (untrusted: only compared).
  void ExchangeBeats(absl::Time now);
  // The slowest rank's step (0 without ranks).
  int64_t SlowestStep() const;

  // Removes a session (unmapping and unlinking its shared memory), or
  // keeps a device session whose process is alive until that process is
  // gone. Returns its rank; -1 for an unknown id.
  int Remove(const std::string& id);
  // Frees the kept sessions whose process is gone.
  void ReapGraveyard();
  // The sessions whose process is gone or that sent no heartbeat within
  // `timeout` of `now`, with why: (id, why).
  std::vector<std::pair<std::string, std::string>> Dead(
      absl::Time now, absl::Duration timeout) const;
  // Ends the poll's count of malformed shared memory: the sessions that
  // were malformed kMalformedPollsBeforeDisconnect polls in a row, with
  // why: (id, why).
  std::vector<std::pair<std::string, std::string>> Malformed();
  // Frees every kept session (giftd stopping, after removing the others).
  void ClearGraveyard() { graveyard_.clear(); }

  // Every session gets a full region of each layer i with full[i] (layer
  // by layer); the first error stops.
  absl::Status EnsureFullRegions(const std::vector<bool>& full);
  // Writes `f` into layer i's slots of every session; a failure is logged
  // (rate-limited per rank) and does not stop the others.
  void PublishFactor(int i, const shm::FactorData& f, const std::string& layer);

 private:
  Map sessions_;
  // Dropped sessions with device regions whose process is still alive.
  std::vector<std::unique_ptr<RankSession>> graveyard_;
  int64_t seq_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_SESSION_TABLE_H_
