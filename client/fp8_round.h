// One two-phase quantized round over one piece of a bucket (DESIGN §3): the
// engine under AllReduceEngine's `fp8` mode. Each layer travels in its own
// wire format (BucketLayer::format): FP8 with float scales, or block-scaled
// 4-bit (nvfp4, mxfp4) with one scale byte per block; the steps below are
// the same for both, only the codec calls and the wire layout
// (chunking.h) differ.
//
// Phase 1 (reduce-scatter as all-to-all): this rank quantizes every segment
// of every chunk with its own local scale(s) (worker error feedback on the
// GIFT path: the Quantize residual output) and sends chunk j to rank j in
// the wire format of chunking.h — one AllToAllV of packed [codes | scales].
// Phase 2: as owner of chunk `rank`, it dequantizes the W incoming copies and
// sums them in FP32 in rank order (DequantizeAccumulate: bit-reproducible),
// adds its owner residual on segments with owner feedback (carried into the
// step's coordinates at a factor or path change: LayerIo::owner_carry; with
// a release cap, only up to cap × the sum's norm, the rest kept for later),
// re-quantizes with fresh scales (updating that residual) and all-gathers
// the FP8 chunk with its scales (one AllGatherV). Every rank then
// dequantizes every chunk and divides by W once, in FP32, into the layers'
// destinations.
//
// The arithmetic and the staging buffers come from three parts of an
// Fp8Backend (fp8_backend.h) — its memory, FP8 codec and vector math: host
// memory with the CPU kernels, or device memory with the CUDA kernels on the
// communicator's stream; the steps are the same.
//
// A NaN/Inf anywhere in a block on any rank makes the owner's sum and thus
// its re-quantized scale NaN (4-bit: the block scale's NaN code); every rank
// sees that scale after the gather and reports the layer as non-finite (the
// caller marks the whole layer).
//
// Thread safety: not thread-safe (reuses its buffers).
#ifndef GIFT_CLIENT_FP8_ROUND_H_
#define GIFT_CLIENT_FP8_ROUND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/chunking.h"
#include "client/fp8_backend_codec.h"
#include "client/fp8_backend_math.h"
#include "client/fp8_backend_memory.h"
#include "client/fp8_backend_transforms.h"
#include "client/transport.h"
#include "kernels/quantize.h"

namespace gift::client {

// What becomes of an owner residual that is not in this step's coordinates.
enum class OwnerCarry {
  kZero,       // zeroed (first use, or its coordinates are unknown)
  kReproject,  // whitened by owner_from: whole rows → (R T_from⁻¹) T_to
  kWhiten,     // gradient coordinates (Euclidean): whole rows → R T_to
  kUnwhiten,   // whitened by owner_from, now Euclidean: whole rows → R T⁻¹
};

// Where one layer's elements come from and go to in this round.
struct LayerIo {
  const float* src = nullptr;  // the layer's elements to send
  float* dst = nullptr;        // the averaged result (may equal src)
  // Worker residual over the whole layer (GIFT or Euclidean error
  // feedback), or null.
  float* worker_residual = nullptr;
  // The owner keeps a residual for this layer's segments.
  bool owner_feedback = false;
  // The owner residual of this layer's segments is not in this step's
  // coordinates (factor switch, path change or first use): before use it is
  // zeroed, or (owner_carry) its whole rows are carried into this step's
  // coordinates (T acts along d_in, row by row) and the partial rows at the
  // segment's ends are zeroed.
  bool reset_owner_residual = false;
  OwnerCarry owner_carry = OwnerCarry::kZero;
  const LayerFactor* owner_from = nullptr;  // kReproject, kUnwhiten
  const LayerFactor* owner_to = nullptr;    // kReproject, kWhiten
  bool gift = false;
};

// What a round adds to the step's telemetry.
struct RoundOutcome {
  std::vector<kernels::QuantizeStats> stats;  // per layer, merged
  std::vector<bool> nonfinite;                // per layer, or-ed
  uint64_t bytes_euclid = 0;
  uint64_t bytes_gift = 0;

  void Reset(size_t layers);
};

class Fp8Round {
 public:
  // REQUIRES: no argument null, all outlive this; the parts are one
  // backend's, whose memory kind is comm's. owner_release_cap
  // (AllReduceEngineOptions): > 0 caps what an owner residual releases
  // into a step (VectorMath::AddCapped, the rest stays in it); 0 = no cap.
  Fp8Round(Transport* comm, BackendMemory* memory, Fp8Codec* codec,
           VectorMath* math, GiftTransforms* transforms,
           float owner_release_cap);

  // Runs the round over `piece`. io has one entry per plan layer; every
  // pointer is of the backend's memory kind.
  // owner_residual: chunk-sized FP32 residual of this rank's chunk, or null
  // when no segment uses owner feedback.
  absl::Status Run(const EpochPlan& plan, const PieceLayout& piece,
                   const std::vector<LayerIo>& io, float* owner_residual,
                   RoundOutcome* outcome);

 private:
  absl::Status Pack(const EpochPlan& plan, const PieceLayout& piece,
                    const std::vector<LayerIo>& io);
  absl::Status Reduce(const EpochPlan& plan, const ChunkLayout& mine,
                      const std::vector<LayerIo>& io, float* owner_residual);
  absl::Status Unpack(const EpochPlan& plan, const PieceLayout& piece,
                      const std::vector<LayerIo>& io);
  // One segment in the layer's format (FP8 or 4-bit).
  absl::Status QuantizeSegment(const BucketLayer& l, const float* x, int64_t n,
                               const SegmentWire& wire, float* residual,
                               int stat_slot);
  // Zeroes or carries (LayerIo::owner_carry) the owner residual `res` of
  // segment s at a switch.
  absl::Status ResetOwnerResidual(const BucketLayer& l, const Segment& s,
                                  const LayerIo& x, float* res);
  absl::Status AccumulateSegment(const BucketLayer& l, const ChunkLayout& mine,
                                 const Segment& s, float* acc);
  absl::Status Collect(const PieceLayout& piece, RoundOutcome* outcome);
  void CountBytes(const EpochPlan& plan, const PieceLayout& piece,
                  const std::vector<LayerIo>& io, uint64_t a2a_bytes,
                  uint64_t gather_bytes, RoundOutcome* outcome) const;

  Transport* const comm_;
  BackendMemory* const memory_;
  Fp8Codec* const codec_;
  VectorMath* const math_;
  GiftTransforms* const transforms_;
  std::unique_ptr<Fp8Buffer> send_, recv_, gather_send_, gather_recv_, acc_,
      carry_, keep_;
  const float owner_release_cap_;
  std::vector<size_t> offsets_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_ROUND_H_
