// Does the boundary-hit score rank the layers that gain? On the 8 committed
// MLP gradients (tests/data snapshots: the workers' mean gradient, fresh A,
// as `make fidelity` runs them) this measures, per wire format, the
// Spearman rank correlation between a layer's vulnerability score
// (upper + lower) / n (daemon/selector.h) and GIFT's one-step gain there,
// 1 − RelL2(lowrankA_32:1.0) / RelL2(euclid). Scores compared:
//   * tensor: the kernels' telemetry in the layer's own format (4-bit:
//     tensor-relative hits, kernels/quantize_fp4.h);
//   * block: the old 4-bit count, hits of the codes actually sent (each
//     element against its own block scale), recomputed from the codes;
//   * e4m3: the per-tensor E4M3 count of the same gradient.
// Each score over the mean gradient (one call), over the 4 workers' local
// gradients (summed, as the selector sums the ranks' telemetry), and over
// those split in 4 segments each (a 4-rank two-phase allreduce's chunks).
// The table is printed; the tensor-relative score must rank the 4-bit gains
// with Spearman >= kMinSpearman (segmented: kMinSegmentedSpearman) and
// above the block-relative one. Measured:
//   format  scored   e4m3 count  block (old)  tensor (new)
//   e4m3    mean          +0.00
//   nvfp4   mean          +0.13        -0.36         +0.81
//   mxfp4   mean          +0.06        -0.36         +0.79
//   e4m3    workers       +0.11
//   nvfp4   workers       +0.31        -0.31         +0.90
//   mxfp4   workers       +0.17        -0.36         +0.86
//   e4m3    4 segs        -0.10
//   nvfp4   4 segs        +0.11        -0.31         +0.79
//   mxfp4   4 segs        +0.02        -0.36         +0.62
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"
#include "kernels/wire_format.h"
#include "tools/fidelity/geometry.h"
#include "tools/fidelity/method.h"
#include "tools/fidelity/round_trip.h"
#include "tools/fidelity/transform.h"
#include "tools/npy.h"

namespace gift::fidelity {
namespace {

constexpr char kData[] = "tests/data";
constexpr double kMinSpearman = 0.6;
constexpr double kMinSegmentedSpearman = 0.5;
using kernels::Fp4Format;
using kernels::WireFormat;

struct Layer {
  std::string name;
  std::vector<std::vector<float>> workers;  // each worker's local gradient
  RowMatrixd mean_grad;
  Eigen::MatrixXd a;
};

absl::StatusOr<tools::NpyArray> Read(const nlohmann::json& rel) {
  return tools::ReadNpy(std::string(kData) + "/" + rel.get<std::string>());
}

std::vector<Layer> Snapshots() {
  std::ifstream f(std::string(kData) + "/manifest.json");
  EXPECT_TRUE(f.good()) << "tests/data/manifest.json is missing";
  nlohmann::json m = nlohmann::json::parse(f, nullptr, false);
  std::vector<Layer> out;
  if (!m.is_object()) return out;
  for (const auto& s : m["snapshots"]) {
    absl::StatusOr<tools::NpyArray> g = Read(s["grad_workers"]);
    absl::StatusOr<tools::NpyArray> a = Read(s["a"]);
    EXPECT_OK(g);
    EXPECT_OK(a);
    if (!g.ok() || !a.ok()) continue;
    Layer l;
    l.name = "step" + std::to_string(s["step"].get<int>()) + " " +
             s["layer"].get<std::string>();
    const int64_t r = g->shape[0], rows = g->shape[1], cols = g->shape[2];
    l.mean_grad = RowMatrixd::Zero(rows, cols);
    for (int64_t w = 0; w < r; ++w) {
      const float* p = g->data.data() + w * rows * cols;
      l.workers.emplace_back(p, p + rows * cols);
      l.mean_grad += Eigen::Map<const RowMatrixf>(p, rows, cols).cast<double>();
    }
    l.mean_grad /= static_cast<double>(r);
    l.a = Eigen::Map<const RowMatrixf>(a->data.data(), a->shape[0], a->shape[1])
              .cast<double>();
    out.push_back(std::move(l));
  }
  return out;
}

// 1 − RelL2(GIFT) / RelL2(Euclidean) at format f.
absl::StatusOr<double> Gain(const Layer& l, WireFormat f) {
  Geometry geo(l.a, std::nullopt, std::nullopt);
  double rel[2];
  const char* names[2] = {"euclid", "lowrankA_32:1.0"};
  for (int k = 0; k < 2; ++k) {
    absl::StatusOr<MethodSpec> m = ParseMethod(names[k]);
    if (!m.ok()) return m.status();
    absl::StatusOr<std::unique_ptr<Transform>> t = MakeTransform(*m, geo);
    if (!t.ok()) return t.status();
    absl::StatusOr<ErrorMetrics> e =
        OneStepRoundTrip(l.mean_grad, **t, WireSpec(f, 0));
    if (!e.ok()) return e.status();
    rel[k] = e->rel_l2;
  }
  return 1 - rel[1] / rel[0];
}

// Boundary hits of one quantize call: the kernels' telemetry (4-bit:
// tensor-relative) and, for 4-bit, the block-relative count of the codes.
struct Hits {
  int64_t n = 0, tensor = 0, block = 0;

  void Add(const Hits& o) {
    n += o.n;
    tensor += o.tensor;
    block += o.block;
  }
};

Hits Fp4Hits(const std::vector<float>& x, Fp4Format f) {
  const int64_t n = x.size();
  std::vector<uint8_t> codes(kernels::Fp4PackedBytes(n)),
      scales(kernels::Fp4NumBlocks(n, f));
  float s_t;
  kernels::QuantizeStats st;
  EXPECT_OK(kernels::QuantizeFp4(x.data(), n, f, codes.data(), scales.data(),
                                 &s_t, nullptr, &st));
  int64_t block = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = (codes[i / 2] >> (4 * (i % 2))) & 7;
    block += c == kernels::kE2M1MaxCode || (c == 0 && x[i] != 0);
  }
  return {n, st.upper + st.lower, block};
}

Hits E4m3Hits(const std::vector<float>& x) {
  std::vector<uint8_t> codes(x.size());
  float scale;
  kernels::QuantizeStats st;
  EXPECT_OK(kernels::Quantize(x.data(), x.size(),
                              {kernels::Fp8Format::kE4M3, 0}, codes.data(),
                              &scale, nullptr, &st));
  return {st.n, st.upper + st.lower, 0};
}

// How a layer's gradient is scored: its mean gradient in one call (as
// gift-fidelity quantizes it), or its workers' local gradients, each in
// `segments` equal calls (Σ hits / Σ n: what the selector sees, the ranks'
// telemetry summed; a 4-rank two-phase allreduce quantizes a layer that
// spans the bucket as 4 segments, one per chunk owner).
struct Scoring {
  const char* name;
  bool workers;
  int segments;
  double min_spearman;
};
constexpr Scoring kScorings[] = {{"mean", false, 1, kMinSpearman},
                                 {"workers", true, 1, kMinSpearman},
                                 {"4 segs", true, 4, kMinSegmentedSpearman}};

// The scores of one layer per format ("e4m3", "nvfp4", "nvfp4 block", ...).
std::map<std::string, double> LayerScores(const Layer& l, const Scoring& how) {
  std::vector<std::vector<float>> xs;
  if (how.workers) {
    for (const auto& w : l.workers) {
      const size_t len = w.size() / how.segments;
      for (int k = 0; k < how.segments; ++k) {
        const auto end =
            k + 1 == how.segments ? w.end() : w.begin() + (k + 1) * len;
        xs.emplace_back(w.begin() + k * len, end);
      }
    }
  } else {
    const RowMatrixf wf = l.mean_grad.cast<float>();
    xs.emplace_back(wf.data(), wf.data() + wf.size());
  }
  Hits e4m3, nv, mx;
  for (const auto& x : xs) {
    e4m3.Add(E4m3Hits(x));
    nv.Add(Fp4Hits(x, Fp4Format::kNvfp4));
    mx.Add(Fp4Hits(x, Fp4Format::kMxfp4));
  }
  return {{"e4m3", double(e4m3.tensor) / e4m3.n},
          {"nvfp4", double(nv.tensor) / nv.n},
          {"nvfp4 block", double(nv.block) / nv.n},
          {"mxfp4", double(mx.tensor) / mx.n},
          {"mxfp4 block", double(mx.block) / mx.n}};
}

// Ranks 1..n, ties sharing their mean rank.
std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0 + 1;
    i = j + 1;
  }
  return r;
}

// Pearson correlation of the ranks (0 when one side is constant).
double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = Ranks(a), rb = Ranks(b);
  const double n = ra.size(), mean = (n + 1) / 2;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    ab += (ra[i] - mean) * (rb[i] - mean);
    aa += (ra[i] - mean) * (ra[i] - mean);
    bb += (rb[i] - mean) * (rb[i] - mean);
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0;
}

TEST(HitScoreRankTest, SpearmanOfScoreAndGiftGainOnCommittedGradients) {
  const std::vector<Layer> layers = Snapshots();
  ASSERT_EQ(layers.size(), 8u) << "expected the 8 committed MLP snapshots";
  const WireFormat formats[] = {kernels::Fp8Format::kE4M3, Fp4Format::kNvfp4,
                                Fp4Format::kMxfp4};
  constexpr int kNumScorings = std::size(kScorings);
  std::map<std::string, std::vector<double>> gain, score[kNumScorings];
  for (const Layer& l : layers) {
    std::printf("%-24s gain", l.name.c_str());
    for (WireFormat f : formats) {
      absl::StatusOr<double> g = Gain(l, f);
      ASSERT_OK(g);
      gain[kernels::WireFormatName(f)].push_back(*g);
      std::printf(" %s %.3f", kernels::WireFormatName(f), *g);
    }
    for (int w = 0; w < kNumScorings; ++w) {
      const auto sc = LayerScores(l, kScorings[w]);
      for (const auto& [k, v] : sc) score[w][k].push_back(v);
      std::printf(
          " | %s score e4m3 %.2e nvfp4 %.3f (block %.3f) mxfp4 %.3f (block "
          "%.3f)",
          kScorings[w].name, sc.at("e4m3"), sc.at("nvfp4"),
          sc.at("nvfp4 block"), sc.at("mxfp4"), sc.at("mxfp4 block"));
    }
    std::printf("\n");
  }
  std::printf("Spearman(score, GIFT gain at the format), 8 layers\n");
  std::printf("%-8s %-8s %11s %12s %13s\n", "format", "scored", "e4m3 count",
              "block (old)", "tensor (new)");
  for (int w = 0; w < kNumScorings; ++w) {
    const char* on = kScorings[w].name;
    for (const char* f : {"e4m3", "nvfp4", "mxfp4"}) {
      const std::string fs = f;
      const double e4m3 = Spearman(score[w]["e4m3"], gain[fs]);
      if (fs == "e4m3") {
        std::printf("%-8s %-8s %+11.2f %12s %13s\n", f, on, e4m3, "-", "-");
        continue;
      }
      const double block = Spearman(score[w][fs + " block"], gain[fs]);
      const double tensor = Spearman(score[w][fs], gain[fs]);
      std::printf("%-8s %-8s %+11.2f %+12.2f %+13.2f\n", f, on, e4m3, block,
                  tensor);
      RecordProperty(absl::StrCat("spearman_", f, "_", on, "_tensor"),
                     absl::StrCat(tensor));
      RecordProperty(absl::StrCat("spearman_", f, "_", on, "_block"),
                     absl::StrCat(block));
      EXPECT_GE(tensor, kScorings[w].min_spearman) << f << " " << on;
      EXPECT_GT(tensor, block) << f << " " << on;
    }
  }
}

}  // namespace
}  // namespace gift::fidelity
