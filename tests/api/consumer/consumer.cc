// Two ranks (threads) average a bucket through the installed C++ API:
// every rank gets the same bits, within FP8 error of the exact average.
// Exits 0 on success; prints what failed otherwise.
//
//   consumer STORE_DIR
#include <gift/gift.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kWorld = 2;
constexpr int64_t kRows = 32, kCols = 48, kBucket = kRows * kCols + kRows;

std::vector<float> Gradient(int rank) {
  std::vector<float> g(kBucket);
  for (int64_t i = 0; i < kBucket; ++i) {
    g[i] = std::sin(0.37f * static_cast<float>(i) + 1.7f * rank) *
           (1 + static_cast<float>(i % 5));
  }
  return g;
}

bool Check(const gift::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s STORE_DIR\n", argv[0]);
    return 2;
  }
  const std::string store = argv[1];
  std::vector<gift::LayerSpec> layers(2);
  layers[0].name = "w";
  layers[0].shape = {kRows, kCols};
  layers[1].name = "b";
  layers[1].shape = {kRows};
  layers[1].offset = kRows * kCols;
  gift::BucketPlan plan;
  if (!Check(gift::BucketPlan::Create(0, kBucket, layers, &plan), "plan")) {
    return 1;
  }

  std::vector<std::vector<float>> results(kWorld);
  std::vector<int> ok(kWorld, 0);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      gift::CommunicatorOptions o;
      o.rank = rank;
      o.world_size = kWorld;
      o.store_dir = store;
      o.hostname = "127.0.0.1";
      std::shared_ptr<gift::Communicator> comm;
      if (!Check(gift::Communicator::Create(o, &comm), "communicator")) return;
      std::unique_ptr<gift::QuantizedAllReduce> ar;
      if (!Check(gift::QuantizedAllReduce::Create(comm, plan, {}, &ar),
                 "allreduce")) {
        return;
      }
      std::vector<float> g = Gradient(rank);
      gift::StepStats stats;
      if (!Check(ar->Step(g.data(), g.size(), &stats), "step")) return;
      if (stats.layers.size() != 2 || stats.bytes_euclid == 0) {
        std::fprintf(stderr, "rank %d: unexpected stats\n", rank);
        return;
      }
      results[rank] = g;
      ok[rank] = 1;
    });
  }
  for (std::thread& t : threads) t.join();
  if (!ok[0] || !ok[1]) return 1;
  if (std::memcmp(results[0].data(), results[1].data(),
                  kBucket * sizeof(float)) != 0) {
    std::fprintf(stderr, "the ranks' results differ\n");
    return 1;
  }
  const std::vector<float> a = Gradient(0), b = Gradient(1);
  double err = 0, norm = 0;
  for (int64_t i = 0; i < kBucket; ++i) {
    const double want = (static_cast<double>(a[i]) + b[i]) / 2;
    err += (results[0][i] - want) * (results[0][i] - want);
    norm += want * want;
  }
  const double rel = std::sqrt(err / norm);
  if (!(rel > 1e-4 && rel < 0.06)) {
    std::fprintf(stderr, "RelL2 %g out of (1e-4, 0.06)\n", rel);
    return 1;
  }
  std::printf("consumer: OK, 2 ranks bit-identical, RelL2 %.4f\n", rel);
  return 0;
}
