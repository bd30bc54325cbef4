// Probation on the client (DESIGN §2, §4): with accepted versions set
// (VersionedFactors::SetAccepted, from the daemon's plan), the GIFT path of
// AllReduceEngine uses only an accepted factor that every rank holds, while
// probes judge the newest one; ranks that see an acceptance at different
// steps agree on one version (or none) and apply bit-identical gradients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"

namespace gift::client {
namespace {

// g: the GIFT layer, 6 × 16.
EpochPlan Plan() {
  return *EpochPlan::Create(
      1, 96,
      {{.name = "g", .shape = {6, 16}, .offset = 0, .path = LayerPath::kGift}});
}

std::vector<float> Bucket(int rank, int step) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = SyntheticValue(rank + 1 + 7 * step, i);
  }
  return x;
}

// One step of every rank: the accepted version each rank has seen (-2: no
// gate), and what the step used.
struct Case {
  std::vector<int64_t> accepted;  // per rank
  int64_t path_version;           // expected on every rank (-1: Euclidean)
};

TEST(ProbationTest, TheGiftPathUsesOnlyAnAcceptedVersionEveryRankHolds) {
  const std::vector<Case> cases = {
      {{-2, -2}, 2},                   // no daemon: the newest agreed
      {{1, 1}, 1},                     // v2 on probation: the path keeps v1
      {{2, 1}, 1},                     // rank 0 saw v2 accepted first
      {{2, 2}, 2},                     // now every rank has
      {{kNoVersion, kNoVersion}, -1},  // off the GIFT path: Euclidean
      {{3, 3}, -1},                    // accepted but held nowhere
      {{2, kNoVersion}, -1},           // one rank has none: none anywhere
  };
  absl::Mutex mu;
  std::vector<std::vector<std::vector<float>>> out(
      2, std::vector<std::vector<float>>(cases.size()));
  RunThreadRanks(2, [&](Transport& comm) {
    AllReduceEngineOptions o;
    o.probe_interval = 1;
    auto ar = AllReduceEngine::Create(&comm, Plan(), o);
    ASSERT_OK(ar);
    VersionedFactors f;
    ASSERT_OK(f.Put("g", SyntheticLowRank(1, 16, 4, 5)));
    ASSERT_OK(f.Put("g", SyntheticLowRank(2, 16, 4, 6)));
    for (size_t c = 0; c < cases.size(); ++c) {
      const int64_t a = cases[c].accepted[comm.rank()];
      if (a != -2) {
        if (a == kNoVersion) f.SetAccepted("g", kNoVersion);
        if (a >= 0) f.SetAccepted("g", a);
      }
      std::vector<float> x = Bucket(comm.rank(), static_cast<int>(c));
      StepTelemetry t;
      ASSERT_OK((*ar)->Run(x.data(), f, &t));
      const LayerTelemetry& l = t.layers[0];
      EXPECT_EQ(l.factor_version, cases[c].path_version) << c;
      EXPECT_EQ(l.path, cases[c].path_version >= 0 ? LayerPath::kGift
                                                   : LayerPath::kEuclid)
          << c;
      // Probes judge the newest factor, whatever the path uses.
      EXPECT_TRUE(l.probed) << c;
      EXPECT_EQ(l.probe_version, 2) << c;
      absl::MutexLock lock(&mu);
      out[comm.rank()][c] = std::move(x);
    }
  });
  for (size_t c = 0; c < cases.size(); ++c) {
    ASSERT_EQ(out[0][c].size(), out[1][c].size());
    EXPECT_EQ(std::memcmp(out[0][c].data(), out[1][c].data(),
                          out[0][c].size() * sizeof(float)),
              0)
        << "step " << c << " differs across ranks";
  }
}

}  // namespace
}  // namespace gift::client
