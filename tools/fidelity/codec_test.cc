#include "tools/fidelity/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "common/status_matchers.h"
#include "kernels/quantize_fp4.h"
#include "tools/fidelity/round_trip.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

RowMatrixd Gaussian(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, 1);
  RowMatrixd m(rows, cols);
  // Rows of very different magnitude, so that block scales matter.
  for (int64_t i = 0; i < m.size(); ++i) {
    m.data()[i] = d(rng) * 1e-3 * (1 + 30 * ((i / cols) % 3 == 0));
  }
  return m;
}

TEST(FidelityCodecTest, ParsesAndNamesTheFourFormats) {
  for (const char* name : {"e4m3", "e5m2", "nvfp4", "mxfp4"}) {
    absl::StatusOr<kernels::WireFormat> f = kernels::ParseWireFormat(name);
    ASSERT_OK(f);
    EXPECT_STREQ(kernels::WireFormatName(*f), name);
  }
  EXPECT_TRUE(*kernels::ParseWireFormat("NVFP4") ==
              kernels::WireFormat(kernels::Fp4Format::kNvfp4));
  EXPECT_TRUE(*kernels::ParseWireFormat("mxfp4") ==
              kernels::WireFormat(kernels::Fp4Format::kMxfp4));
  EXPECT_TRUE(*kernels::ParseWireFormat("e5m2") ==
              kernels::WireFormat(kernels::Fp8Format::kE5M2));
  EXPECT_FALSE(kernels::WireFormat(kernels::Fp4Format::kNvfp4) ==
               kernels::WireFormat(kernels::Fp4Format::kMxfp4));
  EXPECT_THAT(kernels::ParseWireFormat("fp4"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("e4m3, e5m2, nvfp4 or mxfp4")));
}

TEST(FidelityCodecTest, Fp8RoundTripIsTheKernelsOne) {
  const RowMatrixd x = Gaussian(8, 48, 1);
  const RowMatrixf xf = x.cast<float>();
  for (int64_t block : {0, 64}) {
    const kernels::QuantizeSpec spec{kernels::Fp8Format::kE4M3, block};
    std::vector<uint8_t> codes(xf.size());
    std::vector<float> scales(kernels::NumScales(xf.size(), block));
    ASSERT_OK(kernels::Quantize(xf.data(), xf.size(), spec, codes.data(),
                                scales.data(), nullptr, nullptr));
    RowMatrixf want(8, 48);
    ASSERT_OK(kernels::Dequantize(codes.data(), scales.data(), xf.size(), spec,
                                  want.data()));
    absl::StatusOr<RowMatrixd> got = QuantizeDequantize(x, spec);
    ASSERT_OK(got);
    EXPECT_EQ(*got, want.cast<double>()) << block;
  }
}

TEST(FidelityCodecTest, Fp4RoundTripIsTheKernelsOne) {
  // 6 x 40: d_in is not a multiple of 16 or 32, so blocks of the row-major
  // flattening straddle row ends (documented in codec.h).
  const RowMatrixd x = Gaussian(6, 40, 2);
  const RowMatrixf xf = x.cast<float>();
  const int64_t n = xf.size();
  for (kernels::Fp4Format f :
       {kernels::Fp4Format::kNvfp4, kernels::Fp4Format::kMxfp4}) {
    std::vector<uint8_t> codes(kernels::Fp4PackedBytes(n));
    std::vector<uint8_t> scales(kernels::Fp4NumBlocks(n, f));
    float ts = 0;
    ASSERT_OK(kernels::QuantizeFp4(xf.data(), n, f, codes.data(), scales.data(),
                                   &ts, nullptr, nullptr));
    RowMatrixf want(6, 40);
    ASSERT_OK(kernels::DequantizeFp4(codes.data(), scales.data(), &ts, n, f,
                                     want.data()));
    absl::StatusOr<RowMatrixd> got = QuantizeDequantize(x, WireSpec(f));
    ASSERT_OK(got);
    EXPECT_EQ(*got, want.cast<double>()) << kernels::Fp4FormatName(f);
    // 4 bits lose far more than FP8 E4M3, but keep the direction.
    const ErrorMetrics e = CompareTo(*got, x);
    const ErrorMetrics e8 =
        CompareTo(*QuantizeDequantize(x, {kernels::Fp8Format::kE4M3, 0}), x);
    EXPECT_GT(e.rel_l2, e8.rel_l2);
    EXPECT_LT(e.rel_l2, 0.3);
    EXPECT_GT(e.cos, 0.95);
  }
}

TEST(FidelityCodecTest, ResidualAndAccumulateMatchDecode) {
  const RowMatrixf a = Gaussian(4, 32, 3).cast<float>();
  const RowMatrixf b = Gaussian(4, 32, 4).cast<float>();
  const int64_t n = a.size();
  for (const char* name : {"e4m3", "nvfp4", "mxfp4"}) {
    const WireSpec spec(*kernels::ParseWireFormat(name), 0);
    Encoded ea, eb;
    std::vector<float> res(n);
    ASSERT_OK(Encode(a.data(), n, spec, res.data(), &ea));
    ASSERT_OK(Encode(b.data(), n, spec, nullptr, &eb));
    std::vector<float> da(n), db(n), sum(n, 7.0f);
    ASSERT_OK(Decode(ea, n, spec, da.data()));
    ASSERT_OK(Decode(eb, n, spec, db.data()));
    ASSERT_OK(DecodeAccumulate({&ea, &eb}, n, spec, sum.data()));
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(res[i], a.data()[i] - da[i]) << name << " " << i;
      EXPECT_EQ(sum[i], (0.0f + da[i]) + db[i]) << name << " " << i;
    }
  }
}

TEST(FidelityCodecTest, EncodedBytesCountCodesAndScales) {
  EXPECT_DOUBLE_EQ(EncodedBytes(1000, {kernels::Fp8Format::kE4M3, 0}),
                   1000 + 4);
  EXPECT_DOUBLE_EQ(EncodedBytes(1000, {kernels::Fp8Format::kE4M3, 512}),
                   1000 + 2 * 4);
  // nvfp4: 500 packed bytes, 63 block scales, one float tensor scale.
  EXPECT_DOUBLE_EQ(EncodedBytes(1000, WireSpec(kernels::Fp4Format::kNvfp4)),
                   500 + 63 + 4);
  // mxfp4: 501 packed bytes (odd n), 32 block scales.
  EXPECT_DOUBLE_EQ(EncodedBytes(1001, WireSpec(kernels::Fp4Format::kMxfp4)),
                   501 + 32);
}

}  // namespace
}  // namespace gift::fidelity
