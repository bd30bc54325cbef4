#include "kernels/cpu_baseline.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::kernels {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

bool NoFeatures(const char*) { return false; }
bool AllButAvx2(const char* f) { return std::strcmp(f, "avx2") != 0; }

TEST(CpuBaselineTest, ReportsTheLevelCMakeChose) {
  EXPECT_STREQ(CpuBaselineLevel(), GIFT_EXPECTED_LEVEL);
}

TEST(CpuBaselineTest, AnOldCpuMissesEveryFeatureOfTheLevel) {
  const std::string level = CpuBaselineLevel();
  const auto missing = MissingCpuFeatures(NoFeatures);
  if (level == "x86-64-v3") {
    EXPECT_THAT(missing,
                ElementsAre("popcnt", "sse3", "ssse3", "sse4.1", "sse4.2",
                            "avx", "avx2", "bmi", "bmi2", "f16c", "fma"));
  } else if (level.empty() || level == "x86-64") {
    EXPECT_THAT(missing, IsEmpty());  // the baseline runs anywhere
  } else {
    EXPECT_FALSE(missing.empty()) << level;
  }
}

TEST(CpuBaselineTest, NamesTheOneMissingFeature) {
  const std::string level = CpuBaselineLevel();
  if (level != "x86-64-v3" && level != "x86-64-v4") {
    GTEST_SKIP() << "built for '" << level << "', which needs no AVX2";
  }
  EXPECT_THAT(MissingCpuFeatures(AllButAvx2), ElementsAre("avx2"));
}

// The machine that runs the tests is the one the build is for (had it no
// AVX2, this binary would not have reached main).
TEST(CpuBaselineTest, ThisCpuRunsThisBuild) {
  EXPECT_TRUE(CheckCpuBaseline().ok()) << CheckCpuBaseline().message();
  EXPECT_THAT(MissingCpuFeatures(), IsEmpty());
}

}  // namespace
}  // namespace gift::kernels
