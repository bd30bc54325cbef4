#include "kernels/accumulate.h"

#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<float> RandomData(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * (1 + seed % 5);
  if (n > 0) x[0] = 2.5f;
  return x;
}

// K quantized random tensors.
struct Sources {
  std::vector<std::vector<uint8_t>> codes;
  std::vector<std::vector<float>> scales;
  std::vector<Fp8Source> views;
};

Sources MakeSources(int k, int64_t n, const QuantizeSpec& spec) {
  Sources s;
  s.codes.resize(k);
  s.scales.resize(k);
  for (int i = 0; i < k; ++i) {
    const auto x = RandomData(n, 100 + i);
    s.codes[i].resize(n);
    s.scales[i].resize(NumScales(n, spec.block_size));
    EXPECT_OK(Quantize(x.data(), n, spec, s.codes[i].data(), s.scales[i].data(),
                       nullptr, nullptr));
    s.views.push_back({s.codes[i].data(), s.scales[i].data()});
  }
  return s;
}

std::vector<float> Naive(const Sources& s, int64_t n, const QuantizeSpec& spec,
                         bool zero_first, std::vector<float> acc) {
  const int64_t b = spec.block_size > 0 ? spec.block_size : n;
  for (int64_t i = 0; i < n; ++i) {
    float a = zero_first ? 0.0f : acc[i];
    for (size_t k = 0; k < s.codes.size(); ++k) {
      const float xhat =
          DecodeFp8(s.codes[k][i], spec.format) * s.scales[k][i / b];
      a = a + xhat;
    }
    acc[i] = a;
  }
  return acc;
}

TEST(AccumulateTest, MatchesNaiveLoopBitwise) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t block : {0, 3, 64, 5000}) {
      for (int64_t n : {1, 7, 1000, 4099}) {
        for (bool zero_first : {false, true}) {
          const QuantizeSpec spec{f, block};
          const Sources s = MakeSources(3, n, spec);
          std::vector<float> acc = RandomData(n, 7);
          const auto want = Naive(s, n, spec, zero_first, acc);
          ASSERT_OK(DequantizeAccumulate(s.views.data(), 3, n, spec, zero_first,
                                         acc.data()));
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(SameBits(acc[i], want[i]))
                << i << ": " << acc[i] << " vs " << want[i];
          }
        }
      }
    }
  }
}

#if defined(__x86_64__)
// Every code (E4M3 subnormals included) with scales of every kind: normal,
// tiny, subnormal, too large to pre-scale by 256, NaN; in the default mode
// and under MXCSR.FTZ/DAZ (set by some frameworks), where the reference
// loop runs in the same mode.
TEST(AccumulateTest, MatchesNaiveLoopForAllCodesAndScales) {
  constexpr int64_t kN = 4099;
  const float scales[] = {0.37f, 3e-38f, 1e-40f, 1e30f, 1.5e36f, kNaN};
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (bool flush : {false, true}) {
      Sources s;
      for (int k = 0; k < 3; ++k) {
        s.codes.emplace_back(kN);
        for (int64_t i = 0; i < kN; ++i) {
          s.codes[k][i] = uint8_t(i * (2 * k + 3) + k);
        }
      }
      for (float a : scales) {
        for (float b : {0.5f, a}) {
          s.scales = {{a}, {b}, {1.25f}};
          s.views.clear();
          for (int k = 0; k < 3; ++k) {
            s.views.push_back({s.codes[k].data(), s.scales[k].data()});
          }
          std::vector<float> acc = RandomData(kN, 3);
          const unsigned csr = _mm_getcsr();
          if (flush) _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
          const auto want = Naive(s, kN, {f, 0}, false, acc);
          const absl::Status st = DequantizeAccumulate(
              s.views.data(), 3, kN, {f, 0}, false, acc.data());
          _mm_setcsr(csr);
          ASSERT_OK(st);
          for (int64_t i = 0; i < kN; ++i) {
            ASSERT_TRUE(SameBits(acc[i], want[i]) ||
                        (std::isnan(acc[i]) && std::isnan(want[i])))
                << Fp8FormatName(f) << " flush " << flush << " scales " << a
                << ", " << b << " at " << i << ": " << acc[i] << " vs "
                << want[i];
          }
        }
      }
    }
  }
}
#endif

TEST(AccumulateTest, ZeroFirstOverwritesGarbage) {
  const QuantizeSpec spec{Fp8Format::kE4M3, 16};
  const Sources s = MakeSources(2, 100, spec);
  std::vector<float> acc(100, kNaN);
  ASSERT_OK(
      DequantizeAccumulate(s.views.data(), 2, 100, spec, true, acc.data()));
  const auto want = Naive(s, 100, spec, true, std::vector<float>(100, 0.0f));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(SameBits(acc[i], want[i])) << i;
}

TEST(AccumulateTest, EqualsSumOfDequantizedSourcesInOrder) {
  const int64_t n = 999;
  const QuantizeSpec spec{Fp8Format::kE4M3, 0};
  const Sources s = MakeSources(4, n, spec);
  std::vector<float> acc(n, 1.0f);
  ASSERT_OK(
      DequantizeAccumulate(s.views.data(), 4, n, spec, false, acc.data()));
  std::vector<std::vector<float>> xhat(4, std::vector<float>(n));
  for (int k = 0; k < 4; ++k) {
    ASSERT_OK(Dequantize(s.codes[k].data(), s.scales[k].data(), n, spec,
                         xhat[k].data()));
  }
  for (int64_t i = 0; i < n; ++i) {
    const float want =
        (((1.0f + xhat[0][i]) + xhat[1][i]) + xhat[2][i]) + xhat[3][i];
    ASSERT_TRUE(SameBits(acc[i], want)) << i;
  }
}

TEST(AccumulateTest, NoSources) {
  std::vector<float> acc = {1, 2, 3};
  ASSERT_OK(DequantizeAccumulate(nullptr, 0, 3, {}, false, acc.data()));
  EXPECT_EQ(acc, (std::vector<float>{1, 2, 3}));
  ASSERT_OK(DequantizeAccumulate(nullptr, 0, 3, {}, true, acc.data()));
  EXPECT_EQ(acc, (std::vector<float>{0, 0, 0}));
  ASSERT_OK(DequantizeAccumulate(nullptr, 0, 0, {}, true, nullptr));
}

TEST(AccumulateTest, NanScaleMakesOnlyItsBlockNan) {
  // Short blocks (direct decode) and long ones (table lookups).
  for (int64_t block : {10, 2000}) {
    const int64_t n = block * 3 + block / 2;
    const QuantizeSpec spec{Fp8Format::kE5M2, block};
    Sources s = MakeSources(2, n, spec);
    s.scales[1][2] = kNaN;  // the third block of source 1
    std::vector<float> acc(n, 0.5f);
    ASSERT_OK(
        DequantizeAccumulate(s.views.data(), 2, n, spec, false, acc.data()));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::isnan(acc[i]), i >= 2 * block && i < 3 * block) << i;
    }
  }
}

TEST(AccumulateTest, RejectsBadArguments) {
  const auto kBad = absl::StatusCode::kInvalidArgument;
  uint8_t q = 0;
  float s = 1, acc = 0;
  Fp8Source ok{&q, &s}, no_codes{nullptr, &s}, no_scales{&q, nullptr};
  EXPECT_THAT(DequantizeAccumulate(&ok, 1, -1, {}, false, &acc),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulate(&ok, -1, 1, {}, false, &acc),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulate(nullptr, 1, 1, {}, false, &acc),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulate(&no_codes, 1, 1, {}, false, &acc),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulate(&no_scales, 1, 1, {}, false, &acc),
              StatusIs(kBad));
  EXPECT_THAT(DequantizeAccumulate(&ok, 1, 1, {}, false, nullptr),
              StatusIs(kBad));
  EXPECT_THAT(
      DequantizeAccumulate(&ok, 1, 1, {Fp8Format::kE4M3, -3}, false, &acc),
      StatusIs(kBad));
  EXPECT_OK(DequantizeAccumulate(&ok, 1, 1, {}, false, &acc));
}

}  // namespace
}  // namespace gift::kernels
