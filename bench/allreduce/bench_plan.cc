#include "bench/allreduce/bench_plan.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/synthetic_testutil.h"
#include "common/status_macros.h"

namespace gift::bench {
namespace {

using client::BucketLayer;
using client::LayerPath;

int64_t BlockElements(int64_t d) { return 12 * d * d + 13 * d; }

// Appends the 12 layers of block `b` at `*offset`.
void AppendBlock(int b, int64_t d, int64_t* offset,
                 std::vector<BucketLayer>* layers) {
  const std::string p = absl::StrCat("block", b, ".");
  auto add = [&](std::string name, std::vector<int64_t> shape,
                 LayerPath path = LayerPath::kEuclid) {
    BucketLayer s{
        .name = p + name, .shape = std::move(shape), .offset = *offset};
    s.path = path;
    *offset += s.size();
    layers->push_back(std::move(s));
  };
  add("ln1.w", {d});
  add("ln1.b", {d});
  add("attn.qkv.w", {3 * d, d});
  add("attn.qkv.b", {3 * d});
  add("attn.proj.w", {d, d});
  add("attn.proj.b", {d});
  add("ln2.w", {d});
  add("ln2.b", {d});
  add("mlp.fc1.w", {4 * d, d});
  add("mlp.fc1.b", {4 * d});
  add("mlp.fc2.w", {d, 4 * d},
      b < kGiftBlocks ? LayerPath::kGift : LayerPath::kEuclid);
  add("mlp.fc2.b", {d});
}

}  // namespace

absl::StatusOr<BenchBucket> MakeBenchBucket(int64_t elements) {
  int64_t d = 64;
  if (kBlocks * BlockElements(d) > elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket of ", elements, " elements is below the ",
                     kBlocks * BlockElements(d), " of the smallest stack"));
  }
  while (kBlocks * BlockElements(d + 64) <= elements) d += 64;
  std::vector<BucketLayer> layers;
  int64_t offset = 0;
  for (int b = 0; b < kBlocks; ++b) AppendBlock(b, d, &offset, &layers);
  const int64_t rows = (elements - offset) / d;
  if (rows > 0) {
    layers.push_back({.name = "embed.w", .shape = {rows, d}, .offset = offset});
    offset += rows * d;
  }
  if (offset < elements) {
    layers.push_back(
        {.name = "tail", .shape = {elements - offset}, .offset = offset});
  }
  ASSIGN_OR_RETURN(client::EpochPlan plan,
                   client::EpochPlan::Create(1, elements, std::move(layers)));
  BenchBucket out{.plan = std::move(plan), .factors = {}, .hidden = d};
  for (int b = 0; b < kGiftBlocks; ++b) {
    RETURN_IF_ERROR(out.factors.Put(
        absl::StrCat("block", b, ".mlp.fc2.w"),
        client::SyntheticLowRank(1, 4 * d, kGiftRank, 1000 + b)));
  }
  return out;
}

void FillGradients(const client::EpochPlan& plan, int rank, float* bucket) {
  for (size_t l = 0; l < plan.layers().size(); ++l) {
    const BucketLayer& s = plan.layers()[l];
    const uint64_t seed = client::Mix64(rank * 1000003ULL + l);
    const int64_t cols = s.d_in();
    float* x = bucket + s.offset;
    for (int64_t row = 0; row < s.d_out(); ++row) {
      // Row magnitudes spread over ~3 octaves, as gradient rows are.
      const float mag =
          1e-3f * std::exp2(3.0f * client::SyntheticValue(seed ^ 0x5eed, row));
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = row * cols + c;
        x[i] = mag * client::SyntheticValue(seed, i);
      }
    }
  }
}

}  // namespace gift::bench
