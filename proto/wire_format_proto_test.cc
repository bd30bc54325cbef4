#include "proto/wire_format_proto.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WireFormatProtoTest, RoundTripsEveryFormat) {
  for (int code = 0; code <= kernels::WireFormat::kMxfp4Code; ++code) {
    const kernels::WireFormat f = kernels::WireFormat::FromCode(code);
    absl::StatusOr<kernels::WireFormat> back = FromProto(ToProto(f));
    ASSERT_OK(back.status());
    EXPECT_EQ(back->code(), code) << kernels::WireFormatName(f);
  }
}

// The numbers of the former Fp8Format stay: old senders read the same.
TEST(WireFormatProtoTest, KeepsTheFp8Numbers) {
  EXPECT_EQ(ToProto(kernels::Fp8Format::kE4M3), v1::WIRE_FORMAT_E4M3);
  EXPECT_EQ(v1::WIRE_FORMAT_E4M3, 1);
  EXPECT_EQ(ToProto(kernels::Fp8Format::kE5M2), v1::WIRE_FORMAT_E5M2);
  EXPECT_EQ(v1::WIRE_FORMAT_E5M2, 2);
  EXPECT_EQ(ToProto(kernels::Fp4Format::kNvfp4), v1::WIRE_FORMAT_NVFP4);
  EXPECT_EQ(ToProto(kernels::Fp4Format::kMxfp4), v1::WIRE_FORMAT_MXFP4);
}

TEST(WireFormatProtoTest, RefusesUnspecifiedAndUnknownValues) {
  EXPECT_THAT(FromProto(v1::WIRE_FORMAT_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FromProto(static_cast<v1::WireFormat>(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown wire format value 5")));
  EXPECT_THAT(FromProto(static_cast<v1::WireFormat>(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ToProto(kernels::WireFormat::FromCode(9)),
            v1::WIRE_FORMAT_UNSPECIFIED);
}

}  // namespace
}  // namespace gift
