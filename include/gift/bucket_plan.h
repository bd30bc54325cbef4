// gift::BucketPlan: the layout of one fused gradient bucket, which layers
// it holds, where, and how each is communicated.
//
// A bucket is a contiguous buffer of FP32 gradients; each layer is a run of
// it at an element offset, with its shape (d_out x d_in, or 1-D), its path
// (Euclidean, or the geometry-aware GIFT path with whitening and error
// feedback), its wire format (FP8, or block-scaled 4-bit) and its scale
// granularity. Layers are sorted by
// offset and do not overlap; gaps between them (framework padding) are
// never sent or written.
//
//   std::vector<gift::LayerSpec> layers = {
//       {.name = "fc2", .shape = {64, 128}, .offset = 0},
//       {.name = "bias", .shape = {64}, .offset = 8192}};
//   gift::BucketPlan plan;
//   gift::Status s = gift::BucketPlan::Create(/*epoch=*/0, 8256, layers,
//                                             &plan);
//
// Every rank of a job must use the same plan: QuantizedAllReduce::Create
// compares fingerprints across the ranks and fails on every rank when they
// differ. A giftd attachment publishes newer epochs of the same layout
// (which layers go the GIFT path); QuantizedAllReduce::AddPlan takes them
// without a daemon.
//
// Thread safety: immutable after Create; copies share the same data and
// may be used from any thread.
#ifndef GIFT_BUCKET_PLAN_H_
#define GIFT_BUCKET_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gift/export.h"
#include "gift/status.h"

namespace gift {

enum class LayerPath : int { kEuclid = 0, kGift = 1 };
// The run-time whitening transform of a GIFT layer: low-rank
// T = I + U diag(c) U^T, or a dense d_in x d_in matrix.
enum class GiftTransform : int { kLowRank = 0, kFull = 1 };
// A layer's element format on the wire: FP8 E4M3 (max 448) or E5M2 (max
// 57344), or 4-bit E2M1 in blocks along each row (d_in contiguous): NVFP4
// (blocks of 16, an E4M3 scale per block and an FP32 one per tensor) or
// MXFP4 (blocks of 32, a power-of-two scale per block, OCP MX v1.0). The
// values are stable: those of the C API's gift_wire_format_t and of giftd's
// plans.
enum class WireFormat : int { kE4M3 = 0, kE5M2 = 1, kNvfp4 = 2, kMxfp4 = 3 };
// The former name, when only the FP8 formats existed (same values).
using Fp8Format = WireFormat;

struct LayerSpec {
  // Unique within the plan. REQUIRES: not empty.
  std::string name;
  // {d_out, d_in} or {n}. REQUIRES: 1 or 2 dims, each >= 0.
  std::vector<int64_t> shape;
  // First element in the bucket. REQUIRES: >= 0; offset + size <= the
  // bucket's elements; layers sorted by offset, not overlapping.
  int64_t offset = 0;
  // Default: Euclidean. REQUIRES: GIFT layers are 2-D.
  LayerPath path = LayerPath::kEuclid;
  // Which transform the daemon builds for the layer. Default: low-rank.
  GiftTransform transform = GiftTransform::kLowRank;
  // Default: E4M3. REQUIRES: a 2-D layer in a 4-bit format has d_in a
  // multiple of its block (16 NVFP4, 32 MXFP4); a 1-D one may end in a
  // ragged block.
  WireFormat format = WireFormat::kE4M3;
  // FP8: elements per scale block; 0 = one scale per layer segment (the
  // default). 4-bit: 0 or the format's block (16, 32). REQUIRES: >= 0.
  int64_t block_size = 0;
};

class GIFT_EXPORT BucketPlan {
 public:
  // INVALID_ARGUMENT naming the layer for a bad shape (or one whose element
  // count overflows), a negative offset or block size, a layer past the
  // bucket's end, overlapping or unsorted layers, duplicate or empty names,
  // a 1-D GIFT layer, an enum value outside its range, or a negative epoch
  // or bucket size. REQUIRES: out not null.
  static Status Create(int64_t epoch, int64_t bucket_elements,
                       std::vector<LayerSpec> layers, BucketPlan* out);

  // An empty plan: valid() is false; every call that takes a plan rejects
  // it with INVALID_ARGUMENT.
  BucketPlan();
  ~BucketPlan();
  BucketPlan(const BucketPlan&);
  BucketPlan& operator=(const BucketPlan&);
  BucketPlan(BucketPlan&&) noexcept;
  BucketPlan& operator=(BucketPlan&&) noexcept;

  bool valid() const;
  int64_t epoch() const;
  // The bucket's size in floats (gaps included).
  int64_t bucket_elements() const;
  // Floats covered by layers (the bucket without its gaps).
  int64_t communicated_elements() const;
  const std::vector<LayerSpec>& layers() const;
  // Index of the layer with this name, or -1.
  int FindLayer(const std::string& name) const;
  // Stable across processes and hosts; changes when any field changes.
  uint64_t fingerprint() const;
  // Same bucket size and the same name, shape and offset of every layer
  // (paths, formats and granularity may differ): plans of successive
  // epochs must share a layout.
  bool SameLayout(const BucketPlan& other) const;

  // This layout as epoch `epoch` with exactly `gift_layers` on the GIFT
  // path (the others Euclidean). INVALID_ARGUMENT for an unknown or 1-D
  // layer, or an invalid plan. REQUIRES: out not null.
  Status WithGiftLayers(int64_t epoch,
                        const std::vector<std::string>& gift_layers,
                        BucketPlan* out) const;

 private:
  friend class QuantizedAllReduce;
  friend class DaemonAttachment;
  struct Rep;
  std::shared_ptr<const Rep> rep_;
};

}  // namespace gift

#endif  // GIFT_BUCKET_PLAN_H_
