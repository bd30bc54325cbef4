#include "daemon/core/session_table.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log.h"

namespace gift::daemon {

bool ProcessGone(int64_t pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

RankSession* SessionTable::Find(const std::string& id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

RankSession* SessionTable::FindRank(int rank) const {
  for (const auto& [id, s] : sessions_) {
    if (s->rank() == rank) return s.get();
  }
  return nullptr;
}

int SessionTable::CountWithout(const std::string& replaced) const {
  int n = 0;
  for (const auto& [id, s] : sessions_) n += id != replaced;
  return n;
}

absl::Status SessionTable::CheckCapacity(int64_t pid,
                                         const std::string& replaced,
                                         const Limits& limits) const {
  int node = 0, process = 0;
  for (const auto& [id, s] : sessions_) {
    if (id == replaced) continue;
    ++node;
    process += s->spec().pid == pid;
  }
  if (node >= limits.max_local_ranks) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d ranks are registered; max_local_ranks is %d", node,
                        limits.max_local_ranks));
  }
  if (process >= limits.max_sessions_per_pid) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "process %d holds %d sessions; max_sessions_per_pid is %d", pid,
        process, limits.max_sessions_per_pid));
  }
  return absl::OkStatus();
}

std::pair<std::string, std::string> SessionTable::NextIds(
    const std::string& instance, const std::string& shm_prefix) {
  ++seq_;
  return {absl::StrCat(instance, "-", seq_),
          absl::StrCat(shm_prefix, "-", instance, "-s", seq_)};
}

RankSession& SessionTable::Add(std::unique_ptr<RankSession> s) {
  RankSession& out = *s;
  const std::string id = s->id();
  sessions_[id] = std::move(s);
  return out;
}

bool SessionTable::Heartbeat(const std::string& id, int64_t step,
                             absl::Time now) {
  RankSession* s = Find(id);
  if (s == nullptr) return false;
  s->last_seen = now;
  s->last_step = std::max(s->last_step, step);
  return true;
}

void SessionTable::ExchangeBeats(absl::Time now) {
  for (auto& [id, s] : sessions_) {
    shm::ControlHeader* h = s->header();
    h->daemon_beat.fetch_add(1, std::memory_order_release);  // wraps
    const int64_t word = h->heartbeat_ns.load(std::memory_order_acquire);
    if (word != s->last_beat_word) {
      s->last_beat_word = word;
      s->last_seen = now;
    }
  }
}

int64_t SessionTable::SlowestStep() const {
  int64_t slowest = -1;
  for (const auto& [id, s] : sessions_) {
    slowest = slowest < 0 ? s->last_step : std::min(slowest, s->last_step);
  }
  return std::max<int64_t>(slowest, 0);
}

int SessionTable::Remove(const std::string& session_id) {
  // A copy: callers often pass the map's own key, which erase() frees.
  const std::string id = session_id;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -1;
  const int rank = it->second->rank();
  if (it->second->spec().data_kind == shm::RegionKind::kCudaIpc &&
      !ProcessGone(it->second->spec().pid)) {
    // A live (stalled, or re-registered) rank may still write into its
    // device regions: freeing them now could hand the memory to another
    // session. Keep them until the process is gone.
    graveyard_.push_back(std::move(it->second));
  }
  sessions_.erase(it);  // unmaps and unlinks the rank's shared memory
  return rank;
}

void SessionTable::ReapGraveyard() {
  graveyard_.erase(std::remove_if(graveyard_.begin(), graveyard_.end(),
                                  [](const std::unique_ptr<RankSession>& s) {
                                    return ProcessGone(s->spec().pid);
                                  }),
                   graveyard_.end());
}

std::vector<std::pair<std::string, std::string>> SessionTable::Dead(
    absl::Time now, absl::Duration timeout) const {
  std::vector<std::pair<std::string, std::string>> dead;
  for (const auto& [id, s] : sessions_) {
    if (ProcessGone(s->spec().pid)) {
      dead.push_back(
          {id, absl::StrFormat("process %d is gone", s->spec().pid)});
    } else if (now - s->last_seen > timeout) {
      dead.push_back(
          {id, absl::StrFormat("no heartbeat for %s",
                               absl::FormatDuration(now - s->last_seen))});
    }
  }
  return dead;
}

std::vector<std::pair<std::string, std::string>> SessionTable::Malformed() {
  std::vector<std::pair<std::string, std::string>> bad;
  for (auto& [id, s] : sessions_) {
    s->malformed_polls = s->malformed_now ? s->malformed_polls + 1 : 0;
    s->malformed_now = false;
    if (s->malformed_polls >= kMalformedPollsBeforeDisconnect) {
      bad.push_back(
          {id, absl::StrFormat("disconnected: its shared memory was "
                               "malformed %d polls in a row (last: %s)",
                               s->malformed_polls, s->malformed_why)});
    }
  }
  return bad;
}

void SessionTable::PublishFactor(int i, const shm::FactorData& f,
                                 const std::string& layer) {
  for (auto& [id, s] : sessions_) {
    absl::Status st = shm::PublishFactor(s->entry(i), s->geometry(i),
                                         s->data(i), s->full(i), f);
    int64_t held_back = 0;
    // A rank that overwrote its slots fails every time: one line per while.
    if (!st.ok() && s->malformed_log.Allow(&held_back)) {
      LOG_WARNING("publishing %s v%d to rank %d: %s (%d more lines held back)",
                  layer, f.version, s->rank(), st.ToString(), held_back);
    }
  }
}

absl::Status SessionTable::EnsureFullRegions(const std::vector<bool>& full) {
  for (size_t i = 0; i < full.size(); ++i) {
    if (!full[i]) continue;
    for (auto& [id, s] : sessions_) {
      absl::Status st = s->EnsureFullRegion(static_cast<int>(i));
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::daemon
