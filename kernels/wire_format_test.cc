#include "kernels/wire_format.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/quantize_fp4.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;

TEST(WireFormatTest, CodesKeepTheFp8ValuesAndAddTheFourBitOnes) {
  EXPECT_EQ(WireFormat().code(), 0);
  EXPECT_EQ(WireFormat(Fp8Format::kE4M3).code(), 0);
  EXPECT_EQ(WireFormat(Fp8Format::kE5M2).code(), 1);
  EXPECT_EQ(WireFormat(Fp4Format::kNvfp4).code(), 2);
  EXPECT_EQ(WireFormat(Fp4Format::kMxfp4).code(), 3);
  for (int c = 0; c < 4; ++c) {
    EXPECT_TRUE(WireFormat::FromCode(c).valid());
    EXPECT_EQ(WireFormat::FromCode(c).code(), c);
    EXPECT_EQ(WireFormat::FromCode(c).is_fp4(), c >= 2);
  }
  EXPECT_FALSE(WireFormat::FromCode(4).valid());
  EXPECT_FALSE(WireFormat::FromCode(-1).valid());
  EXPECT_FALSE(WireFormat(static_cast<Fp8Format>(2)).valid());
  EXPECT_FALSE(WireFormat(static_cast<Fp4Format>(7)).valid());
}

TEST(WireFormatTest, ConvertsBackToItsKind) {
  EXPECT_EQ(WireFormat(Fp8Format::kE5M2).fp8(), Fp8Format::kE5M2);
  EXPECT_EQ(WireFormat(Fp8Format::kE4M3).fp8(), Fp8Format::kE4M3);
  EXPECT_EQ(WireFormat(Fp4Format::kMxfp4).fp4(), Fp4Format::kMxfp4);
  EXPECT_EQ(WireFormat(Fp4Format::kNvfp4).fp4(), Fp4Format::kNvfp4);
  EXPECT_TRUE(WireFormat(Fp8Format::kE5M2) == Fp8Format::kE5M2);
  EXPECT_FALSE(WireFormat(Fp4Format::kNvfp4) == Fp8Format::kE4M3);
  EXPECT_TRUE(WireFormat(Fp4Format::kNvfp4) != Fp4Format::kMxfp4);
}

TEST(WireFormatTest, NamesParseBack) {
  for (int c = 0; c < 4; ++c) {
    const WireFormat f = WireFormat::FromCode(c);
    absl::StatusOr<WireFormat> p = ParseWireFormat(WireFormatName(f));
    ASSERT_OK(p);
    EXPECT_EQ(*p, f);
  }
  EXPECT_EQ(*ParseWireFormat("NVFP4"), Fp4Format::kNvfp4);
  EXPECT_STREQ(WireFormatName(WireFormat::FromCode(9)), "invalid");
  EXPECT_THAT(ParseWireFormat("fp4"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WireFormatTest, CodeBytes) {
  EXPECT_EQ(WireCodeBytes(Fp8Format::kE4M3, 7), 7);
  EXPECT_EQ(WireCodeBytes(Fp4Format::kNvfp4, 7), 4);
  EXPECT_EQ(WireCodeBytes(Fp4Format::kMxfp4, 8), 4);
  EXPECT_EQ(WireCodeBytes(Fp4Format::kMxfp4, 0), 0);
}

TEST(WireFormatTest, NaNScaleFlags) {
  EXPECT_TRUE(IsFp4NaNScale(0x7F, Fp4Format::kNvfp4));
  EXPECT_TRUE(IsFp4NaNScale(0xFF, Fp4Format::kNvfp4));
  EXPECT_FALSE(IsFp4NaNScale(0x7E, Fp4Format::kNvfp4));
  EXPECT_TRUE(IsFp4NaNScale(0xFF, Fp4Format::kMxfp4));
  EXPECT_FALSE(IsFp4NaNScale(0x7F, Fp4Format::kMxfp4));
  EXPECT_FALSE(IsFp4NaNScale(0xFC, Fp4Format::kMxfp4));
  // Codes no finite block is encoded with are garbage: flagged.
  EXPECT_TRUE(IsFp4NaNScale(0xFD, Fp4Format::kMxfp4));
  EXPECT_TRUE(IsFp4NaNScale(0xFE, Fp4Format::kMxfp4));
}

TEST(WireFormatTest, LargestFiniteBlockScalesDecodeFinitely) {
  const float big = std::numeric_limits<float>::max();
  EXPECT_LE(Mxfp4ScaleCode(big), kMaxFiniteMxfp4ScaleCode);
  EXPECT_FALSE(IsFp4NaNScale(Mxfp4ScaleCode(big), Fp4Format::kMxfp4));
  EXPECT_TRUE(IsNvfp4TensorScaleValid(Nvfp4TensorScale(big)));
  for (const Fp4Format f : {Fp4Format::kNvfp4, Fp4Format::kMxfp4}) {
    // A block of the largest finite values round-trips to finite values.
    std::vector<float> x(32, big);
    x[3] = -big;
    std::vector<uint8_t> codes(Fp4PackedBytes(32)), scales(Fp4NumBlocks(32, f));
    float ts = 0;
    ASSERT_OK(QuantizeFp4(x.data(), 32, f, codes.data(), scales.data(), &ts,
                          nullptr, nullptr));
    EXPECT_FALSE(Fp4SegmentFlagged(scales.data(), scales.size(), &ts, f));
    std::vector<float> out(32);
    ASSERT_OK(
        DequantizeFp4(codes.data(), scales.data(), &ts, 32, f, out.data()));
    for (float v : out) EXPECT_TRUE(std::isfinite(v)) << Fp4FormatName(f);
  }
}

TEST(WireFormatTest, GarbageTensorScalesFlagTheSegment) {
  const uint8_t scale = 0x38;  // E4M3 1.0
  for (const float ts : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::max() / 1000.0f}) {
    EXPECT_TRUE(Fp4SegmentFlagged(&scale, 1, &ts, Fp4Format::kNvfp4)) << ts;
  }
  const float ok = 1e-3f;
  EXPECT_FALSE(Fp4SegmentFlagged(&scale, 1, &ok, Fp4Format::kNvfp4));
  // mxfp4 has no tensor scale (nullptr is fine).
  EXPECT_FALSE(Fp4SegmentFlagged(&scale, 1, nullptr, Fp4Format::kMxfp4));
  const uint8_t bad[] = {0x7F, 0xFD};
  EXPECT_TRUE(Fp4SegmentFlagged(bad + 1, 1, nullptr, Fp4Format::kMxfp4));
  EXPECT_TRUE(Fp4SegmentFlagged(bad, 1, &ok, Fp4Format::kNvfp4));
}

TEST(WireFormatTest, FourBitNeedsWholeBlocksPerRow) {
  EXPECT_TRUE(CheckFormatFitsShape(Fp8Format::kE4M3, 3, 7, true).ok());
  EXPECT_TRUE(CheckFormatFitsShape(Fp4Format::kNvfp4, 3, 32, true).ok());
  EXPECT_TRUE(CheckFormatFitsShape(Fp4Format::kNvfp4, 1, 7, false).ok());
  EXPECT_TRUE(CheckFormatFitsShape(Fp4Format::kMxfp4, 5, 64, true).ok());
  EXPECT_THAT(CheckFormatFitsShape(Fp4Format::kMxfp4, 5, 48, true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("multiple of 32")));
  EXPECT_FALSE(CheckFormatFitsShape(Fp4Format::kNvfp4, 2, 24, true).ok());
  EXPECT_FALSE(CheckFormatFitsShape(WireFormat::FromCode(9), 2, 32, true).ok());
}

}  // namespace
}  // namespace gift::kernels
