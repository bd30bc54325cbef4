// Whether a poll of the ranks' shared memory would find anything new: the
// poll thread runs a full poll (daemon.h: telemetry, selection, windows,
// factors, gauges) only when the activity it sees changed since the last
// full one, or after `max_quiet` quiet polls in a row (what a rank writes
// without stepping, a control change while the ranks wait: at most that
// many polls late). Between steps giftd then only reaps dead ranks.
//
//   PollGate gate(/*max_quiet=*/9);
//   if (gate.Quiet({sessions, steps, refreshes})) { reap only; }
//
// Thread safety: not thread-safe; the daemon's mutex guards it.
#ifndef GIFT_DAEMON_CORE_POLL_GATE_H_
#define GIFT_DAEMON_CORE_POLL_GATE_H_

#include <cstddef>
#include <cstdint>

namespace gift::daemon {

class PollGate {
 public:
  // What a full poll would read from: the local sessions, the sum of their
  // ranks' step words (only compared), refreshes queued or running.
  struct Activity {
    size_t sessions = 0;
    uint64_t steps = 0;
    int refreshes = 0;
    bool operator==(const Activity&) const = default;
  };

  explicit PollGate(int max_quiet) : max_quiet_(max_quiet) {}

  // True when `now` equals what the last full poll saw and fewer than
  // max_quiet quiet polls came since; false (a full poll, `now` noted)
  // otherwise. The first call is never quiet.
  bool Quiet(const Activity& now) {
    if (seen_ && now == last_ && quiet_ < max_quiet_) {
      ++quiet_;
      return true;
    }
    seen_ = true;
    last_ = now;
    quiet_ = 0;
    return false;
  }

 private:
  const int max_quiet_;
  bool seen_ = false;
  Activity last_;
  int quiet_ = 0;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_POLL_GATE_H_
