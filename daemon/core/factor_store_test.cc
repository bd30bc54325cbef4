#include "daemon/core/factor_store.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::gift::testing::StatusIs;
using ::testing::ElementsAre;

// d_in 4, r_cap 1, k_cap 2.
constexpr shm::LayerGeometry kGeometry{4, 1, 2};

// A rank-1 factor within factor_check.h's bounds; its Ω holds `omega`.
std::unique_ptr<shm::FactorData> Factor(int64_t version, float omega = 0.5f,
                                        int64_t window = 10) {
  auto f = std::make_unique<shm::FactorData>();
  f->version = version;
  f->kind = 0;
  f->r = 1;
  f->sigma2 = 0.5;
  f->beta = 0.1;
  f->window = window;
  f->u = {1, 0, 0, 0};
  f->c = {-0.5f};
  f->c_inv = {0.5f};
  f->lambda = {2};
  f->omega.assign(8, omega);
  return f;
}

TEST(FactorStoreTest, VersionsStartAtOneAndContinueAboveWhatOthersHold) {
  FactorStore f(kGeometry);
  EXPECT_EQ(f.newest(), nullptr);
  EXPECT_EQ(f.newest_version(), -1);
  EXPECT_EQ(f.factor_step(), -1);
  EXPECT_EQ(f.TakeVersion(), 1);
  EXPECT_EQ(f.TakeVersion(), 2);
  f.ContinueAbove(7);  // a re-attaching rank holds v7
  EXPECT_EQ(f.TakeVersion(), 8);
  f.ContinueAbove(3);  // never back
  EXPECT_EQ(f.next_version(), 9);
}

TEST(FactorStoreTest, InstallsOnlyNewerVersions) {
  FactorStore f(kGeometry);
  absl::StatusOr<bool> installed = f.Install(Factor(5), 0.25);
  ASSERT_OK(installed);
  EXPECT_TRUE(*installed);
  ASSERT_NE(f.newest(), nullptr);
  EXPECT_EQ(f.newest_version(), 5);
  EXPECT_EQ(f.factor_step(), 10);
  EXPECT_EQ(f.last_refresh_seconds(), 0.25);
  EXPECT_EQ(f.refreshes(), 1);
  // Whoever owns the layer later continues above every installed version.
  EXPECT_EQ(f.next_version(), 6);

  installed = f.Install(Factor(5, 0.1f, 20), 1.0);
  ASSERT_OK(installed);
  EXPECT_FALSE(*installed);  // the same version again
  installed = f.Install(Factor(4), 1.0);
  ASSERT_OK(installed);
  EXPECT_FALSE(*installed);
  EXPECT_EQ(f.newest_version(), 5);
  EXPECT_EQ(f.factor_step(), 10);
  EXPECT_EQ(f.refreshes(), 1);
  EXPECT_EQ(f.last_refresh_seconds(), 0.25);
}

TEST(FactorStoreTest, RefusesAFactorOutOfBoundsAndKeepsTheOldOne) {
  FactorStore f(kGeometry);
  ASSERT_OK(f.Install(Factor(1), 0.1).status());
  std::unique_ptr<shm::FactorData> bad = Factor(2);
  bad->sigma2 = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(f.Install(std::move(bad), 0.1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(f.newest_version(), 1);
  EXPECT_EQ(f.OmegaOf(2), nullptr);
  EXPECT_EQ(f.refreshes(), 1);
  EXPECT_EQ(f.next_version(), 2);
}

// Each installed factor's SubspaceKept against the one it replaced; a
// refused factor changes nothing.
TEST(FactorStoreTest, MeasuresHowMuchOfTheNewSubspaceTheOldBasisKeeps) {
  FactorStore f(kGeometry);
  ASSERT_OK(f.Install(Factor(1), 0).status());
  EXPECT_TRUE(std::isnan(f.subspace_kept()));  // nothing before it
  ASSERT_OK(f.Install(Factor(2), 0).status());
  EXPECT_DOUBLE_EQ(f.subspace_kept(), 1.0);  // the same basis
  std::unique_ptr<shm::FactorData> turned = Factor(3);
  turned->u = {0.6f, 0.8f, 0, 0};
  ASSERT_OK(f.Install(std::move(turned), 0).status());
  EXPECT_NEAR(f.subspace_kept(), 0.36, 1e-6);
  std::unique_ptr<shm::FactorData> bad = Factor(4);
  bad->sigma2 = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(f.Install(std::move(bad), 0).ok());
  EXPECT_NEAR(f.subspace_kept(), 0.36, 1e-6);
}

TEST(FactorStoreTest, KeepsTheBasisOfRecentVersions) {
  FactorStore f(kGeometry);
  for (int64_t v = 1; v <= static_cast<int64_t>(kOmegaVersionsKept) + 2; ++v) {
    ASSERT_OK(f.Install(Factor(v, 0.1f * static_cast<float>(v)), 0).status());
  }
  EXPECT_EQ(f.OmegaOf(1), nullptr);
  EXPECT_EQ(f.OmegaOf(2), nullptr);
  ASSERT_NE(f.OmegaOf(3), nullptr);
  EXPECT_THAT(*f.OmegaOf(3), ::testing::Each(0.3f));
  ASSERT_NE(f.OmegaOf(6), nullptr);
  EXPECT_EQ(f.OmegaOf(6)->size(), 8u);
  EXPECT_EQ(f.OmegaOf(-1), nullptr);
  EXPECT_EQ(f.refreshes(), 6);
}

}  // namespace
}  // namespace gift::daemon
