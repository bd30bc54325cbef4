#include "tests/multiprocess/allreduce_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "client/gift_transform.h"
#include "client/synthetic_testutil.h"

namespace gift::multiprocess {

using client::BucketLayer;
using client::EpochPlan;

float GradValue(int rank, int layer, int step, int64_t i) {
  const uint64_t seed =
      (uint64_t(rank) << 40) ^ (uint64_t(layer) << 20) ^ uint64_t(step);
  const float u = client::SyntheticValue(seed, i);
  const int octave =
      static_cast<int>((client::SyntheticValue(seed + 7, i) + 1.0f) * 6.0f) - 6;
  return std::ldexp(u, octave) * 0.01f;
}

float GapValue(int64_t i) { return 1000.0f + static_cast<float>(i % 97); }

void FillBucket(const EpochPlan& plan, int rank, int step, float* bucket) {
  for (int64_t i = 0; i < plan.bucket_elements(); ++i) bucket[i] = GapValue(i);
  for (size_t l = 0; l < plan.layers().size(); ++l) {
    const BucketLayer& s = plan.layers()[l];
    for (int64_t i = 0; i < s.size(); ++i) {
      bucket[s.offset + i] = GradValue(rank, static_cast<int>(l), step, i);
    }
  }
}

Fp8Bound BoundOf(kernels::Fp8Format f) {
  if (f == kernels::Fp8Format::kE4M3) {
    return {std::ldexp(1.0, -4), std::ldexp(1.0, -10), 448.0};
  }
  return {std::ldexp(1.0, -3), std::ldexp(1.0, -17), 57344.0};
}

double ElementBound(const Fp8Bound& b, const std::vector<double>& xs,
                    const std::vector<double>& amax) {
  const double w = static_cast<double>(xs.size());
  double worker = 0, acc = 0, s_owner = 0, mean = 0;
  for (size_t p = 0; p < xs.size(); ++p) {
    const double s = amax[p] / b.fmax;
    worker += b.rel * std::abs(xs[p]) + b.sub * s;
    acc += std::abs(xs[p]) * (1 + b.rel) + b.sub * s;
    s_owner += amax[p] * (1 + b.rel) / b.fmax;
    mean += xs[p] / w;
  }
  const double owner = b.rel * acc + b.sub * s_owner;
  const double fp32 = (w + 2) * std::ldexp(1.0, -24) * acc;
  return (worker + owner + fp32) / w + std::ldexp(1.0, -23) * std::abs(mean);
}

namespace {

// Every rank's values of one layer: xs[p][i].
std::vector<std::vector<float>> LayerInputs(const BucketLayer& s, int layer,
                                            int world_size, int step) {
  std::vector<std::vector<float>> xs(world_size, std::vector<float>(s.size()));
  for (int p = 0; p < world_size; ++p) {
    for (int64_t i = 0; i < s.size(); ++i) {
      xs[p][i] = GradValue(p, layer, step, i);
    }
  }
  return xs;
}

std::vector<double> Amaxes(const std::vector<std::vector<float>>& xs) {
  std::vector<double> a(xs.size(), 0.0);
  for (size_t p = 0; p < xs.size(); ++p) {
    for (float v : xs[p]) a[p] = std::max(a[p], double(std::abs(v)));
  }
  return a;
}

double SpectralNorm(const client::LayerFactor& f) {
  if (f.kind == client::GiftTransform::kLowRank) {
    double m = 1.0;
    for (float c : f.c_inv) m = std::max(m, 1.0 + c);
    return m;
  }
  const int64_t d = f.d_in;  // symmetric: power iteration
  std::vector<double> v(d, 1.0), u(d);
  double norm = 0;
  for (int it = 0; it < 200; ++it) {
    double n2 = 0;
    for (int64_t i = 0; i < d; ++i) {
      u[i] = 0;
      for (int64_t j = 0; j < d; ++j) u[i] += f.t_inv[i * d + j] * v[j];
      n2 += u[i] * u[i];
    }
    norm = std::sqrt(n2);
    for (int64_t i = 0; i < d; ++i) v[i] = u[i] / norm;
  }
  return norm * 1.01;
}

}  // namespace

std::string CheckEuclidLayer(const EpochPlan& plan, int layer, int world_size,
                             int step, const float* result,
                             int64_t* nonzero_err) {
  const BucketLayer& s = plan.layers()[layer];
  const std::vector<std::vector<float>> xs =
      LayerInputs(s, layer, world_size, step);
  const std::vector<double> amax = Amaxes(xs);
  const Fp8Bound b = BoundOf(s.format.fp8());
  std::vector<double> v(world_size);
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < s.size(); ++i) {
    double mean = 0;
    for (int p = 0; p < world_size; ++p) {
      v[p] = xs[p][i];
      mean += v[p];
    }
    mean /= world_size;
    const double err = std::abs(result[s.offset + i] - mean);
    *nonzero_err += err > 0;
    if (!(err <= ElementBound(b, v, amax))) {
      if (bad++ == 0) {
        first =
            absl::StrCat(" first at ", i, ": got ", result[s.offset + i],
                         " want ", mean, " bound ", ElementBound(b, v, amax));
      }
    }
  }
  if (bad == 0) return "";
  return absl::StrCat("layer ", s.name, ": ", bad, " elements out of bound",
                      first);
}

std::string CheckGiftLayer(const EpochPlan& plan, int layer,
                           const client::LayerFactor& f, int world_size,
                           int step, const float* result) {
  const BucketLayer& s = plan.layers()[layer];
  const int64_t rows = s.d_out(), d = s.d_in();
  std::vector<std::vector<float>> xs = LayerInputs(s, layer, world_size, step);
  std::vector<std::vector<float>> ws(world_size, std::vector<float>(s.size()));
  client::GiftTransformer tf;
  for (int p = 0; p < world_size; ++p) {
    if (!tf.Forward(f, xs[p].data(), rows, nullptr, ws[p].data()).ok()) {
      return "transform failed";
    }
  }
  const std::vector<double> amax = Amaxes(ws);
  const Fp8Bound b = BoundOf(s.format.fp8());
  const double tinv = SpectralNorm(f);
  std::vector<double> v(world_size);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double bound2 = 0, err2 = 0, scale = 0;
    for (int64_t j = 0; j < d; ++j) {
      const int64_t i = r * d + j;
      double mean = 0;
      for (int p = 0; p < world_size; ++p) {
        v[p] = ws[p][i];
        mean += double(xs[p][i]) / world_size;
        scale += std::abs(xs[p][i]) / world_size;
      }
      const double e = ElementBound(b, v, amax);
      bound2 += e * e;
      const double diff = result[s.offset + i] - mean;
      err2 += diff * diff;
    }
    const double bound = std::sqrt(bound2) * tinv + 1e-5 * scale * tinv;
    bad += !(std::sqrt(err2) <= bound);
  }
  if (bad == 0) return "";
  return absl::StrCat("GIFT layer ", s.name, ": ", bad, " rows out of bound");
}

std::string HashHex(const float* data, int64_t n) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(
                    client::Fnv1a64(data, n * sizeof(float))));
  return buf;
}

}  // namespace gift::multiprocess
