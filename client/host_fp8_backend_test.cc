// The host Fp8Backend's parts on their own (fp8_backend.h): the quantized
// allreduce tests exercise them end to end, the device backend's test
// compares against them; these pin each part's contract.
#include "client/host_fp8_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "client/probe.h"
#include "client/synthetic_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(HostFp8BackendTest, BundlesItsParts) {
  HostFp8Backend b(nullptr);
  EXPECT_EQ(b.memory().memory_kind(), MemoryKind::kHost);
  EXPECT_EQ(b.control(), nullptr);
  EXPECT_EQ(b.stream(), nullptr);
  EXPECT_NE(dynamic_cast<GiftTransformer*>(&b.transforms()), nullptr);
  EXPECT_OK(b.BeginStep());
  EXPECT_OK(b.EndStep());
}

TEST(HostFp8BackendTest, BuffersResizeZeroAndGrow) {
  HostMemory m;
  std::unique_ptr<Fp8Buffer> buf = m.NewBuffer();
  ASSERT_OK(buf->Resize(10));
  EXPECT_EQ(buf->bytes(), 10u);
  std::memset(buf->data(), 0xAB, 10);
  ASSERT_OK(buf->Zero());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(buf->u8()[i], 0) << i;
  buf->u8()[3] = 7;
  ASSERT_OK(buf->Grow(4));  // large enough: kept, contents too
  EXPECT_EQ(buf->bytes(), 10u);
  EXPECT_EQ(buf->u8()[3], 7);
  ASSERT_OK(buf->Grow(24));
  EXPECT_EQ(buf->bytes(), 24u);
  std::vector<float> x = {1, 2, 3, 4};
  ASSERT_OK(m.Zero(x.data() + 1, 2 * sizeof(float)));
  EXPECT_EQ(x, (std::vector<float>{1, 0, 0, 4}));
  ASSERT_OK(m.Zero(nullptr, 0));
}

TEST(HostFp8BackendTest, VectorMathIsIeeeSingle) {
  HostVectorMath math;
  std::vector<float> acc = {1.0f, 0.1f, -3.0f}, x = {2.0f, 0.2f, 3.0f};
  ASSERT_OK(math.AddInPlace(acc.data(), x.data(), 3));
  EXPECT_EQ(acc[0], 3.0f);
  EXPECT_EQ(Bits(acc[1]), Bits(0.1f + 0.2f));
  EXPECT_EQ(acc[2], 0.0f);
  ASSERT_OK(math.Divide(acc.data(), 3, 3.0f));
  EXPECT_EQ(acc[0], 1.0f);
  EXPECT_EQ(Bits(acc[1]), Bits((0.1f + 0.2f) / 3.0f));
  std::vector<float> nan(4, 1.0f);
  ASSERT_OK(math.FillNaN(nan.data(), 3));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Bits(nan[i]), 0x7FC00000u) << i;
  EXPECT_EQ(nan[3], 1.0f);
}

TEST(HostFp8BackendTest, Bf16RoundsToNearestEvenAndKeepsNaN) {
  HostVectorMath math;
  const std::vector<float> x = {1.0f,
                                FromBits(0x3F808000u),  // tie: to even (down)
                                FromBits(0x3F818000u),  // tie: to even (up)
                                FromBits(0x3F808001u),  // above the tie: up
                                -2.5f,
                                std::numeric_limits<float>::infinity(),
                                FromBits(0x7F800001u)};
  std::vector<uint16_t> b(x.size());
  ASSERT_OK(math.ToBf16(x.data(), x.size(), b.data()));
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020,
                                      0x7F80, 0x7FC0}));
  std::vector<float> back(b.size());
  ASSERT_OK(math.FromBf16(b.data(), b.size(), back.data()));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[4], -2.5f);
  EXPECT_TRUE(std::isinf(back[5]));
  EXPECT_TRUE(std::isnan(back[6]));
}

TEST(HostFp8BackendTest, CodecCollectsStatsAndFlagsPerRound) {
  HostFp8Codec codec;
  const kernels::QuantizeSpec spec{kernels::Fp8Format::kE4M3, 0};
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = SyntheticValue(7, i);
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(kernels::NumScales(x.size(), 0)), y(x.size());
  ASSERT_OK(codec.BeginRound(1, 2));
  EXPECT_THAT(
      codec.Quantize(x.data(), x.size(), spec, q.data(), s.data(), nullptr, 1),
      StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(
      codec.Quantize(x.data(), x.size(), spec, q.data(), s.data(), nullptr, 0));
  ASSERT_OK(codec.Dequantize(q.data(), s.data(), x.size(), spec, y.data()));
  std::vector<float> ref(x.size());
  ASSERT_OK(
      kernels::Dequantize(q.data(), s.data(), x.size(), spec, ref.data()));
  EXPECT_EQ(y, ref);
  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_OK(codec.FlagNonFinite(x.data(), x.size(), 0));
  ASSERT_OK(codec.FlagNonFinite(&inf, 1, 1));
  EXPECT_THAT(codec.FlagNonFinite(&inf, 1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<kernels::QuantizeStats> stats;
  std::vector<uint8_t> flags;
  ASSERT_OK(codec.EndRound(&stats, &flags));
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].n, static_cast<int64_t>(x.size()));
  EXPECT_GT(stats[0].x_sq, 0.0);
  EXPECT_EQ(flags, (std::vector<uint8_t>{0, 1}));
  ASSERT_OK(codec.BeginRound(0, 1));  // a new round starts clear
  ASSERT_OK(codec.EndRound(&stats, &flags));
  EXPECT_TRUE(stats.empty());
  EXPECT_EQ(flags, (std::vector<uint8_t>{0}));
}

TEST(HostFp8BackendTest, FourBitCodecIsTheKernelsWithSlotsAndFlags) {
  HostFp8Codec codec;
  for (kernels::Fp4Format f :
       {kernels::Fp4Format::kNvfp4, kernels::Fp4Format::kMxfp4}) {
    const int64_t n = 75;  // ragged last block, odd element count
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = SyntheticValue(9, i);
    std::vector<uint8_t> q(kernels::Fp4PackedBytes(n)),
        bs(kernels::Fp4NumBlocks(n, f)), rq(q.size()), rbs(bs.size());
    float ts = 0, rts = 0;
    std::vector<float> y(n), ref(n), res(n), rres(n);
    ASSERT_OK(codec.BeginRound(1, 3));
    EXPECT_THAT(
        codec.QuantizeFp4(x.data(), n, f, q.data(), bs.data(), &ts, nullptr, 1),
        StatusIs(absl::StatusCode::kInvalidArgument));
    ASSERT_OK(codec.QuantizeFp4(x.data(), n, f, q.data(), bs.data(), &ts,
                                res.data(), 0));
    kernels::QuantizeStats st;
    ASSERT_OK(kernels::QuantizeFp4(x.data(), n, f, rq.data(), rbs.data(), &rts,
                                   rres.data(), &st));
    EXPECT_EQ(q, rq);
    EXPECT_EQ(bs, rbs);
    EXPECT_EQ(res, rres);
    ASSERT_OK(codec.DequantizeFp4(q.data(), bs.data(), &ts, n, f, y.data()));
    ASSERT_OK(
        kernels::DequantizeFp4(q.data(), bs.data(), &ts, n, f, ref.data()));
    EXPECT_EQ(y, ref);
    // Two copies summed in order.
    const kernels::Fp4Source src[2] = {{q.data(), bs.data(), &ts},
                                       {q.data(), bs.data(), &ts}};
    ASSERT_OK(codec.AccumulateFp4(src, 2, n, f, y.data()));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], ref[i] + ref[i]);
    // Flags: clean scales, then a NaN-flagged block.
    ASSERT_OK(codec.FlagNonFiniteFp4(bs.data(), bs.size(), &ts, f, 0));
    bs[1] = f == kernels::Fp4Format::kNvfp4 ? 0x7F : 0xFF;
    ASSERT_OK(codec.FlagNonFiniteFp4(bs.data(), bs.size(), &ts, f, 2));
    // A garbage tensor scale (nvfp4) or block-scale code no finite block
    // gets (mxfp4 0xFD) from a rank flags the segment too.
    {
      std::vector<uint8_t> clean(bs.size(), 0x01);
      const float bad_ts = -1.0f;
      if (f == kernels::Fp4Format::kNvfp4) {
        ASSERT_OK(
            codec.FlagNonFiniteFp4(clean.data(), clean.size(), &bad_ts, f, 1));
      } else {
        clean[0] = 0xFD;
        ASSERT_OK(
            codec.FlagNonFiniteFp4(clean.data(), clean.size(), nullptr, f, 1));
      }
    }
    EXPECT_THAT(codec.FlagNonFiniteFp4(bs.data(), bs.size(), &ts, f, 3),
                StatusIs(absl::StatusCode::kInvalidArgument));
    std::vector<kernels::QuantizeStats> stats;
    std::vector<uint8_t> flags;
    ASSERT_OK(codec.EndRound(&stats, &flags));
    EXPECT_EQ(stats[0].n, n);
    EXPECT_EQ(stats[0].err_sq, st.err_sq);
    EXPECT_EQ(flags, (std::vector<uint8_t>{0, 1, 1}));
  }
}

TEST(HostFp8BackendTest, ComparatorSumsPerSlot) {
  HostComparator cmp;
  const std::vector<float> ref = {1, 2, 3}, x = {1, 2, 5};
  ASSERT_OK(cmp.BeginCompare(2));
  ASSERT_OK(cmp.Compare(ref.data(), x.data(), 3, 1));
  ASSERT_OK(cmp.Compare(ref.data(), ref.data(), 3, 0));
  EXPECT_THAT(cmp.Compare(ref.data(), x.data(), 3, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cmp.BeginCompare(-1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<kernels::QuantizeStats> sums;
  ASSERT_OK(cmp.EndCompare(&sums));
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[0].err_sq, 0.0);
  EXPECT_EQ(sums[1].err_sq, 4.0);
  EXPECT_EQ(sums[1].x_sq, 14.0);
  EXPECT_EQ(sums[1].xhat_x, 20.0);
}

TEST(HostFp8BackendTest, ProbeIsProbeLayer) {
  const BucketLayer layer{.name = "w", .shape = {6, 8}};
  const LayerFactor f = SyntheticLowRank(1, 8, 2, 3);
  std::vector<float> g(48);
  for (size_t i = 0; i < g.size(); ++i) g[i] = SyntheticValue(11, i);
  GiftTransformer tf;
  HostLayerProbe probe(&tf);
  ProbeResult a, b;
  ASSERT_OK(probe.Probe(g.data(), layer, f, &a));
  GiftTransformer other;
  ASSERT_OK(ProbeLayer(g.data(), layer, f, &other, &b));
  EXPECT_GT(a.euclid_rel_l2, 0.0);
  EXPECT_EQ(a.euclid_rel_l2, b.euclid_rel_l2);
  EXPECT_EQ(a.gift_rel_l2, b.gift_rel_l2);
  EXPECT_FALSE(
      probe.Probe(g.data(), layer, SyntheticLowRank(1, 4, 2, 3), &a).ok());
}

}  // namespace
}  // namespace gift::client
