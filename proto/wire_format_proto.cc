#include "proto/wire_format_proto.h"

#include "absl/strings/str_cat.h"

namespace gift {

v1::WireFormat ToProto(kernels::WireFormat f) {
  if (!f.valid()) return v1::WIRE_FORMAT_UNSPECIFIED;
  return static_cast<v1::WireFormat>(f.code() + 1);
}

absl::StatusOr<kernels::WireFormat> FromProto(v1::WireFormat f) {
  const int n = static_cast<int>(f);
  if (f == v1::WIRE_FORMAT_UNSPECIFIED || !v1::WireFormat_IsValid(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wire format value ", n,
                     " (want WIRE_FORMAT_E4M3, _E5M2, _NVFP4 or _MXFP4)"));
  }
  const kernels::WireFormat out = kernels::WireFormat::FromCode(n - 1);
  if (!out.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire format value ", n, " has no kernel format"));
  }
  return out;
}

}  // namespace gift
