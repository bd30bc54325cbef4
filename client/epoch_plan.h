// EpochPlan (the public gift::BucketPlan wraps one): the layout of one
// fused gradient bucket at one plan epoch: which layers it holds, where, and
// how each is communicated (DESIGN §3: "per-layer metadata travels with the
// bucket plan, not with every step").
//
// A plan is an ordered list of layers, each a contiguous run of FP32
// elements of the bucket at an element offset, with its shape (d_out × d_in,
// or 1-D), its path (Euclidean or GIFT, and for GIFT the transform), its
// wire format (FP8 or 4-bit) and its scale granularity. Layers are sorted by
// offset and must not overlap; gaps between them are allowed (framework
// padding) and are never communicated or written. Empty layers are allowed.
//
// Every rank must run the same plan. Fingerprint() is a stable 64-bit FNV-1a
// hash of a canonical serialisation (identical in every process, on every
// host of the same byte order); CheckPlanAcrossRanks compares it across the
// job with one tiny allreduce and turns a mismatch into a clear error on
// every rank instead of a hang or a meaningless sum.
//
//   std::vector<BucketLayer> layers = {
//       {.name = "fc2", .shape = {64, 128}, .offset = 0,
//        .path = LayerPath::kGift},
//       {.name = "bias", .shape = {64}, .offset = 8192}};
//   ASSIGN_OR_RETURN(EpochPlan plan,
//                    EpochPlan::Create(/*epoch=*/1, 8256, layers));
//   RETURN_IF_ERROR(CheckPlanAcrossRanks(*comm, plan));
//
// Thread safety: immutable after Create; const methods are thread-safe.
#ifndef GIFT_CLIENT_EPOCH_PLAN_H_
#define GIFT_CLIENT_EPOCH_PLAN_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/transport.h"
#include "kernels/wire_format.h"

namespace gift::client {

enum class LayerPath : uint8_t { kEuclid = 0, kGift = 1 };
// The run-time whitening transform of a GIFT layer (DESIGN §2).
enum class GiftTransform : uint8_t { kLowRank = 0, kFull = 1 };

const char* LayerPathName(LayerPath path);

struct BucketLayer {
  // Unique within the plan; keys factors and telemetry. REQUIRES: not empty.
  std::string name;
  // {d_out, d_in} or {n} (1-D). REQUIRES: 1 or 2 dims, each >= 0.
  std::vector<int64_t> shape;
  // First element in the bucket. REQUIRES: >= 0, and offset + size <=
  // bucket elements; layers sorted by offset, not overlapping.
  int64_t offset = 0;
  // Default: Euclidean. REQUIRES: GIFT layers are 2-D.
  LayerPath path = LayerPath::kEuclid;
  // Used only on the GIFT path. Default: low-rank.
  GiftTransform transform = GiftTransform::kLowRank;
  // The element format on the wire: FP8 (e4m3, e5m2) or block-scaled 4-bit
  // (nvfp4, mxfp4; kernels/wire_format.h). Default: E4M3. REQUIRES: valid().
  kernels::WireFormat format = kernels::Fp8Format::kE4M3;
  // FP8: elements per scale block within each chunk segment; 0 = one scale
  // per segment of the layer (per-layer granularity, the default). 4-bit:
  // the format fixes it (16 for nvfp4, 32 for mxfp4; blocks start at each
  // segment's start); 0 or that size. REQUIRES: >= 0.
  int64_t block_size = 0;

  int64_t size() const;
  int64_t d_out() const { return shape.empty() ? 0 : shape[0]; }
  // 1 for a 1-D layer.
  int64_t d_in() const { return shape.size() == 2 ? shape[1] : 1; }
};

class EpochPlan {
 public:
  // Validates and builds a plan: INVALID_ARGUMENT naming the layer for a bad
  // shape, negative offset or block size, a layer past the bucket end,
  // overlapping or unsorted layers, duplicate or empty names, or a 1-D GIFT
  // layer. REQUIRES: epoch >= 0, bucket_elements >= 0.
  static absl::StatusOr<EpochPlan> Create(int64_t epoch,
                                          int64_t bucket_elements,
                                          std::vector<BucketLayer> layers);

  int64_t epoch() const { return epoch_; }
  int64_t bucket_elements() const { return bucket_elements_; }
  const std::vector<BucketLayer>& layers() const { return layers_; }
  // Elements covered by layers (the bucket without its gaps).
  int64_t communicated_elements() const { return communicated_; }
  // Position of layer i in the gap-free concatenation of the layers.
  int64_t packed_offset(int i) const { return packed_offsets_[i]; }
  // Index of the layer with this name, or -1.
  int FindLayer(const std::string& name) const;
  bool has_gift_layers() const;

  // Stable across processes and runs; changes when any field changes.
  uint64_t Fingerprint() const { return fingerprint_; }
  // True when `other` has the same epoch-independent layout: bucket size and
  // the name, shape and offset of every layer (paths, formats and
  // granularity may differ). Plans of successive epochs must share a layout.
  bool SameLayout(const EpochPlan& other) const;

 private:
  EpochPlan() = default;

  int64_t epoch_ = 0;
  int64_t bucket_elements_ = 0;
  int64_t communicated_ = 0;
  std::vector<BucketLayer> layers_;
  std::vector<int64_t> packed_offsets_;
  uint64_t fingerprint_ = 0;
};

// FNV-1a 64 over bytes, seed = the FNV offset basis; stable everywhere.
uint64_t Fnv1a64(const void* data, size_t bytes,
                 uint64_t seed = 0xcbf29ce484222325ULL);

// Collective: every rank passes its plan. OK when all fingerprints agree;
// otherwise FAILED_PRECONDITION "bucket plan mismatch across ranks (this
// rank's fingerprint …)" on every rank. Communication errors pass through.
absl::Status CheckPlanAcrossRanks(Transport& comm, const EpochPlan& plan);

// Drops the oldest held plans until at most `n` remain, never the epoch in
// use: the ranks switch only to an epoch every one of them holds, so under
// a fast run of plans a rank may take several newer ones while the job
// stays on an old epoch, and must still hold that one.
template <typename Plan>
void KeepNewestPlans(std::map<int64_t, Plan>& plans, size_t n, int64_t in_use) {
  for (auto it = plans.begin(); plans.size() > n && it != plans.end();) {
    it = it->first == in_use ? std::next(it) : plans.erase(it);
  }
}

}  // namespace gift::client

#endif  // GIFT_CLIENT_EPOCH_PLAN_H_
