// The error-feedback scenario of the quantized-allreduce workers: W = 4 ranks
// each take their worker's slice of the committed 10-step fc2 gradient runs
// (tests/data/run, [10, 4, 64, 128], two layers), cycled 5 times (50 steps),
// through three allreduces: GIFT (rank-32 low-rank factor from the run's A,
// β = 1, clipped) with error feedback, the same without, and the Euclidean
// path. Reports, per layer, the running-sum drift
// ‖Σ_t out_t − Σ_t mean_t‖ / ‖Σ_t mean_t‖ of each, and the hash of the
// final sums, as "drift_ef=a,b drift_noef=c,d drift_euclid=e,f hash=h".
//
// Thread safety: runs on the rank's main thread.
#ifndef GIFT_TESTS_MULTIPROCESS_ALLREDUCE_DRIFT_H_
#define GIFT_TESTS_MULTIPROCESS_ALLREDUCE_DRIFT_H_

#include "client/transport.h"
#include "tests/multiprocess/harness.h"

namespace gift::multiprocess {

// Returns the process exit code (0, 1 failed check, 2 setup).
int RunDrift(client::Transport& comm, const RankEnv& env);

}  // namespace gift::multiprocess

#endif  // GIFT_TESTS_MULTIPROCESS_ALLREDUCE_DRIFT_H_
