// The codec part of an Fp8Backend (fp8_backend.h): one round of the
// two-phase algorithm (fp8_round.h) as the backend's kernels — quantize with
// per-block scales, dequantize, dequantize-and-accumulate the W copies of a
// chunk, in FP8 (kernels/quantize.h, kernels/accumulate.h) or block-scaled
// 4-bit formats (the *Fp4 methods, kernels/quantize_fp4.h) — with the
// round's per-segment statistics and per-layer non-finite flags collected
// where the data lives and read back once, at EndRound.
//
//   RETURN_IF_ERROR(codec.BeginRound(segments, layers));
//   RETURN_IF_ERROR(codec.Quantize(x, n, spec, codes, scales, nullptr, 0));
//   ...
//   RETURN_IF_ERROR(codec.EndRound(&stats, &flags));
//
// Bit-identity: Quantize, Dequantize and Accumulate (and their 4-bit
// counterparts) give the same bits on every backend (IEEE single
// operations, no contraction).
//
// Thread safety: not thread-safe; one round at a time.
#ifndef GIFT_CLIENT_FP8_BACKEND_CODEC_H_
#define GIFT_CLIENT_FP8_BACKEND_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/accumulate.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::client {

class Fp8Codec {
 public:
  virtual ~Fp8Codec() = default;

  // Clears `stat_slots` quantize statistics and `flags` per-layer non-finite
  // flags for the round.
  virtual absl::Status BeginRound(int stat_slots, int flags) = 0;
  // kernels::Quantize; the statistics go to `stat_slot` (-1: none).
  virtual absl::Status Quantize(const float* x, int64_t n,
                                const kernels::QuantizeSpec& spec,
                                uint8_t* codes, float* scales, float* residual,
                                int stat_slot) = 0;
  virtual absl::Status Dequantize(const uint8_t* codes, const float* scales,
                                  int64_t n, const kernels::QuantizeSpec& spec,
                                  float* out) = 0;
  // kernels::DequantizeAccumulate with zero_first; `sources` is a host array
  // of pointers of the backend's kind.
  virtual absl::Status Accumulate(const kernels::Fp8Source* sources,
                                  int num_sources, int64_t n,
                                  const kernels::QuantizeSpec& spec,
                                  float* acc) = 0;
  // Sets flag `flag` when any of x[0, n) is NaN or infinite.
  virtual absl::Status FlagNonFinite(const float* x, int64_t n, int flag) = 0;

  // 4-bit segments: kernels::QuantizeFp4 (statistics as Quantize),
  // DequantizeFp4, and DequantizeAccumulateFp4 with zero_first. tensor_scale
  // is nvfp4's (null for mxfp4).
  virtual absl::Status QuantizeFp4(const float* x, int64_t n,
                                   kernels::Fp4Format f, uint8_t* codes,
                                   uint8_t* block_scales, float* tensor_scale,
                                   float* residual, int stat_slot) = 0;
  virtual absl::Status DequantizeFp4(const uint8_t* codes,
                                     const uint8_t* block_scales,
                                     const float* tensor_scale, int64_t n,
                                     kernels::Fp4Format f, float* out) = 0;
  virtual absl::Status AccumulateFp4(const kernels::Fp4Source* sources,
                                     int num_sources, int64_t n,
                                     kernels::Fp4Format f, float* acc) = 0;
  // Sets flag `flag` when the received segment is flagged non-finite
  // (kernels::Fp4SegmentFlagged: any of the n block-scale codes is f's
  // non-finite flag or a garbage code, or the nvfp4 tensor scale — one
  // float, in the backend's memory like the codes — is invalid).
  // tensor_scale: nvfp4 only (nullable for mxfp4).
  virtual absl::Status FlagNonFiniteFp4(const uint8_t* block_scales, int64_t n,
                                        const float* tensor_scale,
                                        kernels::Fp4Format f, int flag) = 0;
  // Waits for the round and returns its statistics and flags.
  virtual absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                                std::vector<uint8_t>* flags) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_CODEC_H_
