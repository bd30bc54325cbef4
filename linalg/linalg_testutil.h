// Seeded symmetric test matrices for the linalg tests (CPU and GPU).
//
//   Eigen::MatrixXd a = RandomPsd(Decaying(64, 0.8), /*seed=*/3);
#ifndef GIFT_LINALG_LINALG_TESTUTIL_H_
#define GIFT_LINALG_LINALG_TESTUTIL_H_

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <random>

namespace gift::linalg::testing {

// Q diag(spectrum) Qᵀ with a random orthogonal Q from `seed`, symmetrised.
inline Eigen::MatrixXd RandomPsd(const Eigen::VectorXd& spectrum,
                                 uint32_t seed) {
  const Eigen::Index d = spectrum.size();
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist;
  Eigen::MatrixXd g(d, d);
  for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = dist(gen);
  Eigen::MatrixXd q = g.householderQr().householderQ();
  Eigen::MatrixXd a = q * spectrum.asDiagonal() * q.transpose();
  return 0.5 * (a + a.transpose());
}

// rate^i for i = 0..d-1.
inline Eigen::VectorXd Decaying(Eigen::Index d, double rate) {
  Eigen::VectorXd s(d);
  for (Eigen::Index i = 0; i < d; ++i) s(i) = std::pow(rate, i);
  return s;
}

}  // namespace gift::linalg::testing

#endif  // GIFT_LINALG_LINALG_TESTUTIL_H_
