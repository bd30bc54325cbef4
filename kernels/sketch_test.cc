#include "kernels/sketch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>
#include <vector>

#include "common/status_matchers.h"

namespace gift::kernels {
namespace {

using ::gift::testing::StatusIs;
using RowMatD =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

RowMatD ToDouble(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return Eigen::Map<const RowMatF>(v.data(), rows, cols).cast<double>();
}

double RelErr(const std::vector<float>& got, const RowMatD& want) {
  return (ToDouble(got, want.rows(), want.cols()) - want).norm() / want.norm();
}

// Naive double reference of Σ a_i² over all elements.
double NaiveTrace(const std::vector<float>& a) {
  double t = 0;
  for (float x : a) t += static_cast<double>(x) * x;
  return t;
}

TEST(SketchTest, WorkspaceSize) {
  EXPECT_EQ(SketchWorkspaceFloats(512, 48), 512 * 48);
  EXPECT_EQ(SketchWorkspaceFloats(-1, 48), 0);
}

TEST(SketchTest, AccumulatesTwoBatchesLikeNaiveReference) {
  const int64_t d = 80, k = 12, rows1 = 33, rows2 = 21;
  std::vector<float> a1 = RandomVector(rows1 * d, 1);
  std::vector<float> a2 = RandomVector(rows2 * d, 2);
  std::vector<float> omega = RandomVector(d * k, 3);
  std::vector<float> y = RandomVector(d * k, 4);  // starts non-zero
  const std::vector<float> y0 = y;
  double trace = 0.5;
  int64_t count = 7;
  std::vector<float> ws(SketchWorkspaceFloats(std::max(rows1, rows2), k),
                        -1.0f);
  SketchAccumulator acc{y.data(), &trace, &count};
  ASSERT_OK(
      SketchAccumulate(a1.data(), rows1, d, omega.data(), k, acc, ws.data()));
  ASSERT_OK(
      SketchAccumulate(a2.data(), rows2, d, omega.data(), k, acc, ws.data()));

  RowMatD m1 = ToDouble(a1, rows1, d), m2 = ToDouble(a2, rows2, d);
  RowMatD om = ToDouble(omega, d, k);
  RowMatD want = ToDouble(y0, d, k) + m1.transpose() * (m1 * om) +
                 m2.transpose() * (m2 * om);
  EXPECT_LT(RelErr(y, want), 1e-5);
  EXPECT_NEAR(trace, 0.5 + NaiveTrace(a1) + NaiveTrace(a2),
              1e-12 * (NaiveTrace(a1) + NaiveTrace(a2)));
  EXPECT_EQ(count, 7 + rows1 + rows2);
}

TEST(SketchTest, SecondMomentLikeNaiveReference) {
  const int64_t d = 40, rows = 25;
  std::vector<float> a = RandomVector(rows * d, 5);
  std::vector<float> y = RandomVector(d * d, 6);
  const std::vector<float> y0 = y;
  double trace = 0;
  int64_t count = 0;
  ASSERT_OK(
      SecondMomentAccumulate(a.data(), rows, d, {y.data(), &trace, &count}));
  RowMatD m = ToDouble(a, rows, d);
  RowMatD want = ToDouble(y0, d, d) + m.transpose() * m;
  EXPECT_LT(RelErr(y, want), 1e-5);
  // Both triangles are written: the increment is symmetric.
  RowMatD inc = ToDouble(y, d, d) - ToDouble(y0, d, d);
  EXPECT_LT((inc - inc.transpose()).norm(), 1e-5 * inc.norm());
  EXPECT_NEAR(trace, NaiveTrace(a), 1e-12 * NaiveTrace(a));
  EXPECT_EQ(count, rows);
}

TEST(SketchTest, ZeroRowsLeavesAccumulatorUnchanged) {
  const int64_t d = 8, k = 2;
  std::vector<float> omega = RandomVector(d * k, 7);
  std::vector<float> y = RandomVector(d * k, 8);
  const std::vector<float> y0 = y;
  double trace = 3;
  int64_t count = 4;
  ASSERT_OK(SketchAccumulate(nullptr, 0, d, omega.data(), k,
                             {y.data(), &trace, &count}, nullptr));
  EXPECT_EQ(y, y0);
  EXPECT_EQ(trace, 3);
  EXPECT_EQ(count, 4);
}

TEST(SketchTest, RejectsBadArguments) {
  const int64_t d = 8, k = 2, rows = 3;
  std::vector<float> a = RandomVector(rows * d, 9);
  std::vector<float> omega = RandomVector(d * k, 10);
  std::vector<float> y(d * d), ws(rows * k);
  double trace = 0;
  int64_t count = 0;
  SketchAccumulator acc{y.data(), &trace, &count};
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(
      SketchAccumulate(a.data(), -1, d, omega.data(), k, acc, ws.data()),
      StatusIs(kInvalid));
  EXPECT_THAT(
      SketchAccumulate(a.data(), rows, 0, omega.data(), k, acc, ws.data()),
      StatusIs(kInvalid));
  EXPECT_THAT(
      SketchAccumulate(a.data(), rows, d, omega.data(), 0, acc, ws.data()),
      StatusIs(kInvalid));
  EXPECT_THAT(SketchAccumulate(a.data(), rows, d, nullptr, k, acc, ws.data()),
              StatusIs(kInvalid));
  EXPECT_THAT(
      SketchAccumulate(a.data(), rows, d, omega.data(), k, acc, nullptr),
      StatusIs(kInvalid));
  EXPECT_THAT(SketchAccumulate(a.data(), rows, d, omega.data(), k,
                               {y.data(), nullptr, &count}, ws.data()),
              StatusIs(kInvalid));
  EXPECT_THAT(SecondMomentAccumulate(nullptr, rows, d, acc),
              StatusIs(kInvalid));
  EXPECT_THAT(
      SecondMomentAccumulate(a.data(), rows, d, {y.data(), &trace, nullptr}),
      StatusIs(kInvalid));
  EXPECT_EQ(count, 0);
  EXPECT_EQ(trace, 0);
}

}  // namespace
}  // namespace gift::kernels
