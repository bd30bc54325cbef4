// The bucket the allreduce benchmark averages: a transformer-like stack of
// layers fused into one bucket of a given size, as a framework would fuse
// the gradients of consecutive layers (DESIGN §3).
//
// Layout for a bucket of n FP32 elements: a hidden size d (a multiple of 64,
// the largest with 5 blocks of ~12 d² elements fitting, so the 4 / 64 / 256
// MiB buckets get d = 128 / 512 / 1024), then 5 pre-LN transformer blocks of
// 12 layers each, in bucket order:
//   ln1.{w,b} [d], attn.qkv [3d × d] + bias [3d], attn.proj [d × d] + bias
//   [d], ln2.{w,b} [d], mlp.fc1 [4d × d] + bias [4d], mlp.fc2 [d × 4d] + bias
//   [d]
// and the rest of the bucket as an embedding slice [rows × d] and a 1-D
// tail, so every element is communicated (no gaps). The mlp.fc2 weights of
// the first two blocks take the GIFT path with a rank-32 low-rank factor on
// their 4d inputs (the paper's choice of fc2 layers at r = 32); every other
// layer is Euclidean E4M3 with per-layer scales.
//
// Gradients: deterministic per (rank, layer), uniform noise times a per-row
// magnitude spread over ~3 octaves, so ranks differ and scales vary.
//
//   ASSIGN_OR_RETURN(BenchBucket b, MakeBenchBucket(int64_t{64} << 18));
//   FillGradients(b.plan, rank, input.data());
//
// Thread safety: pure functions.
#ifndef GIFT_BENCH_ALLREDUCE_BENCH_PLAN_H_
#define GIFT_BENCH_ALLREDUCE_BENCH_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/epoch_plan.h"
#include "client/versioned_factors.h"

namespace gift::bench {

// Rank of the GIFT factors.
inline constexpr int64_t kGiftRank = 32;
// Transformer blocks in every bucket.
inline constexpr int kBlocks = 5;
// Blocks whose mlp.fc2 takes the GIFT path.
inline constexpr int kGiftBlocks = 2;

struct BenchBucket {
  client::EpochPlan plan;
  client::VersionedFactors factors;  // version 1 of every GIFT layer
  int64_t hidden = 0;                // d
};

// REQUIRES: elements >= 5 · 12 · 64² (about 1 MiB of floats).
absl::StatusOr<BenchBucket> MakeBenchBucket(int64_t elements);

// Fills every layer of `bucket` with rank's gradients.
void FillGradients(const client::EpochPlan& plan, int rank, float* bucket);

}  // namespace gift::bench

#endif  // GIFT_BENCH_ALLREDUCE_BENCH_PLAN_H_
