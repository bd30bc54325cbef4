// Conversions between the row-major float32 arrays of the hot path and
// shared memory (d × k, C order) and the double Eigen matrices of the
// linear algebra.
//
//   Eigen::MatrixXd y = FromRowMajorFloat(sketch, d, k);
//   std::vector<float> u = ToRowMajorFloat(factor.u);
//
// Thread safety: pure functions.
#ifndef GIFT_LINALG_ROW_MAJOR_H_
#define GIFT_LINALG_ROW_MAJOR_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace gift::linalg {

using RowMatrixf =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// REQUIRES: v.size() >= rows · cols.
inline Eigen::MatrixXd FromRowMajorFloat(const std::vector<float>& v,
                                         int64_t rows, int64_t cols) {
  return Eigen::Map<const RowMatrixf>(v.data(), rows, cols).cast<double>();
}

inline std::vector<float> ToRowMajorFloat(const Eigen::MatrixXd& m) {
  std::vector<float> out(m.size());
  Eigen::Map<RowMatrixf>(out.data(), m.rows(), m.cols()) = m.cast<float>();
  return out;
}

}  // namespace gift::linalg

#endif  // GIFT_LINALG_ROW_MAJOR_H_
