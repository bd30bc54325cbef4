// The two-phase allreduce with 4-bit layers (nvfp4, mxfp4) on 1..4 thread
// ranks: bit-identical results on every rank equal to a scalar reference of
// the algorithm (with the Euclidean error feedback that 4-bit layers have
// by default), non-finite layers, and the bytes on the wire against an FP32
// ring allreduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <tuple>
#include <vector>

#include "client/allreduce_engine.h"
#include "client/chunking.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::client {
namespace {

using kernels::Fp4Format;
using kernels::WireFormat;

// A 1-D ragged layer, a 2-D one, a tiny one, a gap, an FP8 layer.
EpochPlan MixedPlan(WireFormat f) {
  return *EpochPlan::Create(
      1, 200,
      {{.name = "x", .shape = {37}, .offset = 0, .format = f},
       {.name = "m", .shape = {5, 29}, .offset = 37, .format = f},
       {.name = "tiny", .shape = {3}, .offset = 182, .format = f},
       {.name = "e4", .shape = {11}, .offset = 188, .block_size = 4}});
}

// Rank p's gradient of step t: magnitudes over several octaves.
std::vector<float> Input(const EpochPlan& plan, int p, int t) {
  std::vector<float> x(plan.bucket_elements());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint64_t seed = 1000 * t + p;
    x[i] = SyntheticGaussian(seed, i) *
           std::ldexp(1.0f, static_cast<int>(Mix64(i) % 7) - 3);
  }
  return x;
}

// x̂ of x[0, n) in format f (FP8: block granularity `block`); with
// `residual`, residual = x − x̂ (error feedback).
void QuantizeRoundTrip(WireFormat f, int64_t block, const float* x, int64_t n,
                       float* residual, float* out) {
  if (f.is_fp4()) {
    std::vector<uint8_t> q(kernels::Fp4PackedBytes(n)),
        s(kernels::Fp4NumBlocks(n, f.fp4()));
    float t = 1.0f;
    ASSERT_OK(kernels::QuantizeFp4(x, n, f.fp4(), q.data(), s.data(), &t,
                                   residual, nullptr));
    ASSERT_OK(kernels::DequantizeFp4(q.data(), s.data(), &t, n, f.fp4(), out));
    return;
  }
  const kernels::QuantizeSpec spec{f.fp8(), block};
  std::vector<uint8_t> q(n);
  std::vector<float> s(kernels::NumScales(n, block));
  ASSERT_OK(
      kernels::Quantize(x, n, spec, q.data(), s.data(), residual, nullptr));
  ASSERT_OK(kernels::Dequantize(q.data(), s.data(), n, spec, out));
}

// The two-phase algorithm, element by element, for all W ranks at once:
// each rank quantizes its segment of every chunk (x + r with feedback), the
// owner sums the W dequantized copies in rank order in FP32, adds its
// residual, re-quantizes; every rank gets that / W. `ef` says which layers
// have feedback (the state persists across steps in this object).
class Reference {
 public:
  Reference(const EpochPlan& plan, int w, int64_t piece, std::vector<bool> ef)
      : plan_(plan), w_(w), piece_(piece), ef_(std::move(ef)) {
    worker_.assign(w, std::vector<std::vector<float>>(plan.layers().size()));
    for (auto& r : worker_) {
      for (size_t l = 0; l < r.size(); ++l) {
        r[l].assign(plan.layers()[l].size(), 0.0f);
      }
    }
  }

  // xs[p]: rank p's bucket. Returns the averaged layers (gaps: rank 0's).
  std::vector<float> Step(std::vector<std::vector<float>> xs) {
    const std::vector<BucketLayer>& layers = plan_.layers();
    for (int p = 0; p < w_; ++p) {
      for (size_t l = 0; l < layers.size(); ++l) {
        if (!ef_[l]) continue;
        for (int64_t i = 0; i < layers[l].size(); ++i) {
          float& v = xs[p][layers[l].offset + i];
          v = v + worker_[p][l][i];
        }
      }
    }
    std::vector<float> out = xs[0];
    const int64_t n = plan_.communicated_elements();
    int k = 0;
    for (const Range& pc : SplitIntoPieces(n, piece_)) {
      for (int j = 0; j < w_; ++j) {
        const Range c = BalancedChunk(pc.size(), w_, j);
        for (size_t l = 0; l < layers.size(); ++l) {
          const int64_t lb = plan_.packed_offset(static_cast<int>(l));
          const int64_t b = std::max(lb, pc.begin + c.begin);
          const int64_t e = std::min(lb + layers[l].size(), pc.begin + c.end);
          if (e <= b) continue;
          RunSegment(xs, l, b - lb, e - b, std::make_tuple(k, j, l), &out);
        }
      }
      ++k;
    }
    return out;
  }

 private:
  void RunSegment(const std::vector<std::vector<float>>& xs, size_t l,
                  int64_t begin, int64_t count,
                  std::tuple<int, int, size_t> key, std::vector<float>* out) {
    const BucketLayer& layer = plan_.layers()[l];
    std::vector<float> acc(count, 0.0f), deq(count);
    for (int p = 0; p < w_; ++p) {
      float* res = ef_[l] ? worker_[p][l].data() + begin : nullptr;
      QuantizeRoundTrip(layer.format, layer.block_size,
                        xs[p].data() + layer.offset + begin, count, res,
                        deq.data());
      for (int64_t i = 0; i < count; ++i) acc[i] = acc[i] + deq[i];
    }
    float* res = nullptr;
    // The owner adds at most cap_ · ‖acc‖ of its residual and keeps the
    // rest (AllReduceEngineOptions::owner_release_cap).
    std::vector<float> keep(count, 0.0f);
    if (ef_[l]) {
      std::vector<float>& o = owner_[key];
      o.resize(count, 0.0f);
      double sa = 0, sr = 0;
      for (int64_t i = 0; i < count; ++i) {
        sa += static_cast<double>(acc[i]) * acc[i];
        sr += static_cast<double>(o[i]) * o[i];
      }
      const double c = cap_;
      const float f =
          sr > c * c * sa ? static_cast<float>(c * std::sqrt(sa / sr)) : 1.0f;
      for (int64_t i = 0; i < count; ++i) {
        const float r = f * o[i];
        acc[i] = acc[i] + r;
        keep[i] = o[i] - r;
      }
      res = o.data();
    }
    QuantizeRoundTrip(layer.format, layer.block_size, acc.data(), count, res,
                      deq.data());
    if (res != nullptr) {
      for (int64_t i = 0; i < count; ++i) res[i] = res[i] + keep[i];
    }
    for (int64_t i = 0; i < count; ++i) {
      (*out)[layer.offset + begin + i] = deq[i] / static_cast<float>(w_);
    }
  }

  const EpochPlan plan_;
  const int w_;
  const int64_t piece_;
  const std::vector<bool> ef_;
  const float cap_ = AllReduceEngineOptions().owner_release_cap;
  std::vector<std::vector<std::vector<float>>> worker_;  // [rank][layer]
  std::map<std::tuple<int, int, size_t>, std::vector<float>> owner_;
};

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

class Fp4RoundTest
    : public ::testing::TestWithParam<std::tuple<Fp4Format, int>> {};

TEST_P(Fp4RoundTest, EqualsTheScalarReferenceOnEveryRank) {
  const auto [format, w] = GetParam();
  const EpochPlan plan = MixedPlan(format);
  constexpr int kSteps = 3;
  constexpr int64_t kPiece = 64;  // elements: 4 pieces, each a full round
  // The reference: 4-bit layers with feedback (the default), FP8 without.
  Reference ref(plan, w, kPiece, {true, true, true, false});
  std::vector<std::vector<float>> want(kSteps);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<std::vector<float>> xs;
    for (int p = 0; p < w; ++p) xs.push_back(Input(plan, p, t));
    want[t] = ref.Step(xs);
  }
  RunThreadRanks(w, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.piece_bytes = 4 * kPiece;
    auto ar = AllReduceEngine::Create(&comm, plan, o);
    ASSERT_OK(ar);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<float> x = Input(plan, comm.rank(), t), in = x;
      StepTelemetry tel;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &tel));
      for (const BucketLayer& l : plan.layers()) {
        EXPECT_TRUE(
            SameBits(x.data() + l.offset, want[t].data() + l.offset, l.size()))
            << "rank " << comm.rank() << " step " << t << " layer " << l.name;
      }
      EXPECT_EQ(x[185], in[185]);  // gap untouched
      EXPECT_EQ(tel.nonfinite_layers, 0);
      EXPECT_EQ(tel.layers[1].local.n, 145);
      EXPECT_GT(tel.layers[1].local.err_sq, 0.0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    FormatsAndWorlds, Fp4RoundTest,
    ::testing::Combine(::testing::Values(Fp4Format::kNvfp4, Fp4Format::kMxfp4),
                       ::testing::Values(1, 2, 3, 4)));

TEST(Fp4AllReduceTest, WithoutFeedbackTooAndMoreRanksThanElements) {
  // Three one-element layers on four ranks: chunk 3 is empty.
  const EpochPlan tiny = *EpochPlan::Create(
      0, 3,
      {{.name = "a", .shape = {1}, .offset = 0, .format = Fp4Format::kMxfp4},
       {.name = "b", .shape = {1}, .offset = 1, .format = Fp4Format::kNvfp4},
       {.name = "c", .shape = {1}, .offset = 2, .format = Fp4Format::kMxfp4}});
  Reference ref(tiny, 4, 1 << 20, {false, false, false});
  std::vector<std::vector<float>> xs;
  for (int p = 0; p < 4; ++p) xs.push_back(Input(tiny, p, 7));
  const std::vector<float> want = ref.Step(xs);
  RunThreadRanks(4, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.euclid_error_feedback = EuclidFeedback::kOff;
    auto ar = AllReduceEngine::Create(&comm, tiny, o);
    ASSERT_OK(ar);
    std::vector<float> x = xs[comm.rank()];
    ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), nullptr));
    EXPECT_TRUE(SameBits(x.data(), want.data(), 3)) << comm.rank();
  });
}

TEST(Fp4AllReduceTest, NonFiniteOnOneRankPoisonsOnlyThatLayer) {
  for (Fp4Format f : {Fp4Format::kNvfp4, Fp4Format::kMxfp4}) {
    const EpochPlan plan = MixedPlan(f);
    RunThreadRanks(3, [&](Transport& comm) {
      auto ar = AllReduceEngine::Create(&comm, plan, {});
      ASSERT_OK(ar);
      std::vector<float> x = Input(plan, comm.rank(), 0);
      if (comm.rank() == 1) x[37 + 100] = std::nanf("");
      if (comm.rank() == 2) x[183] = -INFINITY;
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      EXPECT_EQ(t.nonfinite_layers, 2);
      for (const BucketLayer& l : plan.layers()) {
        const bool poisoned = l.name == "m" || l.name == "tiny";
        for (int64_t i = 0; i < l.size(); ++i) {
          const float v = x[l.offset + i];
          EXPECT_EQ(std::isnan(v), poisoned) << l.name << " " << i;
          if (!poisoned) {
            EXPECT_TRUE(std::isfinite(v));
          }
        }
        EXPECT_EQ(t.layers[plan.FindLayer(l.name)].nonfinite_result, poisoned);
      }
      // The residuals carry nothing non-finite into the next step.
      x = Input(plan, comm.rank(), 1);
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      EXPECT_EQ(t.nonfinite_layers, 0);
      for (float v : x) EXPECT_TRUE(std::isfinite(v));
    });
  }
}

// Bytes the transport sends for 512 × 512 layers on 4 ranks, against the
// FP32 ring allreduce of the same elements, 2 (W−1)/W · 4 bytes each.
TEST(Fp4AllReduceTest, BytesOnTheWireAgainstAnFp32Ring) {
  struct Case {
    WireFormat f;
    double max_ratio;
  };
  for (const Case& c :
       {Case{Fp4Format::kNvfp4, 0.141}, Case{Fp4Format::kMxfp4, 0.133},
        Case{kernels::Fp8Format::kE4M3, 0.255}}) {
    const EpochPlan plan = *EpochPlan::Create(
        0, 2 * 512 * 512 + 512,
        {{.name = "w1", .shape = {512, 512}, .offset = 0, .format = c.f},
         {.name = "w2",
          .shape = {512, 512},
          .offset = 512 * 512,
          .format = c.f},
         {.name = "bias",
          .shape = {512},
          .offset = 2 * 512 * 512,
          .format = c.f}});
    RunThreadRanks(4, [&](Transport& comm) {
      auto ar = AllReduceEngine::Create(&comm, plan, {});
      ASSERT_OK(ar);
      std::vector<float> x = Input(plan, comm.rank(), 0);
      const BytesSent before = comm.bytes_sent();
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), VersionedFactors(), &t));
      const BytesSent after = comm.bytes_sent();
      const uint64_t payload = (after.all_to_all - before.all_to_all) +
                               (after.all_gather - before.all_gather);
      EXPECT_EQ(t.bytes_euclid + t.bytes_gift, payload);
      // Exactly the wire layout: the chunks for the others, then this
      // rank's chunk to each of them (equal chunks here).
      const PieceLayout piece =
          LayoutPiece(plan, 0, plan.communicated_elements(), 4);
      uint64_t a2a = 0;
      for (int j = 0; j < 4; ++j) {
        if (j != comm.rank()) a2a += piece.chunks[j].wire_bytes();
      }
      EXPECT_EQ(after.all_to_all - before.all_to_all, a2a);
      const double fp32_ring =
          2.0 * 3 / 4 * 4.0 * double(plan.communicated_elements());
      const double ratio = double(payload) / fp32_ring;
      EXPECT_LE(ratio, c.max_ratio) << kernels::WireFormatName(c.f);
      EXPECT_GE(ratio, c.max_ratio - 0.01) << kernels::WireFormatName(c.f);
      if (comm.rank() == 0) {
        std::cout << kernels::WireFormatName(c.f) << ": " << payload
                  << " bytes, " << ratio << " of the FP32 ring" << std::endl;
      }
    });
  }
}

}  // namespace
}  // namespace gift::client
