// Test helper: deterministic synthetic data for the allreduce tests —
// pseudo-random values from a counter hash (identical in every process
// without communication) and synthetic GIFT factors with exact inverses.
//
//   float g = SyntheticValue(seed, i);            // in [-1, 1)
//   float z = SyntheticGaussian(seed, i);         // standard normal
//   LayerFactor f = SyntheticLowRank(/*version=*/1, d_in, r, seed);
//
// Thread safety: pure functions.
#ifndef GIFT_CLIENT_SYNTHETIC_TESTUTIL_H_
#define GIFT_CLIENT_SYNTHETIC_TESTUTIL_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "client/versioned_factors.h"

namespace gift::client {

inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), 24 random bits.
inline float SyntheticValue(uint64_t seed, uint64_t i) {
  const uint64_t h = Mix64(Mix64(seed) ^ i);
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
         static_cast<float>(1 << 23);
}

// Standard normal (Box-Muller over two counter hashes), deterministic.
inline float SyntheticGaussian(uint64_t seed, uint64_t i) {
  const uint64_t a = Mix64(Mix64(seed) ^ (2 * i)),
                 b = Mix64(Mix64(seed) ^ (2 * i + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740993.0;
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                            std::cos(6.283185307179586 * u2));
}

// d × r matrix with orthonormal columns (Gram-Schmidt in double), row-major.
inline std::vector<double> SyntheticOrthonormal(int64_t d, int64_t r,
                                                uint64_t seed) {
  std::vector<double> q(d * r);
  for (int64_t j = 0; j < r; ++j) {
    std::vector<double> v(d);
    for (int64_t i = 0; i < d; ++i) v[i] = SyntheticValue(seed, j * d + i);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += v[i] * q[i * r + k];
        for (int64_t i = 0; i < d; ++i) v[i] -= dot * q[i * r + k];
      }
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < d; ++i) q[i * r + j] = v[i] / norm;
  }
  return q;
}

// T = I + U diag(c) Uᵀ with c in [-0.9, -0.1] (shrinks r directions);
// c_inv = 1 / (1 + c) − 1, so T⁻¹ is exact up to float rounding.
inline LayerFactor SyntheticLowRank(int64_t version, int64_t d, int64_t r,
                                    uint64_t seed) {
  LayerFactor f;
  f.version = version;
  f.kind = GiftTransform::kLowRank;
  f.d_in = d;
  f.r = r;
  const std::vector<double> u = SyntheticOrthonormal(d, r, seed);
  f.u.assign(u.begin(), u.end());
  for (int64_t k = 0; k < r; ++k) {
    const double c = -0.1 - 0.8 * k / std::max<int64_t>(1, r - 1);
    f.c.push_back(static_cast<float>(c));
    f.c_inv.push_back(static_cast<float>(1.0 / (1.0 + c) - 1.0));
  }
  return f;
}

// Dense T = Q diag(e) Qᵀ, e in [0.3, 1], T⁻¹ = Q diag(1/e) Qᵀ.
inline LayerFactor SyntheticFull(int64_t version, int64_t d, uint64_t seed) {
  LayerFactor f;
  f.version = version;
  f.kind = GiftTransform::kFull;
  f.d_in = d;
  const std::vector<double> q = SyntheticOrthonormal(d, d, seed);
  f.t.resize(d * d);
  f.t_inv.resize(d * d);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      double t = 0, ti = 0;
      for (int64_t k = 0; k < d; ++k) {
        const double e = 0.3 + 0.7 * k / std::max<int64_t>(1, d - 1);
        t += q[i * d + k] * e * q[j * d + k];
        ti += q[i * d + k] / e * q[j * d + k];
      }
      f.t[i * d + j] = static_cast<float>(t);
      f.t_inv[i * d + j] = static_cast<float>(ti);
    }
  }
  return f;
}

}  // namespace gift::client

#endif  // GIFT_CLIENT_SYNTHETIC_TESTUTIL_H_
