// One codec interface over kernels/quantize.h (FP8) and
// kernels/quantize_fp4.h (4-bit) for the formats gift-fidelity measures
// (kernels::WireFormat: e4m3, e5m2, nvfp4, mxfp4), so that the one-step
// round trip and the worker simulation run unchanged on either.
//
//   ASSIGN_OR_RETURN(kernels::WireFormat f,
//                    kernels::ParseWireFormat("nvfp4"));
//   WireSpec spec(f, /*block_size=*/0);
//   Encoded e;
//   RETURN_IF_ERROR(Encode(x, n, spec, /*residual=*/nullptr, &e));
//   RETURN_IF_ERROR(Decode(e, n, spec, out));
//
// FP8 goes through kernels::Quantize/Dequantize/DequantizeAccumulate exactly
// as before this file existed (one scale per segment, or per block_size
// elements). 4-bit goes through kernels::QuantizeFp4/DequantizeFp4/
// DequantizeAccumulateFp4 over the segment as one call: blocks of 16
// (nvfp4) or 32 (mxfp4) consecutive elements of the row-major flattening,
// so for a d_out × d_in matrix they run along d_in and straddle a row end
// only when d_in is not a multiple of the block (as on the wire, where
// giftd quantizes flat chunks); nvfp4's FP32 tensor scale is per segment
// (per call). block_size applies to FP8 only; a 4-bit format's block is
// fixed, so euclid_block<B> equals euclid there.
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_TOOLS_FIDELITY_CODEC_H_
#define GIFT_TOOLS_FIDELITY_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/quantize.h"
#include "kernels/wire_format.h"

namespace gift::fidelity {

// A format and, for FP8, the elements per scale (0 = one per segment).
struct WireSpec {
  kernels::WireFormat format;
  int64_t block_size = 0;

  WireSpec() = default;
  WireSpec(kernels::WireFormat f, int64_t block)
      : format(f), block_size(block) {}
  explicit WireSpec(kernels::WireFormat f) : format(f) {}
  // The FP8 specs of kernels/quantize.h are wire specs (implicit on purpose:
  // the FP8 callers and tests predate this file).
  WireSpec(const kernels::QuantizeSpec& s)  // NOLINT(runtime/explicit)
      : format(s.format), block_size(s.block_size) {}

  // REQUIRES: !format.is_fp4().
  kernels::QuantizeSpec Fp8Spec() const { return {format.fp8(), block_size}; }
};

// One encoded segment: FP8 codes (one byte each) and float scales, or packed
// 4-bit codes, a scale byte per block and (nvfp4) the tensor scale.
struct Encoded {
  std::vector<uint8_t> codes;
  std::vector<float> scales;          // FP8
  std::vector<uint8_t> block_scales;  // 4-bit
  float tensor_scale = 1.0f;          // nvfp4
};

// Quantizes x[0, n); residual (nullable, may alias x) gets x − x̂.
absl::Status Encode(const float* x, int64_t n, const WireSpec& spec,
                    float* residual, Encoded* out);
// out[i] = x̂_i.
absl::Status Decode(const Encoded& e, int64_t n, const WireSpec& spec,
                    float* out);
// acc[i] = Σ_k x̂_k[i] in source order, each sum rounded to float (the chunk
// owner's accumulation; acc is overwritten).
absl::Status DecodeAccumulate(const std::vector<const Encoded*>& in, int64_t n,
                              const WireSpec& spec, float* acc);
// Bytes on the wire for one encoded segment of n elements: codes plus
// scales (4 bytes per FP8 scale; a byte per 4-bit block, plus the 4-byte
// tensor scale for nvfp4).
double EncodedBytes(int64_t n, const WireSpec& spec);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_CODEC_H_
