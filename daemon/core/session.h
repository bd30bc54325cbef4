// One registered rank as giftd sees it: the rank's identity, its control
// block and data regions (shm/), and what the daemon last read from them.
// Creating a session creates the shared memory; destroying it unmaps and
// unlinks every object (a reaped or departed rank leaves nothing behind).
//
//   ASSIGN_OR_RETURN(auto s, RankSession::Create(spec));
//   shm::LayerEntry* e = s->entry(0);
//
// Everything the rank writes is untrusted: the sizes the daemon reads and
// writes with are the session's own (geometry()), and so are the counts it
// keeps of what it already read (consumed, last_counters, last_totals).
//
// Thread safety: not thread-safe; the daemon holds its mutex around every
// use.
#ifndef GIFT_DAEMON_CORE_SESSION_H_
#define GIFT_DAEMON_CORE_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/log.h"
#include "shm/layout.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::daemon {

struct SessionSpec {
  std::string session_id;
  std::string name_prefix;  // POSIX names: prefix + "-ctl", "-L<i>", ...
  std::string daemon_instance;
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  int64_t pid = 0;
  shm::RegionKind data_kind = shm::RegionKind::kPosix;
  int device = 0;
  std::vector<shm::LayerDecl> layers;
};

// Polls in a row in which something a rank wrote was malformed before the
// daemon disconnects it (drops its session as a reap would): 20 polls are
// 2 s at the default poll interval, long past any torn write of a working
// client, and one good poll starts the count again.
inline constexpr int kMalformedPollsBeforeDisconnect = 20;

class RankSession {
 public:
  static absl::StatusOr<std::unique_ptr<RankSession>> Create(
      const SessionSpec& spec);

  const SessionSpec& spec() const { return spec_; }
  const std::string& id() const { return spec_.session_id; }
  int rank() const { return spec_.rank; }
  void* block() const { return control_->data(); }
  const shm::RegionDesc& control_desc() const { return control_->desc(); }
  shm::ControlHeader* header() const { return shm::Header(block()); }
  shm::LayerEntry* entry(int i) const {
    return shm::Entry(block(), static_cast<uint32_t>(i));
  }
  // Layer i's sizes as the daemon created its regions.
  const shm::LayerGeometry& geometry(int i) const { return geometry_[i]; }
  shm::Region* data(int i) const { return data_[i].get(); }
  shm::Region* full(int i) const { return full_[i].get(); }
  int layers() const { return static_cast<int>(data_.size()); }

  // Creates the layer's full region (A accumulators, dense slots) if it has
  // none, and records it in the entry. The caller publishes the plan after.
  absl::Status EnsureFullRegion(int i);

  // Daemon-side bookkeeping.
  absl::Time last_seen;
  int64_t last_step = 0;  // the newest step reported (heartbeat or block)
  // The rank's heartbeat word (ControlHeader::heartbeat_ns) as last read:
  // a change is a beat (SessionTable::ExchangeBeats).
  int64_t last_beat_word = 0;
  // The last accepted telemetry samples.
  std::vector<shm::LayerCounters> last_counters;
  shm::StepCounters last_totals{};
  // Per layer: the newest window the daemon consumed (−1: none).
  std::vector<int64_t> consumed;
  // Malformed shared memory: polls in a row with some (see
  // kMalformedPollsBeforeDisconnect), whether this poll had some, the first
  // reason of this poll, and the rate of its log lines.
  int malformed_polls = 0;
  bool malformed_now = false;
  std::string malformed_why;
  LogLimiter malformed_log{absl::Seconds(10)};

 private:
  explicit RankSession(SessionSpec spec) : spec_(std::move(spec)) {}

  SessionSpec spec_;
  std::unique_ptr<shm::Region> control_;
  std::vector<std::unique_ptr<shm::Region>> data_;
  std::vector<std::unique_ptr<shm::Region>> full_;
  std::vector<shm::LayerGeometry> geometry_;
  uint32_t full_generation_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_SESSION_H_
