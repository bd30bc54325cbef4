#include "tests/multiprocess/allreduce_drift.h"

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/allreduce_engine.h"
#include "linalg/eigen_pairs.h"
#include "tests/multiprocess/allreduce_check.h"
#include "tools/npy.h"

namespace gift::multiprocess {
namespace {

using client::EpochPlan;
using client::LayerPath;

constexpr int kSteps = 50;
constexpr int64_t kRows = 64, kCols = 128, kLayer = kRows * kCols;
const char* const kLayers[] = {"blocks.0.mlp.fc2", "blocks.1.mlp.fc2"};

struct RunData {
  tools::NpyArray grad[2];  // [10, 4, 64, 128]
  client::LayerFactor factor[2];
};

absl::StatusOr<client::LayerFactor> FactorFromA(const tools::NpyArray& a) {
  Eigen::MatrixXd m(kCols, kCols);
  for (int64_t i = 0; i < kCols; ++i) {
    for (int64_t j = 0; j < kCols; ++j) m(i, j) = a.data[i * kCols + j];
  }
  absl::StatusOr<linalg::EigenPairs> e = linalg::TopEigenpairs(m, 32);
  if (!e.ok()) return e.status();
  const linalg::LowRankFactor lr = linalg::MakeLowRankFactor(
      *e, m.trace(), kCols, linalg::FactorDamping::Clipped(1.0));
  client::LayerFactor f;
  f.version = 1;
  f.d_in = kCols;
  f.r = 32;
  for (int64_t i = 0; i < kCols; ++i) {
    for (int k = 0; k < 32; ++k) f.u.push_back(lr.u(i, k));
  }
  for (int k = 0; k < 32; ++k) {
    f.c.push_back(lr.c(k));
    f.c_inv.push_back(lr.c_inv(k));
  }
  return f;
}

absl::StatusOr<RunData> Load() {
  RunData d;
  for (int l = 0; l < 2; ++l) {
    const std::string base =
        absl::StrCat(GIFT_TEST_DATA_DIR, "/run/", kLayers[l]);
    absl::StatusOr<tools::NpyArray> g = tools::ReadNpy(base + ".grad.npy");
    absl::StatusOr<tools::NpyArray> a = tools::ReadNpy(base + ".A.npy");
    if (!g.ok()) return g.status();
    if (!a.ok()) return a.status();
    if (g->shape != std::vector<int64_t>{10, 4, kRows, kCols}) {
      return absl::InvalidArgumentError("unexpected run shape");
    }
    d.grad[l] = std::move(*g);
    absl::StatusOr<client::LayerFactor> f = FactorFromA(*a);
    if (!f.ok()) return f.status();
    d.factor[l] = std::move(*f);
  }
  return d;
}

const float* Slice(const RunData& d, int layer, int step, int worker) {
  return d.grad[layer].data.data() + ((step % 10) * 4 + worker) * kLayer;
}

// Runs 50 steps; returns the per-layer drift, appends the final sums' hash.
absl::StatusOr<std::vector<double>> Drift(client::Transport& comm,
                                          const RunData& d, LayerPath path,
                                          bool feedback, std::string* hash) {
  std::vector<client::BucketLayer> layers;
  for (int l = 0; l < 2; ++l) {
    layers.push_back({.name = kLayers[l],
                      .shape = {kRows, kCols},
                      .offset = l * kLayer,
                      .path = path});
  }
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(1, 2 * kLayer, layers);
  if (!plan.ok()) return plan.status();
  client::AllReduceEngineOptions o;
  o.error_feedback = feedback;
  auto ar = client::AllReduceEngine::Create(&comm, *plan, o);
  if (!ar.ok()) return ar.status();
  client::VersionedFactors factors;
  for (int l = 0; l < 2; ++l) {
    if (absl::Status s = factors.Put(kLayers[l], d.factor[l]); !s.ok())
      return s;
  }
  std::vector<float> bucket(2 * kLayer), sum_f(2 * kLayer, 0.0f);
  std::vector<double> sum_out(2 * kLayer, 0.0), sum_true(2 * kLayer, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    for (int l = 0; l < 2; ++l) {
      const float* mine = Slice(d, l, t, comm.rank());
      std::copy(mine, mine + kLayer, bucket.begin() + l * kLayer);
      for (int64_t i = 0; i < kLayer; ++i) {
        double mean = 0;
        for (int p = 0; p < 4; ++p) mean += Slice(d, l, t, p)[i];
        sum_true[l * kLayer + i] += mean / 4;
      }
    }
    if (absl::Status s = (*ar)->Run(bucket.data(), factors, nullptr); !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < bucket.size(); ++i) {
      sum_out[i] += bucket[i];
      sum_f[i] += bucket[i];
    }
  }
  std::vector<double> drift;
  for (int l = 0; l < 2; ++l) {
    double err = 0, ref = 0;
    for (int64_t i = l * kLayer; i < (l + 1) * kLayer; ++i) {
      err += (sum_out[i] - sum_true[i]) * (sum_out[i] - sum_true[i]);
      ref += sum_true[i] * sum_true[i];
    }
    drift.push_back(std::sqrt(err / ref));
  }
  absl::StrAppend(hash, HashHex(sum_f.data(), sum_f.size()), ",");
  return drift;
}

}  // namespace

int RunDrift(client::Transport& comm, const RankEnv& env) {
  absl::StatusOr<RunData> d = Load();
  if (!d.ok() || comm.world_size() != 4) {
    std::cerr << "drift setup: " << d.status() << std::endl;
    return 2;
  }
  std::string hash, report;
  struct Config {
    const char* name;
    LayerPath path;
    bool feedback;
  };
  for (const Config& c : {Config{"drift_ef", LayerPath::kGift, true},
                          Config{"drift_noef", LayerPath::kGift, false},
                          Config{"drift_euclid", LayerPath::kEuclid, true}}) {
    absl::StatusOr<std::vector<double>> drift =
        Drift(comm, *d, c.path, c.feedback, &hash);
    if (!drift.ok()) {
      std::cerr << c.name << ": " << drift.status() << std::endl;
      return 1;
    }
    absl::StrAppend(&report, c.name, "=", (*drift)[0], ",", (*drift)[1], " ");
  }
  (void)WriteRankReport(env, absl::StrCat(report, "hash=", hash));
  return 0;
}

}  // namespace gift::multiprocess
