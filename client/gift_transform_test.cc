#include "client/gift_transform.h"

#include <gtest/gtest.h>

#include <cmath>

#include "client/synthetic_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

// Dense d × d matrix of a factor, forward or inverse, in double.
std::vector<double> Dense(const LayerFactor& f, bool inverse) {
  const int64_t d = f.d_in;
  std::vector<double> t(d * d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      if (f.kind == GiftTransform::kFull) {
        t[i * d + j] = (inverse ? f.t_inv : f.t)[i * d + j];
        continue;
      }
      double v = i == j ? 1.0 : 0.0;
      for (int64_t k = 0; k < f.r; ++k) {
        v += static_cast<double>(f.u[i * f.r + k]) *
             (inverse ? f.c_inv : f.c)[k] * f.u[j * f.r + k];
      }
      t[i * d + j] = v;
    }
  }
  return t;
}

std::vector<double> MatMul(const std::vector<double>& a,
                           const std::vector<double>& b, int64_t rows,
                           int64_t d) {
  std::vector<double> c(rows * d, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < d; ++k) {
      for (int64_t j = 0; j < d; ++j)
        c[i * d + j] += a[i * d + k] * b[k * d + j];
    }
  }
  return c;
}

void ExpectReprojects(const LayerFactor& old_f, const LayerFactor& new_f) {
  const int64_t rows = 5, d = old_f.d_in;
  std::vector<float> r(rows * d);
  std::vector<double> rd(rows * d);
  for (size_t i = 0; i < r.size(); ++i) rd[i] = r[i] = SyntheticValue(7, i);
  GiftTransformer tf;
  ASSERT_OK(tf.Reproject(old_f, new_f, r.data(), rows));
  const std::vector<double> want = MatMul(
      MatMul(rd, Dense(old_f, true), rows, d), Dense(new_f, false), rows, d);
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    max_err = std::max(max_err, std::abs(r[i] - want[i]));
    max_ref = std::max(max_ref, std::abs(want[i]));
  }
  EXPECT_GT(max_ref, 0.1);
  EXPECT_LT(max_err, 1e-5 * max_ref);
}

TEST(GiftTransformTest, ReprojectMovesTheResidualToTheNewFactor) {
  const LayerFactor a = SyntheticLowRank(1, 12, 4, 1);
  const LayerFactor b = SyntheticLowRank(2, 12, 6, 2);
  const LayerFactor full = SyntheticFull(3, 12, 3);
  ExpectReprojects(a, b);
  ExpectReprojects(a, full);
  ExpectReprojects(full, b);
  ExpectReprojects(full, SyntheticFull(4, 12, 4));
}

TEST(GiftTransformTest, InverseUndoesForwardPlusAdd) {
  for (const LayerFactor& f :
       {SyntheticLowRank(1, 16, 5, 9), SyntheticFull(1, 16, 9)}) {
    const int64_t rows = 3, n = rows * 16;
    std::vector<float> x(n), add(n, 0.0f), y(n), back(n);
    for (int64_t i = 0; i < n; ++i) x[i] = SyntheticValue(3, i);
    add[5] = 1.0f;
    GiftTransformer tf;
    ASSERT_OK(tf.Forward(f, x.data(), rows, add.data(), y.data()));
    y[5] -= 1.0f;
    ASSERT_OK(tf.Inverse(f, y.data(), rows, back.data()));
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[i], x[i], 1e-5) << i;
    EXPECT_NE(y[0], x[0]);  // the transform did something
  }
}

}  // namespace
}  // namespace gift::client
