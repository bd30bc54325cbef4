#include "kernels/whiten.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;
using RowMatD =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr float kSentinel = std::numeric_limits<float>::quiet_NaN();

std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Orthonormal d × r columns, row-major float.
std::vector<float> OrthonormalFactor(int64_t d, int64_t r, uint32_t seed) {
  std::vector<float> g = RandomVector(d * r, seed);
  Eigen::MatrixXd m(d, r);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < r; ++j) m(i, j) = g[i * r + j];
  Eigen::MatrixXd q =
      m.householderQr().householderQ() * Eigen::MatrixXd::Identity(d, r);
  std::vector<float> u(d * r);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < r; ++j) u[i * r + j] = static_cast<float>(q(i, j));
  return u;
}

// Forward and inverse coefficients of a factor with eigenvalues 10^{-j/2}
// over a floor of 0.01: the strong directions are shrunk by up to 10×.
void Coefficients(int64_t r, std::vector<float>* c, std::vector<float>* c_inv) {
  const double sigma2 = 0.01;
  c->resize(r);
  c_inv->resize(r);
  for (int64_t j = 0; j < r; ++j) {
    const double lambda = std::max(std::pow(10.0, -0.5 * j), sigma2);
    (*c)[j] = static_cast<float>(std::sqrt(sigma2 / lambda) - 1.0);
    (*c_inv)[j] = static_cast<float>(std::sqrt(lambda / sigma2) - 1.0);
  }
}

RowMatD ToDouble(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return Eigen::Map<const RowMatF>(v.data(), rows, cols).cast<double>();
}

// T = I + U diag(c) Uᵀ, formed explicitly (tests only).
RowMatD DenseT(const std::vector<float>& u, const std::vector<float>& c,
               int64_t d, int64_t r) {
  RowMatD um = ToDouble(u, d, r);
  Eigen::VectorXd cv =
      Eigen::Map<const Eigen::VectorXf>(c.data(), r).cast<double>();
  return RowMatD::Identity(d, d) + um * cv.asDiagonal() * um.transpose();
}

double RelErr(const std::vector<float>& got, const RowMatD& want) {
  RowMatD g = ToDouble(got, want.rows(), want.cols());
  return (g - want).norm() / want.norm();
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

struct Case {
  int64_t rows = 37, d = 96, r = 8;
  std::vector<float> x, add, u, c, c_inv, ws;
  explicit Case(uint32_t seed) {
    x = RandomVector(rows * d, seed);
    add = RandomVector(rows * d, seed + 1, 0.1f);
    u = OrthonormalFactor(d, r, seed + 2);
    Coefficients(r, &c, &c_inv);
    ws.assign(WhitenWorkspaceFloats(rows, d, r), kSentinel);
  }
  LowRankView Forward() const { return {u.data(), c.data(), d, r}; }
  LowRankView Inverse() const { return {u.data(), c_inv.data(), d, r}; }
};

TEST(WhitenTest, WorkspaceSize) {
  EXPECT_EQ(WhitenWorkspaceFloats(10, 64, 4), 10 * (64 + 4));
  EXPECT_EQ(WhitenWorkspaceFloats(0, 64, 4), 0);
  EXPECT_EQ(WhitenWorkspaceFloats(-1, 64, 4), 0);
}

TEST(WhitenTest, LowRankMatchesDenseReference) {
  Case k(11);
  std::vector<float> out(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), nullptr, out.data(),
                         k.ws.data()));
  RowMatD want = ToDouble(k.x, k.rows, k.d) * DenseT(k.u, k.c, k.d, k.r);
  ASSERT_TRUE(AllFinite(out));
  EXPECT_LT(RelErr(out, want), 1e-5);
  // The transform is not the identity on this data.
  EXPECT_GT((want - ToDouble(k.x, k.rows, k.d)).norm(), 0.1 * want.norm());
}

TEST(WhitenTest, LowRankWithAddMatchesDenseReference) {
  Case k(12);
  std::vector<float> out(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), k.add.data(),
                         out.data(), k.ws.data()));
  RowMatD want = ToDouble(k.x, k.rows, k.d) * DenseT(k.u, k.c, k.d, k.r) +
                 ToDouble(k.add, k.rows, k.d);
  ASSERT_TRUE(AllFinite(out));
  EXPECT_LT(RelErr(out, want), 1e-5);
}

TEST(WhitenTest, ForwardThenInverseIsIdentity) {
  Case k(13);
  std::vector<float> white(k.rows * k.d, kSentinel);
  std::vector<float> back(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), nullptr, white.data(),
                         k.ws.data()));
  ASSERT_OK(ApplyLowRank(white.data(), k.rows, k.Inverse(), nullptr,
                         back.data(), k.ws.data()));
  EXPECT_LT(RelErr(back, ToDouble(k.x, k.rows, k.d)), 1e-5);
  EXPECT_GT(RelErr(white, ToDouble(k.x, k.rows, k.d)), 1e-2);
}

TEST(WhitenTest, OutMayAliasXOrAdd) {
  Case k(14);
  std::vector<float> want(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), k.add.data(),
                         want.data(), k.ws.data()));
  std::vector<float> in_x = k.x;
  ASSERT_OK(ApplyLowRank(in_x.data(), k.rows, k.Forward(), k.add.data(),
                         in_x.data(), k.ws.data()));
  EXPECT_EQ(in_x, want);
  std::vector<float> in_add = k.add;
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), in_add.data(),
                         in_add.data(), k.ws.data()));
  EXPECT_EQ(in_add, want);
  // Without add, in place equals out of place too.
  std::vector<float> plain(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, k.Forward(), nullptr, plain.data(),
                         k.ws.data()));
  std::vector<float> in_place = k.x;
  ASSERT_OK(ApplyLowRank(in_place.data(), k.rows, k.Forward(), nullptr,
                         in_place.data(), k.ws.data()));
  EXPECT_EQ(in_place, plain);
}

TEST(WhitenTest, RankZeroIsCopyPlusAdd) {
  Case k(15);
  std::vector<float> out(k.rows * k.d, kSentinel);
  LowRankView empty{nullptr, nullptr, k.d, 0};
  ASSERT_OK(ApplyLowRank(k.x.data(), k.rows, empty, k.add.data(), out.data(),
                         nullptr));
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], k.x[i] + k.add[i]) << i;
  }
}

// ApplyLowRank (the tiled AVX2 path where the CPU has it) and the portable
// path against x + ((x U) diag(c)) Uᵀ + add in double, to float GEMM
// rounding, on shapes that leave ragged edges: the last block of rows
// (blocks are 96 rows), the last register tile of rows (6), of P's columns
// (16) and of out's columns (16), and the last chunk of Uᵀ (r · chunk <=
// 8192); d and r not multiples of 8; r = 0 and r = d. With and without add,
// out of place and in place (out aliasing x, or add).
struct Shape {
  int64_t rows, d, r;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.rows << " × " << s.d << ", r = " << s.r;
}

class LowRankShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(LowRankShapeTest, MatchesDoubleReference) {
  const auto [rows, d, r] = GetParam();
  const std::vector<float> x = RandomVector(rows * d, 21);
  const std::vector<float> add = RandomVector(rows * d, 22, 0.1f);
  const std::vector<float> u = OrthonormalFactor(d, r, 23);
  std::vector<float> c, c_inv;
  Coefficients(r, &c, &c_inv);
  const LowRankView f{u.data(), c.data(), d, r};
  const RowMatD xd = ToDouble(x, rows, d);
  const RowMatD ud = ToDouble(u, d, r);
  const Eigen::VectorXd cd =
      Eigen::Map<const Eigen::VectorXf>(c.data(), r).cast<double>();
  const RowMatD plain = xd + (xd * ud) * cd.asDiagonal() * ud.transpose();
  const RowMatD with_add = plain + ToDouble(add, rows, d);

  using Apply = absl::Status (*)(const float*, int64_t, const LowRankView&,
                                 const float*, float*, float*);
  for (Apply apply :
       {Apply{&ApplyLowRank}, Apply{&internal::ApplyLowRankPortable}}) {
    // The workspace holds exactly rows · r floats, NaN-filled.
    std::vector<float> ws(rows * r, kSentinel);
    std::vector<float> out(rows * d, kSentinel);
    ASSERT_OK(apply(x.data(), rows, f, nullptr, out.data(), ws.data()));
    ASSERT_TRUE(AllFinite(out));
    EXPECT_LT(RelErr(out, plain), 1e-5);
    std::vector<float> in_place = x;
    ASSERT_OK(
        apply(in_place.data(), rows, f, nullptr, in_place.data(), ws.data()));
    EXPECT_EQ(in_place, out);

    std::fill(out.begin(), out.end(), kSentinel);
    ASSERT_OK(apply(x.data(), rows, f, add.data(), out.data(), ws.data()));
    ASSERT_TRUE(AllFinite(out));
    EXPECT_LT(RelErr(out, with_add), 1e-5);

    std::vector<float> in_x = x;
    ASSERT_OK(apply(in_x.data(), rows, f, add.data(), in_x.data(), ws.data()));
    EXPECT_EQ(in_x, out);
    std::vector<float> in_add = add;
    ASSERT_OK(
        apply(x.data(), rows, f, in_add.data(), in_add.data(), ws.data()));
    EXPECT_EQ(in_add, out);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LowRankShapeTest,
    ::testing::Values(Shape{205, 1003, 20},  // 3 blocks, 3 chunks of Uᵀ
                      Shape{7, 77, 40}, Shape{1, 33, 33}, Shape{96, 16, 16},
                      Shape{100, 13, 0}, Shape{13, 600, 520}),  // r > 512
    [](const ::testing::TestParamInfo<Shape>& info) {
      return absl::StrCat(info.param.rows, "x", info.param.d, "_r",
                          info.param.r);
    });

TEST(WhitenTest, DenseMatchesReference) {
  Case k(16);
  std::vector<float> t = RandomVector(k.d * k.d, 99, 0.2f);
  std::vector<float> out(k.rows * k.d, kSentinel);
  ASSERT_OK(ApplyDense(k.x.data(), k.rows, k.d, t.data(), nullptr, out.data()));
  RowMatD want = ToDouble(k.x, k.rows, k.d) * ToDouble(t, k.d, k.d);
  ASSERT_TRUE(AllFinite(out));
  EXPECT_LT(RelErr(out, want), 1e-5);

  std::fill(out.begin(), out.end(), kSentinel);
  ASSERT_OK(
      ApplyDense(k.x.data(), k.rows, k.d, t.data(), k.add.data(), out.data()));
  RowMatD want_add = want + ToDouble(k.add, k.rows, k.d);
  EXPECT_LT(RelErr(out, want_add), 1e-5);

  std::vector<float> in_add = k.add;  // out aliasing add is allowed
  ASSERT_OK(ApplyDense(k.x.data(), k.rows, k.d, t.data(), in_add.data(),
                       in_add.data()));
  EXPECT_LT(RelErr(in_add, want_add), 1e-5);

  std::vector<float> x = k.x;
  EXPECT_THAT(ApplyDense(x.data(), k.rows, k.d, t.data(), nullptr, x.data()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WhitenTest, ReprojectResidualMatchesDenseReference) {
  Case k(17);
  const int64_t r_new = 12;
  std::vector<float> u_new = OrthonormalFactor(k.d, r_new, 77);
  std::vector<float> c_new, c_new_inv;
  Coefficients(r_new, &c_new, &c_new_inv);
  std::vector<float> residual = k.add;
  std::vector<float> ws(WhitenWorkspaceFloats(k.rows, k.d, r_new), kSentinel);
  ASSERT_OK(ReprojectResidual(residual.data(), k.rows, k.Inverse(),
                              {u_new.data(), c_new.data(), k.d, r_new},
                              ws.data()));
  RowMatD want = ToDouble(k.add, k.rows, k.d) * DenseT(k.u, k.c_inv, k.d, k.r) *
                 DenseT(u_new, c_new, k.d, r_new);
  ASSERT_TRUE(AllFinite(residual));
  EXPECT_LT(RelErr(residual, want), 1e-5);
}

TEST(WhitenTest, RejectsBadArguments) {
  Case k(18);
  std::vector<float> out(k.rows * k.d);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ApplyLowRank(k.x.data(), -1, k.Forward(), nullptr, out.data(),
                           k.ws.data()),
              StatusIs(kInvalid));
  LowRankView too_wide{k.u.data(), k.c.data(), 4, 8};
  EXPECT_THAT(ApplyLowRank(k.x.data(), k.rows, too_wide, nullptr, out.data(),
                           k.ws.data()),
              StatusIs(kInvalid));
  LowRankView no_u{nullptr, k.c.data(), k.d, k.r};
  EXPECT_THAT(
      ApplyLowRank(k.x.data(), k.rows, no_u, nullptr, out.data(), k.ws.data()),
      StatusIs(kInvalid));
  EXPECT_THAT(ApplyLowRank(nullptr, k.rows, k.Forward(), nullptr, out.data(),
                           k.ws.data()),
              StatusIs(kInvalid));
  EXPECT_THAT(ApplyLowRank(k.x.data(), k.rows, k.Forward(), nullptr, out.data(),
                           nullptr),
              StatusIs(kInvalid));
  EXPECT_THAT(
      ApplyDense(k.x.data(), k.rows, -3, k.x.data(), nullptr, out.data()),
      StatusIs(kInvalid));
  LowRankView other_d{k.u.data(), k.c.data(), k.d - 1, k.r};
  EXPECT_THAT(
      ReprojectResidual(out.data(), k.rows, k.Inverse(), other_d, k.ws.data()),
      StatusIs(kInvalid));
  // Zero rows with null buffers is a valid no-op.
  EXPECT_OK(ApplyLowRank(nullptr, 0, k.Forward(), nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace gift::kernels
