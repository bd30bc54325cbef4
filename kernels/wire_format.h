// The element format of one layer on the wire of the two-phase allreduce:
// one of the FP8 formats (kernels/fp8.h: e4m3, e5m2; a float scale per
// block, kernels/quantize.h) or the block-scaled 4-bit ones (kernels/fp4.h:
// nvfp4, mxfp4; packed codes, one scale byte per block,
// kernels/quantize_fp4.h). A small value type rather than an enum so that
// every FP8 or 4-bit format converts to it implicitly (code written for
// FP8 keeps compiling) while the way back is explicit and checked by the
// caller (fp8() / fp4() REQUIRE the matching kind).
//
// Codes (the plan fingerprint, shared memory and checkpoints carry them):
// e4m3 = 0, e5m2 = 1 (the values of Fp8Format), nvfp4 = 2, mxfp4 = 3.
// A WireFormat made from an out-of-range Fp8Format / Fp4Format value or
// code is !valid() (EpochPlan::Create rejects it).
//
//   kernels::WireFormat f = kernels::Fp4Format::kNvfp4;
//   if (f.is_fp4()) QuantizeFp4(x, n, f.fp4(), ...);
//   else Quantize(x, n, {f.fp8(), block}, ...);
//
// Thread safety: a plain value; the functions are pure.
#ifndef GIFT_KERNELS_WIRE_FORMAT_H_
#define GIFT_KERNELS_WIRE_FORMAT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/fp4.h"
#include "kernels/fp8.h"

namespace gift::kernels {

class WireFormat {
 public:
  static constexpr int kE4M3Code = 0;
  static constexpr int kE5M2Code = 1;
  static constexpr int kNvfp4Code = 2;
  static constexpr int kMxfp4Code = 3;

  // E4M3.
  constexpr WireFormat() = default;
  // Implicit on purpose: every FP8 and 4-bit format is a wire format.
  constexpr WireFormat(Fp8Format f)  // NOLINT(google-explicit-constructor)
      : code_(f == Fp8Format::kE4M3   ? kE4M3Code
              : f == Fp8Format::kE5M2 ? kE5M2Code
                                      : kInvalidCode) {}
  constexpr WireFormat(Fp4Format f)  // NOLINT(google-explicit-constructor)
      : code_(f == Fp4Format::kNvfp4   ? kNvfp4Code
              : f == Fp4Format::kMxfp4 ? kMxfp4Code
                                       : kInvalidCode) {}

  // The format of `code` (see above); !valid() for any other value.
  static constexpr WireFormat FromCode(int64_t code) {
    WireFormat f;
    f.code_ = code >= 0 && code <= kMxfp4Code ? static_cast<uint8_t>(code)
                                              : kInvalidCode;
    return f;
  }

  constexpr int code() const { return code_; }
  constexpr bool valid() const { return code_ <= kMxfp4Code; }
  constexpr bool is_fp4() const {
    return code_ == kNvfp4Code || code_ == kMxfp4Code;
  }
  // REQUIRES: valid() and !is_fp4().
  constexpr Fp8Format fp8() const {
    return code_ == kE5M2Code ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  }
  // REQUIRES: is_fp4().
  constexpr Fp4Format fp4() const {
    return code_ == kMxfp4Code ? Fp4Format::kMxfp4 : Fp4Format::kNvfp4;
  }

  friend constexpr bool operator==(WireFormat a, WireFormat b) {
    return a.code_ == b.code_;
  }

 private:
  static constexpr uint8_t kInvalidCode = 0xFF;
  uint8_t code_ = kE4M3Code;
};

// "e4m3", "e5m2", "nvfp4", "mxfp4"; "invalid" for !valid().
const char* WireFormatName(WireFormat f);
// The inverse (case-insensitive); INVALID_ARGUMENT listing the names
// otherwise.
absl::StatusOr<WireFormat> ParseWireFormat(std::string_view name);

// Whether a layer of this shape ({d_out, d_in} or {n}) can take format f:
// OK for FP8 and for 1-D layers (one row; a ragged last block); a 4-bit
// format's blocks run along the row (d_in contiguous, as NVFP4 and MX
// hardware expect), so a 2-D layer needs d_in a multiple of the block
// (16 nvfp4, 32 mxfp4): INVALID_ARGUMENT saying so otherwise, or for an
// invalid format.
absl::Status CheckFormatFitsShape(WireFormat f, int64_t d_out, int64_t d_in,
                                  bool two_d);

// Code bytes of n elements of format f: n (FP8) or ceil(n / 2) (4-bit).
int64_t WireCodeBytes(WireFormat f, int64_t n);

// True when a 4-bit block-scale code flags its block as non-finite
// (kernels/quantize_fp4.h): an E4M3 NaN (0x7F, 0xFF) for nvfp4, E8M0 0xFF
// for mxfp4 — and, for mxfp4, the codes 253 and 254, which QuantizeFp4
// never writes for a finite block (its codes stop at 252) and whose 6 · 2^126
// would decode past FLT_MAX: a rank that sends them sends garbage, and the
// block is treated as flagged. Host and device.
GIFT_FP4_HD bool IsFp4NaNScale(uint8_t code, Fp4Format f) {
  return f == Fp4Format::kNvfp4 ? (code & 0x7F) == 0x7F
                                : code > kMaxFiniteMxfp4ScaleCode;
}

// True when a received nvfp4 tensor scale is one QuantizeFp4 could have
// written (positive) and decodes finitely: 2688 · s (the largest |x̂| a
// block can give, 6 · 448 · s) is finite. A NaN, infinite, zero, negative
// or too large tensor scale makes the whole segment non-finite. Host and
// device.
GIFT_FP4_HD bool IsNvfp4TensorScaleValid(float s) {
  const float top = 2688.0f * s;         // 6 · 448
  return s > 0.0f && top - top == 0.0f;  // false for NaN and ±Inf
}

// True when a 4-bit segment as received (its num_blocks block-scale codes
// and, nvfp4, its tensor scale) is flagged non-finite: any block flagged
// (IsFp4NaNScale) or an invalid tensor scale. Otherwise every value
// DequantizeFp4 decodes from it is finite, whatever its codes. The chunk
// owner's second phase checks every segment it gathers with this, so that
// garbage from a rank ends as a layer flagged non-finite on every rank, never
// as an unflagged Inf. tensor_scale: nvfp4 only (host pointer).
bool Fp4SegmentFlagged(const uint8_t* block_scales, int64_t num_blocks,
                       const float* tensor_scale, Fp4Format f);

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_WIRE_FORMAT_H_
