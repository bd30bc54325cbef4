// The committed real data (tests/data) that the giftd test ranks
// (rank_worker.cc, gpu_rank_worker.cc) feed through their allreduce: the
// layers blocks.{0,1}.mlp.fc1 (256 × 64) and blocks.{0,1}.mlp.fc2
// (64 × 128), their per-worker gradients (worker = rank % 4; fc2 from the
// 10-step run, fc1 from the snapshots 100 and 290, both cycled by step) and
// their activations (fc2: snapshots 100 and 290, fc1: 290).
//
//   ASSIGN_OR_RETURN(RealData data, LoadRealData(GIFT_TEST_DATA_DIR));
//   EpochPlan plan = RealDataPlan({{"bias", {64}}});
//   for (const BucketLayer& l : plan.layers()) {
//     if (!FillRealLayer(data, l, rank, step, bucket + l.offset)) {
//       ... the binary's own synthetic layer ...
//     }
//   }
//
// Thread safety: RealData is immutable after loading; everything here may
// be called from any thread.
#ifndef GIFT_TESTS_DAEMON_RANK_DATA_H_
#define GIFT_TESTS_DAEMON_RANK_DATA_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/epoch_plan.h"
#include "tools/npy.h"

namespace gift::testing_daemon {

inline constexpr const char* kFc1[] = {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"};
inline constexpr const char* kFc2[] = {"blocks.0.mlp.fc2", "blocks.1.mlp.fc2"};

// Activation widths (d_in) of the real layers.
inline constexpr int64_t kFc1In = 64, kFc2In = 128;

// The committed arrays, indexed by block (and snapshot).
struct RealData {
  tools::NpyArray fc2_run[2];      // [10, 4, 64, 128]
  tools::NpyArray fc1_snap[2][2];  // [snapshot][block] -> [4, 256, 64]
  tools::NpyArray fc2_acts[2][2];  // [snapshot][block] -> [512, 128]
  tools::NpyArray fc1_acts[2];     // step 290, [512, 64]
};

// Reads them from `dir` (run/ and snap/ below it).
absl::StatusOr<RealData> LoadRealData(const std::string& dir);

// A plan of one bucket: the four real layers (fc1, fc2 of block 0, then of
// block 1), then `extra` (name, shape) in order.
client::EpochPlan RealDataPlan(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& extra);

// Fills `dst` (l.size() floats) with rank `rank`'s gradient of real layer
// `l` at `step` and returns true; false, leaving `dst` alone, when `l` is
// not a real layer.
bool FillRealLayer(const RealData& data, const client::BucketLayer& l, int rank,
                   int64_t step, float* dst);

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_RANK_DATA_H_
