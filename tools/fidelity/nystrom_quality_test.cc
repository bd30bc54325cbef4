// Nyström factor quality on the committed real activations (tests/data,
// DESIGN §2 quality target): for every snapshot layer with activations X,
// A = XᵀX / rows,
//   * energy: tr(UₙᵀAUₙ) / tr(UₑᵀAUₑ) >= 0.99 for the rank-32 Nyström U_n
//     (k = 48) against the exact top-32 U_e;
//   * fidelity: the one-step RelL2 of nystromA_32:1.0 on the layer's mean
//     gradient is within 2% of lowrankA_32:1.0's.
//
// Which factor is asserted: the WARM-STARTED one the daemon uses after its
// first refresh (Ω = orth[U_prev | G], U_prev = the rank-32 single-pass
// factor of the first half of X's rows, then a sketch of all rows). The
// single-pass sketch (gift-fidelity's nystromA_32, no U_prev) misses both
// targets on this data: energy 0.984 on step 290 blocks.1.mlp.fc2 (its A has
// effective rank 35, top-32 share 0.87) and RelL2 +4.0% / +2.5% on the two
// step-290 fc2 layers; its figures are printed, not asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status_matchers.h"
#include "linalg/eigen_pairs.h"
#include "tools/fidelity/geometry.h"
#include "tools/fidelity/nystrom_sketch.h"
#include "tools/fidelity/round_trip.h"
#include "tools/fidelity/transform.h"
#include "tools/npy.h"

namespace gift::fidelity {
namespace {

constexpr char kData[] = "tests/data";
constexpr int kRank = 32;
constexpr kernels::QuantizeSpec kE4M3{kernels::Fp8Format::kE4M3, 0};

struct Layer {
  std::string name;
  RowMatrixf acts;
  RowMatrixd mean_grad;
};

std::vector<Layer> LayersWithActs() {
  std::ifstream f(std::string(kData) + "/manifest.json");
  EXPECT_TRUE(f.good()) << "tests/data/manifest.json is missing";
  nlohmann::json m = nlohmann::json::parse(f, nullptr, false);
  EXPECT_FALSE(m.is_discarded()) << "manifest.json is not JSON";
  std::vector<Layer> out;
  if (!m.is_object()) return out;
  for (const auto& s : m["snapshots"]) {
    if (s["acts"].is_null()) continue;
    absl::StatusOr<tools::NpyArray> x =
        tools::ReadNpy(std::string(kData) + "/" + s["acts"].get<std::string>());
    absl::StatusOr<tools::NpyArray> g = tools::ReadNpy(
        std::string(kData) + "/" + s["grad_workers"].get<std::string>());
    EXPECT_OK(x);
    EXPECT_OK(g);
    if (!x.ok() || !g.ok()) continue;
    Layer l;
    l.name = "step" + std::to_string(s["step"].get<int>()) + " " +
             s["layer"].get<std::string>();
    l.acts =
        Eigen::Map<const RowMatrixf>(x->data.data(), x->shape[0], x->shape[1]);
    const int64_t r = g->shape[0], n = g->shape[1] * g->shape[2];
    l.mean_grad = RowMatrixd::Zero(g->shape[1], g->shape[2]);
    for (int64_t w = 0; w < r; ++w) {
      l.mean_grad += Eigen::Map<const RowMatrixf>(g->data.data() + w * n,
                                                  g->shape[1], g->shape[2])
                         .cast<double>();
    }
    l.mean_grad /= static_cast<double>(r);
    out.push_back(std::move(l));
  }
  return out;
}

double Energy(const Eigen::MatrixXd& a, const Eigen::MatrixXd& u) {
  return (u.transpose() * a * u).trace();
}

absl::StatusOr<double> RelL2(const Layer& l, const linalg::EigenPairs& e,
                             double trace, const WireSpec& spec = kE4M3) {
  std::unique_ptr<Transform> t = MakeLowRankTransform(
      e, trace, l.acts.cols(), linalg::FactorDamping::Clipped(1.0));
  absl::StatusOr<ErrorMetrics> m = OneStepRoundTrip(l.mean_grad, *t, spec);
  if (!m.ok()) return m.status();
  return m->rel_l2;
}

TEST(NystromQualityTest, WarmStartedSketchMatchesExactFactorOnRealData) {
  const std::vector<Layer> layers = LayersWithActs();
  int fc2 = 0;
  for (const Layer& l : layers) fc2 += l.name.find("fc2") != std::string::npos;
  ASSERT_GE(fc2, 2) << "expected activations of the fc2 layers";
  for (const Layer& l : layers) {
    SCOPED_TRACE(l.name);
    const Eigen::MatrixXd a = MomentFromActivations(l.acts);
    absl::StatusOr<linalg::EigenPairs> exact = linalg::TopEigenpairs(a, kRank);
    ASSERT_OK(exact);
    absl::StatusOr<SketchedFactor> single = SketchEigenpairs(l.acts, kRank);
    ASSERT_OK(single);
    // Warm start: the previous factor from the first half of the rows.
    const RowMatrixf half = l.acts.topRows(l.acts.rows() / 2);
    absl::StatusOr<SketchedFactor> prev =
        SketchEigenpairs(half, kRank, nullptr, kNystromSeed + 1);
    ASSERT_OK(prev);
    absl::StatusOr<SketchedFactor> warm =
        SketchEigenpairs(l.acts, kRank, &prev->pairs.u);
    ASSERT_OK(warm);

    const double e_exact = Energy(a, exact->u);
    const double e_single = Energy(a, single->pairs.u) / e_exact;
    const double e_warm = Energy(a, warm->pairs.u) / e_exact;
    EXPECT_NEAR(warm->trace, a.trace(), 1e-4 * a.trace());
    absl::StatusOr<double> r_exact = RelL2(l, *exact, a.trace());
    absl::StatusOr<double> r_single = RelL2(l, single->pairs, single->trace);
    absl::StatusOr<double> r_warm = RelL2(l, warm->pairs, warm->trace);
    ASSERT_OK(r_exact);
    ASSERT_OK(r_single);
    ASSERT_OK(r_warm);
    std::printf(
        "%-24s energy single %.5f warm %.6f | rel_l2 lowrank %.4e "
        "nystrom single %.4e (%+.2f%%) warm %.4e (%+.2f%%)\n",
        l.name.c_str(), e_single, e_warm, *r_exact, *r_single,
        100 * (*r_single / *r_exact - 1), *r_warm,
        100 * (*r_warm / *r_exact - 1));
    EXPECT_GE(e_warm, 0.99);
    EXPECT_LE(e_warm, 1.0 + 1e-9);
    EXPECT_LE(std::abs(*r_warm - *r_exact), 0.02 * *r_exact);
  }
}

// giftd's sketch_oversample p (issue 28): the warm-started factor of
// r + p columns at p = 0, 8, 16 (the default: 48 columns at rank 32) and
// 48 (the 80 = max_rank + 16 columns the ranks sketched before windows
// took r + p). Per layer and p the energy against the exact top-32 and the
// one-step RelL2 at E4M3 and NVFP4 against lowrankA_32's are printed; the
// default must keep the energy target and stay within 1% of the 80-column
// factor's RelL2 (the narrower sketch costs no fidelity).
TEST(NystromQualityTest, OversampleSweepOnRealData) {
  const std::vector<Layer> layers = LayersWithActs();
  ASSERT_FALSE(layers.empty());
  const WireSpec nvfp4{kernels::WireFormat(kernels::Fp4Format::kNvfp4)};
  std::printf("%-26s %3s %9s %11s %11s\n", "layer", "p", "energy",
              "E4M3 /exact", "NVFP4 /exact");
  for (const Layer& l : layers) {
    SCOPED_TRACE(l.name);
    const Eigen::MatrixXd a = MomentFromActivations(l.acts);
    absl::StatusOr<linalg::EigenPairs> exact = linalg::TopEigenpairs(a, kRank);
    ASSERT_OK(exact);
    const double e_exact = Energy(a, exact->u);
    absl::StatusOr<double> r8_exact = RelL2(l, *exact, a.trace());
    absl::StatusOr<double> r4_exact = RelL2(l, *exact, a.trace(), nvfp4);
    ASSERT_OK(r8_exact);
    ASSERT_OK(r4_exact);
    double r8_default = 0, r4_default = 0, r8_wide = 0, r4_wide = 0;
    for (int p : {0, 8, 16, 48}) {
      if (kRank + p > l.acts.cols()) continue;
      const RowMatrixf half = l.acts.topRows(l.acts.rows() / 2);
      absl::StatusOr<SketchedFactor> prev =
          SketchEigenpairs(half, kRank, nullptr, kNystromSeed + 1, p);
      ASSERT_OK(prev);
      absl::StatusOr<SketchedFactor> warm =
          SketchEigenpairs(l.acts, kRank, &prev->pairs.u, kNystromSeed, p);
      ASSERT_OK(warm);
      const double energy = Energy(a, warm->pairs.u) / e_exact;
      absl::StatusOr<double> r8 = RelL2(l, warm->pairs, warm->trace);
      absl::StatusOr<double> r4 = RelL2(l, warm->pairs, warm->trace, nvfp4);
      ASSERT_OK(r8);
      ASSERT_OK(r4);
      std::printf("%-26s %3d %9.6f %11.4f %11.4f\n", l.name.c_str(), p, energy,
                  *r8 / *r8_exact, *r4 / *r4_exact);
      if (p == 16) {
        EXPECT_GE(energy, 0.99);
        r8_default = *r8;
        r4_default = *r4;
      }
      if (p == 48) {
        r8_wide = *r8;
        r4_wide = *r4;
      }
    }
    if (r8_wide > 0) {
      EXPECT_LE(r8_default, 1.01 * r8_wide);
      EXPECT_LE(r4_default, 1.01 * r4_wide);
    }
  }
}

}  // namespace
}  // namespace gift::fidelity
