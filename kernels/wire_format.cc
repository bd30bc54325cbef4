#include "kernels/wire_format.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace gift::kernels {

const char* WireFormatName(WireFormat f) {
  switch (f.code()) {
    case WireFormat::kE4M3Code:
      return "e4m3";
    case WireFormat::kE5M2Code:
      return "e5m2";
    case WireFormat::kNvfp4Code:
      return "nvfp4";
    case WireFormat::kMxfp4Code:
      return "mxfp4";
  }
  return "invalid";
}

absl::StatusOr<WireFormat> ParseWireFormat(std::string_view name) {
  const std::string lower =
      absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (int code = 0; code <= WireFormat::kMxfp4Code; ++code) {
    const WireFormat f = WireFormat::FromCode(code);
    if (lower == WireFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown wire format '", std::string(name),
                   "' (want e4m3, e5m2, nvfp4 or mxfp4)"));
}

absl::Status CheckFormatFitsShape(WireFormat f, int64_t d_out, int64_t d_in,
                                  bool two_d) {
  if (!f.valid()) return absl::InvalidArgumentError("invalid wire format");
  if (!f.is_fp4() || !two_d) return absl::OkStatus();
  const int64_t block = Fp4BlockSize(f.fp4());
  if (d_in % block == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(WireFormatName(f), " scales blocks of ", block,
                   " elements along each row: d_in must be a multiple of ",
                   block, " (this layer is ", d_out, " x ", d_in, ")"));
}

bool Fp4SegmentFlagged(const uint8_t* block_scales, int64_t num_blocks,
                       const float* tensor_scale, Fp4Format f) {
  if (f == Fp4Format::kNvfp4 && !IsNvfp4TensorScaleValid(*tensor_scale)) {
    return true;
  }
  for (int64_t i = 0; i < num_blocks; ++i) {
    if (IsFp4NaNScale(block_scales[i], f)) return true;
  }
  return false;
}

int64_t WireCodeBytes(WireFormat f, int64_t n) {
  if (n <= 0) return 0;
  return f.is_fp4() ? (n + 1) / 2 : n;
}

}  // namespace gift::kernels
