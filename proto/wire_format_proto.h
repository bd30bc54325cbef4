// The one conversion between the protocol's gift.v1.WireFormat enum and
// kernels::WireFormat (kernels/wire_format.h), for giftd and giftctl. The
// proto numbers are the wire-format codes plus one (0 is UNSPECIFIED: keep
// the setting, or take the default), so E4M3 and E5M2 keep the numbers of
// the former Fp8Format.
//
//   ASSIGN_OR_RETURN(kernels::WireFormat f, FromProto(s.format()));
//   s.set_format(ToProto(kernels::Fp4Format::kNvfp4));
//
// Thread safety: pure functions.
#ifndef GIFT_PROTO_WIRE_FORMAT_PROTO_H_
#define GIFT_PROTO_WIRE_FORMAT_PROTO_H_

#include "absl/status/statusor.h"
#include "gift/v1/types.pb.h"
#include "kernels/wire_format.h"

namespace gift {

// REQUIRES: f.valid() (an invalid format maps to UNSPECIFIED).
v1::WireFormat ToProto(kernels::WireFormat f);

// The format of a specified enum value; INVALID_ARGUMENT for UNSPECIFIED
// and for any number outside the enum (a newer or corrupt sender).
absl::StatusOr<kernels::WireFormat> FromProto(v1::WireFormat f);

}  // namespace gift

#endif  // GIFT_PROTO_WIRE_FORMAT_PROTO_H_
