// Whether a poll of the ranks' shared memory would find anything new, and
// how long the poll thread waits before the next one. A full poll
// (daemon.h: telemetry, selection, windows, factors, gauges) runs when the
// activity it reads changed since the last full one, or when the last full
// one is `max_quiet` old (what a rank writes without stepping, a control
// change while the ranks wait: at most that late). Between steps giftd only
// reaps dead ranks, and each quiet poll doubles the wait before the next
// (from the poll interval, not past the next full poll): idle ranks cost
// four wake-ups a second at a 100 ms interval, training ranks about one
// full poll per step.
//
//   PollGate gate(absl::Milliseconds(100), absl::Seconds(1));
//   for (;;) {
//     sleep(gate.wait());
//     if (gate.Quiet({sessions, steps, refreshes}, absl::Now())) reap only;
//     else full poll;
//   }
//
// Thread safety: not thread-safe; the daemon's mutex guards it.
#ifndef GIFT_DAEMON_CORE_POLL_GATE_H_
#define GIFT_DAEMON_CORE_POLL_GATE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace gift::daemon {

class PollGate {
 public:
  // What a full poll would read from: the local sessions, the sum of their
  // ranks' step words (only compared), refreshes queued or running; with
  // peers the messages taken from them, the term and the role.
  struct Activity {
    size_t sessions = 0;
    uint64_t steps = 0;
    int refreshes = 0;
    uint64_t peer_messages = 0;
    int64_t term = 0;
    bool follower = false;
    bool operator==(const Activity&) const = default;
  };

  // REQUIRES: 0 < interval <= max_quiet.
  PollGate(absl::Duration interval, absl::Duration max_quiet)
      : interval_(interval), max_quiet_(max_quiet), wait_(interval) {}

  // True when `a` equals what the last full poll saw and that poll is less
  // than max_quiet before `now` (the next wait doubles, up to when the next
  // full poll is due); false (a full
  // poll: `a` and `now` noted, the wait back to the interval) otherwise.
  // The first call is never quiet.
  bool Quiet(const Activity& a, absl::Time now) {
    if (seen_ && a == last_ && now - last_full_ < max_quiet_) {
      // Not past the next full poll's time.
      wait_ = std::min(2 * wait_,
                       std::max(interval_, last_full_ + max_quiet_ - now));
      return true;
    }
    seen_ = true;
    last_ = a;
    last_full_ = now;
    wait_ = interval_;
    return false;
  }
  // How long to wait before the next poll.
  absl::Duration wait() const { return wait_; }

 private:
  const absl::Duration interval_, max_quiet_;
  absl::Duration wait_;
  bool seen_ = false;
  Activity last_;
  absl::Time last_full_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_POLL_GATE_H_
