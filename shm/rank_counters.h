// The daemon's check of a rank's cumulative telemetry (layout.h
// LayerCounters, StepCounters). A sample is whatever the rank wrote, so
// before the daemon uses one it makes sure each counter is where a real
// client could have put it — integers in [0, kMaxStep] that never go down,
// sums of non-negative terms finite and never going down, other sums
// finite, parts no larger than their whole — and it takes the differences
// with no overflow. A rejected sample leaves `was` as it is: the next good
// one covers both.
//
//   shm::LayerCounters now;
//   if (shm::ReadTelemetry(*entry, &now)) {
//     absl::StatusOr<shm::LayerCounters> d = shm::CountersSince(was, now);
//     if (d.ok()) { Use(*d); was = now; } else { Reject(d.status()); }
//   }
//
// Thread safety: pure functions.
#ifndef GIFT_SHM_RANK_COUNTERS_H_
#define GIFT_SHM_RANK_COUNTERS_H_

#include "absl/status/statusor.h"
#include "shm/layout.h"

namespace gift::shm {

// now − was, field by field (factor_version and version_probes: now's;
// probe_version: now's, or kMixedProbeVersion when the difference has probes
// and the version moved since `was` had probes: some of them may be of the
// older version). DATA_LOSS naming the first bad field when `now` is
// malformed or went below `was`. REQUIRES: `was` was accepted before (or is
// all zero).
absl::StatusOr<LayerCounters> CountersSince(const LayerCounters& was,
                                            const LayerCounters& now);
absl::StatusOr<StepCounters> CountersSince(const StepCounters& was,
                                           const StepCounters& now);

}  // namespace gift::shm

#endif  // GIFT_SHM_RANK_COUNTERS_H_
