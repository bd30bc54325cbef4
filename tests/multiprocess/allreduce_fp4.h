// The 4-bit scenario of the quantized-allreduce workers (issue 27): a mixed
// bucket of nvfp4 and mxfp4 layers (Euclidean with the default error
// feedback, one GIFT nvfp4 layer, a one-element layer, an E4M3 layer, gaps,
// two pieces) over 4 steps on every rank, the third with a NaN in one
// layer on the last rank. Checks on every rank: gaps untouched, the NaN
// layer NaN and the others finite, each finite Euclidean layer within a
// loose RelL2 of the true mean, and the payload at most 14.1% of an FP32
// ring; reports "hash=..." of every step's bucket (the test compares the
// ranks bit for bit).
//
// Thread safety: runs on the rank's main thread.
#ifndef GIFT_TESTS_MULTIPROCESS_ALLREDUCE_FP4_H_
#define GIFT_TESTS_MULTIPROCESS_ALLREDUCE_FP4_H_

#include "client/transport.h"
#include "tests/multiprocess/harness.h"

namespace gift::multiprocess {

// Returns the process exit code (0, 1 failed check, 2 setup).
int RunFp4(client::Transport& comm, const RankEnv& env);

}  // namespace gift::multiprocess

#endif  // GIFT_TESTS_MULTIPROCESS_ALLREDUCE_FP4_H_
