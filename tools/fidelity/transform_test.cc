#include "tools/fidelity/transform.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/status_matchers.h"
#include "tools/fidelity/round_trip.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::StatusIs;

constexpr int kDOut = 24, kDIn = 40, kRows = 200;

// Activations with a decaying spectrum, so A is anisotropic.
RowMatrixf Activations(int rows, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0, 1);
  RowMatrixf x(rows, d);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < d; ++j) x(i, j) = n(rng) * std::pow(0.85f, j);
  }
  // Mix the coordinates so that A is not diagonal.
  Eigen::MatrixXf q =
      Eigen::HouseholderQR<Eigen::MatrixXf>(Eigen::MatrixXf::Random(d, d))
          .householderQ();
  return x * q;
}

RowMatrixd Gradient(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0, 1);
  RowMatrixd w(rows, cols);
  for (int i = 0; i < w.size(); ++i) w.data()[i] = n(rng) * 1e-3;
  return w;
}

class TransformTest : public ::testing::Test {
 protected:
  TransformTest()
      : x_(Activations(kRows, kDIn, 1)),
        a_(MomentFromActivations(x_)),
        g_(MomentFromActivations(Activations(kRows, kDOut, 2))),
        w_(Gradient(kDOut, kDIn, 3)),
        geo_(a_, g_, x_) {}

  std::unique_ptr<Transform> Make(const std::string& name) {
    absl::StatusOr<MethodSpec> m = ParseMethod(name);
    EXPECT_OK(m);
    absl::StatusOr<std::unique_ptr<Transform>> t = MakeTransform(*m, geo_);
    EXPECT_OK(t) << name;
    return t.ok() ? *std::move(t) : nullptr;
  }
  double Gamma(const Eigen::MatrixXd& s) { return 1e-3 * s.trace() / s.rows(); }
  // Reference symmetric power (S + shift I)^p with Eigen's own solver.
  Eigen::MatrixXd Power(const Eigen::MatrixXd& s, double shift, double p) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(s);
    Eigen::VectorXd v = (es.eigenvalues().array() + shift).pow(p);
    return es.eigenvectors() * v.asDiagonal() * es.eigenvectors().transpose();
  }
  // Reference T = I + U diag(c) Uᵀ of the low-rank factor.
  Eigen::MatrixXd LowRankT(int r, std::optional<double> beta, bool inverse) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(a_);
    const Eigen::MatrixXd u =
        es.eigenvectors().rightCols(r).rowwise().reverse();
    Eigen::VectorXd lambda = es.eigenvalues().tail(r).reverse();
    const double tr = a_.trace();
    const double floor = beta ? *beta * tr / kDIn : Gamma(a_);
    const double s2 = std::max((tr - lambda.sum()) / (kDIn - r), floor);
    if (beta) lambda = lambda.cwiseMax(s2);
    Eigen::VectorXd c(r);
    for (int i = 0; i < r; ++i) {
      c(i) =
          (inverse ? std::sqrt(lambda(i) / s2) : std::sqrt(s2 / lambda(i))) - 1;
    }
    return Eigen::MatrixXd::Identity(kDIn, kDIn) +
           u * c.asDiagonal() * u.transpose();
  }
  static double Rel(const RowMatrixd& a, const RowMatrixd& b) {
    return (a - b).norm() / b.norm();
  }

  RowMatrixf x_;
  Eigen::MatrixXd a_, g_;
  RowMatrixd w_;
  Geometry geo_;
};

TEST_F(TransformTest, EveryMethodInverts) {
  for (const char* name :
       {"euclid", "euclid_block512", "diagA", "fullA_chol", "fullA_sym",
        "fullA_sym:0.3", "blockA_16", "blockA_64", "lowrankA_8",
        "lowrankA_8:1.0", "nystromA_8", "nystromA_8:1.0", "outG_chol",
        "kfac_chol"}) {
    std::unique_ptr<Transform> t = Make(name);
    ASSERT_NE(t, nullptr);
    const RowMatrixd f = t->Forward(w_);
    EXPECT_LT(Rel(t->Backward(f), w_), 1e-9) << name;
    if (std::string(name).rfind("euclid", 0) != 0) {
      EXPECT_GT(Rel(f, w_), 1e-3) << name << " changed nothing";
    }
  }
}

TEST_F(TransformTest, MatchesDefinitions) {
  const double gamma = Gamma(a_), tau = 0.3 * a_.trace() / kDIn;
  Eigen::VectorXd diag = (a_.diagonal().array() + gamma).rsqrt();
  EXPECT_LT(Rel(Make("diagA")->Forward(w_), w_ * diag.asDiagonal()), 1e-12);
  EXPECT_LT(Rel(Make("fullA_sym")->Forward(w_), w_ * Power(a_, gamma, -0.5)),
            1e-9);
  EXPECT_LT(Rel(Make("fullA_sym:0.3")->Forward(w_), w_ * Power(a_, tau, -0.5)),
            1e-9);
  EXPECT_LT(Rel(Make("fullA_sym:0.3")->Backward(w_), w_ * Power(a_, tau, 0.5)),
            1e-9);
  const Eigen::MatrixXd shifted =
      a_ + gamma * Eigen::MatrixXd::Identity(kDIn, kDIn);
  Eigen::MatrixXd l = shifted.llt().matrixL();
  EXPECT_LT(Rel(Make("fullA_chol")->Forward(w_) * l.transpose(), w_), 1e-9);
  Eigen::MatrixXd lg =
      (g_ + Gamma(g_) * Eigen::MatrixXd::Identity(kDOut, kDOut))
          .llt()
          .matrixL();
  EXPECT_LT(Rel(lg * Make("outG_chol")->Forward(w_), w_), 1e-9);
  EXPECT_LT(Rel(lg * Make("kfac_chol")->Forward(w_) * l.transpose(), w_), 1e-9);
  for (std::optional<double> beta :
       {std::optional<double>(), std::optional(1.0)}) {
    const std::string name = beta ? "lowrankA_8:1.0" : "lowrankA_8";
    EXPECT_LT(Rel(Make(name)->Forward(w_), w_ * LowRankT(8, beta, false)), 1e-8)
        << name;
    EXPECT_LT(Rel(Make(name)->Backward(w_), w_ * LowRankT(8, beta, true)), 1e-8)
        << name;
  }
}

TEST_F(TransformTest, BlockCholeskyUsesDiagonalBlocksAndGlobalGamma) {
  const RowMatrixd f = Make("blockA_16")->Forward(w_);
  const double gamma = Gamma(a_);
  for (int off = 0; off < kDIn; off += 16) {
    const int b = std::min(16, kDIn - off);
    Eigen::MatrixXd l =
        (a_.block(off, off, b, b) + gamma * Eigen::MatrixXd::Identity(b, b))
            .llt()
            .matrixL();
    RowMatrixd back = f.middleCols(off, b) * l.transpose();
    EXPECT_LT(Rel(back, w_.middleCols(off, b)), 1e-9) << off;
  }
  // Past d_in: one block, i.e. fullA_chol.
  EXPECT_LT(
      Rel(Make("blockA_64")->Forward(w_), Make("fullA_chol")->Forward(w_)),
      1e-12);
}

TEST_F(TransformTest, NystromIsExactForLowRankActivations) {
  // Rank-8 activations: the sketch (k = 8 + 16) captures A exactly, so the
  // Nyström factor equals the exact one up to the float32 sketch.
  const RowMatrixf low =
      Activations(kRows, 8, 4) * Eigen::MatrixXf::Random(8, kDIn);
  Geometry geo(std::nullopt, std::nullopt, low);
  auto make = [&](const char* name) {
    return *MakeTransform(*ParseMethod(name), geo);
  };
  EXPECT_LT(Rel(make("nystromA_8:1.0")->Forward(w_),
                make("lowrankA_8:1.0")->Forward(w_)),
            1e-4);
  EXPECT_LT(
      Rel(make("nystromA_8")->Forward(w_), make("lowrankA_8")->Forward(w_)),
      1e-4);
}

TEST_F(TransformTest, FewRowsUseTheSvdOfXAndAgreeWithA) {
  // rows < d_in: the top-r pairs come from the SVD of X, not from A.
  const RowMatrixf few = Activations(30, kDIn, 6);
  Geometry from_x(std::nullopt, std::nullopt, few);
  Geometry from_a(MomentFromActivations(few), std::nullopt, std::nullopt);
  for (const char* name : {"lowrankA_8", "lowrankA_8:1.0"}) {
    const RowMatrixd fx =
        (*MakeTransform(*ParseMethod(name), from_x))->Forward(w_);
    const RowMatrixd fa =
        (*MakeTransform(*ParseMethod(name), from_a))->Forward(w_);
    EXPECT_LT(Rel(fx, fa), 1e-8) << name;
    EXPECT_GT(Rel(fx, w_), 1e-3) << name;
  }
}

TEST_F(TransformTest, RejectsRanksThatDoNotFit) {
  EXPECT_THAT(MakeTransform(*ParseMethod("lowrankA_41"), geo_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MakeTransform(*ParseMethod("nystromA_32"), geo_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Geometry no_g(a_, std::nullopt, std::nullopt);
  EXPECT_THAT(MakeTransform(*ParseMethod("outG_chol"), no_g),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MakeTransform(*ParseMethod("nystromA_8"), no_g),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RoundTripTest, QuantizesThroughTheFp8Kernel) {
  // 448 sets the E4M3 scale to 1; these values are exact E4M3 codes.
  RowMatrixd x(1, 4);
  x << 448, -1.5, 0.25, 0;
  kernels::QuantizeSpec spec{kernels::Fp8Format::kE4M3, 0};
  absl::StatusOr<RowMatrixd> y = QuantizeDequantize(x, spec);
  ASSERT_OK(y);
  EXPECT_EQ(*y, x);
  // 3.3 is not an E4M3 value: at scale 1 it rounds to 3.25.
  x(0, 1) = 3.3;
  y = QuantizeDequantize(x, spec);
  ASSERT_OK(y);
  EXPECT_EQ((*y)(0, 1), 3.25);
  EXPECT_EQ(*QuantizeDequantize(RowMatrixd::Zero(2, 3), spec),
            RowMatrixd::Zero(2, 3));
}

TEST(RoundTripTest, EuclidRelL2SitsAtTheFp8Floor) {
  const RowMatrixd w = Gradient(64, 128, 5);
  absl::StatusOr<MethodSpec> m = ParseMethod("euclid");
  Geometry geo(std::nullopt, std::nullopt, std::nullopt);
  std::unique_ptr<Transform> t = *MakeTransform(*m, geo);
  absl::StatusOr<ErrorMetrics> e4 =
      OneStepRoundTrip(w, *t, {kernels::Fp8Format::kE4M3, 0});
  absl::StatusOr<ErrorMetrics> e5 =
      OneStepRoundTrip(w, *t, {kernels::Fp8Format::kE5M2, 0});
  ASSERT_OK(e4);
  ASSERT_OK(e5);
  // E4M3 keeps 3 mantissa bits (relative step 2^-3), E5M2 2 bits.
  EXPECT_GT(e4->rel_l2, 0.01);
  EXPECT_LT(e4->rel_l2, 0.05);
  EXPECT_GT(e5->rel_l2, 1.5 * e4->rel_l2);
  EXPECT_GT(e4->cos, 0.998);
  EXPECT_NEAR(e4->mse, e4->rel_l2 * e4->rel_l2 * w.squaredNorm() / w.size(),
              1e-6 * e4->mse);
  EXPECT_GT(e4->max_err, 0);
}

TEST(MetricsTest, Conventions) {
  RowMatrixd a(1, 2), b(1, 2);
  a << 3, 4;
  b << 0, 0;
  EXPECT_EQ(CompareTo(b, b).rel_l2, 0);
  EXPECT_EQ(CompareTo(b, b).cos, 1);
  EXPECT_TRUE(std::isinf(CompareTo(a, b).rel_l2));
  EXPECT_EQ(CompareTo(b, a).cos, 0);
  EXPECT_EQ(CompareTo(b, a).rel_l2, 1);
  EXPECT_EQ(CompareTo(b, a).max_err, 4);
  EXPECT_EQ(CompareTo(b, a).mse, 12.5);
  EXPECT_DOUBLE_EQ(CompareTo(-a, a).cos, -1);
}

}  // namespace
}  // namespace gift::fidelity
