// The 4-bit boundary hits of QuantizeFp4 (kernels/quantize_fp4.h,
// "Telemetry"): counted against the segment's amax, not each element's own
// block scale. Hand-made vectors with known tensor-relative hits (ragged
// last block, all-zero block, non-finite elements not counted), and the
// property the selector needs: the score (upper + lower) / n ranks a
// heavy-tailed tensor above a flat one at nvfp4 and mxfp4, where the old
// block-relative count (the codes sent) ranks them the other way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/quantize_fp4.h"

namespace gift::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr Fp4Format kNv = Fp4Format::kNvfp4;
constexpr Fp4Format kMx = Fp4Format::kMxfp4;

struct Quantized {
  std::vector<uint8_t> codes;
  QuantizeStats stats;
};

Quantized Encode4(const std::vector<float>& x, Fp4Format f) {
  const int64_t n = x.size();
  Quantized q{std::vector<uint8_t>(Fp4PackedBytes(n)), {}};
  std::vector<uint8_t> scales(Fp4NumBlocks(n, f));
  float s_t = 0;
  EXPECT_OK(QuantizeFp4(x.data(), n, f, q.codes.data(), scales.data(), &s_t,
                        nullptr, &q.stats));
  return q;
}

// The score the selector ranks by (daemon/selector.h).
double Score(const QuantizeStats& st) {
  return double(st.upper + st.lower) / double(st.n);
}

// The old, block-relative count: hits of the codes actually sent.
double BlockRelativeScore(const Quantized& q, const std::vector<float>& x) {
  int64_t hits = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t c = (q.codes[i / 2] >> (4 * (i % 2))) & 7;
    hits += c == kE2M1MaxCode || (c == 0 && x[i] != 0);
  }
  return double(hits) / double(x.size());
}

// nvfp4, 53 elements: blocks of 16, the last ragged (5). amax 2688 makes
// s_t = 1 and the amax block's scale 448: upper |x| > 2240, lower 0 < |x| <=
// 112.
TEST(QuantizeFp4HitsTest, Nvfp4HandMade) {
  std::vector<float> x(53, 1000.0f);  // 1000 / 448 = 2.23: no hit
  x[0] = 2688.0f;                     // upper
  x[1] = 2300.0f;                     // 5.13: upper
  x[2] = -2241.0f;                    // 5.002: upper
  x[3] = 2240.0f;                     // 5: ties to 4, no hit
  x[4] = 112.0f;                      // 0.25: ties to 0, lower
  x[5] = -113.0f;                     // 0.252 -> 0.5, no hit
  x[6] = -50.0f;                      // lower
  x[7] = 0.0f;                        // zeros are no hits
  x[8] = -0.0f;
  for (int i = 16; i < 32; ++i) x[i] = 0.0f;  // an all-zero block
  // Block 2: small values, each ±6 in its own block (the old count's
  // upper hits), all lower against the tensor; two non-finite, not counted.
  for (int i = 32; i < 48; ++i) x[i] = 0.5f * float(i - 31);
  x[40] = kNaN;
  x[41] = -kInf;
  // Ragged block 3: 100 and -100 lower, 200 (0.45 -> 0.5) not, 0 not.
  const float tail[5] = {100.0f, -100.0f, 200.0f, 1000.0f, 0.0f};
  std::copy(tail, tail + 5, x.begin() + 48);
  const Quantized q = Encode4(x, kNv);
  EXPECT_EQ(q.stats.n, 53);
  EXPECT_EQ(q.stats.nonfinite, 2);
  EXPECT_EQ(q.stats.upper, 3);
  EXPECT_EQ(q.stats.lower, 2 + 14 + 2);
}

// mxfp4, 103 elements: blocks of 32, the last ragged (7). amax 6 gives the
// amax block X = 2^0: upper |x| > 5, lower 0 < |x| <= 0.25.
TEST(QuantizeFp4HitsTest, Mxfp4HandMade) {
  std::vector<float> x(103, 1.0f);
  x[0] = 6.0f;    // upper
  x[1] = 5.5f;    // upper
  x[2] = -5.01f;  // upper
  x[3] = 5.0f;    // ties to 4, no hit
  x[4] = 0.25f;   // ties to 0, lower
  x[5] = -0.26f;  // -> 0.5, no hit
  x[6] = 0.1f;    // lower
  x[7] = 0.0f;
  x[8] = -0.0f;
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block
  // Block 2: (i+1)/128 <= 0.25, all lower against the tensor (in its own
  // block, X = 2^-4, the largest is 4: no hit); two non-finite.
  for (int i = 64; i < 96; ++i) x[i] = float(i - 63) / 128.0f;
  x[70] = kInf;
  x[71] = kNaN;
  // Ragged block 3: 0.2, -0.2, 1e-30, 0.24 lower; 0.3, 3, -0 not.
  const float tail[7] = {0.2f, -0.2f, 0.3f, 3.0f, -0.0f, 1e-30f, 0.24f};
  std::copy(tail, tail + 7, x.begin() + 96);
  const Quantized q = Encode4(x, kMx);
  EXPECT_EQ(q.stats.n, 103);
  EXPECT_EQ(q.stats.nonfinite, 2);
  EXPECT_EQ(q.stats.upper, 3);
  EXPECT_EQ(q.stats.lower, 2 + 30 + 4);
  // Without a tensor-scale slot the count is the same.
  std::vector<uint8_t> codes(Fp4PackedBytes(103)),
      scales(Fp4NumBlocks(103, kMx));
  QuantizeStats st;
  ASSERT_OK(QuantizeFp4(x.data(), 103, kMx, codes.data(), scales.data(),
                        nullptr, nullptr, &st));
  EXPECT_EQ(st.upper, q.stats.upper);
  EXPECT_EQ(st.lower, q.stats.lower);
  EXPECT_EQ(codes, q.codes);
}

TEST(QuantizeFp4HitsTest, NoHitsWithoutFiniteValues) {
  for (Fp4Format f : {kNv, kMx}) {
    const Quantized zero = Encode4(std::vector<float>(40, 0.0f), f);
    EXPECT_EQ(zero.stats.upper + zero.stats.lower, 0);
    const Quantized bad = Encode4({kNaN, kInf, -kInf, 0.0f}, f);
    EXPECT_EQ(bad.stats.upper + bad.stats.lower, 0);
    EXPECT_EQ(bad.stats.nonfinite, 3);
  }
}

// i.i.d. N(0, 1).
std::vector<float> Flat(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

// A scale mixture (heavy tails across the tensor, flat inside each block):
// every 32 elements share s = 2^-k, k uniform in 0..8 (k = 0 for the
// first), magnitudes uniform in [0.45, 0.8]·s with random signs, and
// every 16th element exactly ±s, so each block's own scale fits it.
std::vector<float> HeavyTailed(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(0, 8);
  std::uniform_real_distribution<float> m(0.45f, 0.8f);
  std::vector<float> x(n);
  float s = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) s = std::ldexp(1.0f, i == 0 ? 0 : -k(rng));
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    x[i] = sign * (i % 16 == 0 ? s : m(rng) * s);
  }
  return x;
}

TEST(QuantizeFp4HitsTest, ScoreRanksHeavyTailedAboveFlat) {
  const auto flat = Flat(4096, 11), heavy = HeavyTailed(4096, 12);
  for (Fp4Format f : {kNv, kMx}) {
    SCOPED_TRACE(Fp4FormatName(f));
    const Quantized qf = Encode4(flat, f), qh = Encode4(heavy, f);
    const double sf = Score(qf.stats), sh = Score(qh.stats);
    const double of = BlockRelativeScore(qf, flat),
                 oh = BlockRelativeScore(qh, heavy);
    std::printf(
        "%s score heavy-tailed %.4f flat %.4f; block-relative (old) "
        "heavy-tailed %.4f flat %.4f\n",
        Fp4FormatName(f), sh, sf, oh, of);
    EXPECT_GT(sh, 2 * sf);
    // The block-relative count would rank them the other way.
    EXPECT_LT(oh, of);
  }
}

}  // namespace
}  // namespace gift::kernels
