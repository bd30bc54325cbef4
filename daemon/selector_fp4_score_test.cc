// The selector ranks 4-bit layers by the kernels' own telemetry
// (kernels/quantize_fp4.h: tensor-relative boundary hits): a heavy-tailed
// layer and a flat one, both quantized by QuantizeFp4 in nvfp4 and in
// mxfp4, their QuantizeStats fed as a rank's samples; top-1 picks the
// heavy-tailed layer. Hits counted on the codes sent (each element against
// its own block scale, the count before issue 27) would pick the flat one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "daemon/selector.h"
#include "daemon/selector_testing.h"
#include "kernels/quantize_fp4.h"

namespace gift::daemon {
namespace {

using kernels::Fp4Format;
using ::testing::ElementsAre;

constexpr int64_t kN = 128 * 128;

std::vector<float> Flat(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(kN);
  for (auto& v : x) v = g(rng);
  return x;
}

// Flat inside each 32 elements (magnitudes in [0.45, 0.8]·s, every 16th
// exactly s), heavy-tailed across them (s = 2^-k, k uniform in 0..8).
std::vector<float> HeavyTailed(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(0, 8);
  std::uniform_real_distribution<float> m(0.45f, 0.8f);
  std::vector<float> x(kN);
  float s = 1;
  for (int64_t i = 0; i < kN; ++i) {
    if (i % 32 == 0) s = std::ldexp(1.0f, i == 0 ? 0 : -k(rng));
    x[i] = (rng() % 2 ? s : -s) * (i % 16 == 0 ? 1.0f : m(rng));
  }
  return x;
}

// One window of samples of x quantized in f: the kernel's hits, or
// (block_relative) the hits of the codes sent.
SelectorSample SampleOf(const std::vector<float>& x, Fp4Format f,
                        bool block_relative, int64_t steps) {
  std::vector<uint8_t> codes(kernels::Fp4PackedBytes(kN)),
      scales(kernels::Fp4NumBlocks(kN, f));
  float s_t;
  kernels::QuantizeStats st;
  EXPECT_OK(kernels::QuantizeFp4(x.data(), kN, f, codes.data(), scales.data(),
                                 &s_t, nullptr, &st));
  if (block_relative) {
    st.upper = st.lower = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const uint8_t c = (codes[i / 2] >> (4 * (i % 2))) & 7;
      st.upper += c == kernels::kE2M1MaxCode;
      st.lower += c == 0 && x[i] != 0;
    }
  }
  SelectorSample s = Sample(0, steps, 1, 0.5);
  s.n = st.n * steps;
  s.upper = st.upper * steps;
  s.lower = st.lower * steps;
  return s;
}

TEST(SelectorFp4ScoreTest, TopOneIsTheHeavyTailedLayer) {
  const auto flat = Flat(3), heavy = HeavyTailed(4);
  for (Fp4Format f : {Fp4Format::kNvfp4, Fp4Format::kMxfp4}) {
    for (bool block_relative : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << kernels::Fp4FormatName(f)
                   << (block_relative ? " block-relative" : " tensor"));
      SelectorPolicy p = Classic();
      p.top_k = 1;
      LayerSelector sel(p);
      ASSERT_OK(sel.AddLayer({"flat", 128, 128}));
      ASSERT_OK(sel.AddLayer({"heavy", 128, 128}));
      const int64_t w = p.window_steps;
      ASSERT_OK(sel.Observe("flat", SampleOf(flat, f, block_relative, w)));
      ASSERT_OK(sel.Observe("heavy", SampleOf(heavy, f, block_relative, w)));
      const SelectionDecision d = sel.Decide({});
      EXPECT_THAT(d.candidates, ElementsAre(block_relative ? "flat" : "heavy"));
    }
  }
}

}  // namespace
}  // namespace gift::daemon
