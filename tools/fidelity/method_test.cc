#include "tools/fidelity/method.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MethodTest, ParsesEveryForm) {
  struct Case {
    const char* name;
    MethodKind kind;
    int64_t block, rank;
    std::optional<double> beta;
  };
  const Case cases[] = {
      {"euclid", MethodKind::kEuclid, 0, 0, std::nullopt},
      {"euclid_block512", MethodKind::kEuclid, 512, 0, std::nullopt},
      {"diagA", MethodKind::kDiagA, 0, 0, std::nullopt},
      {"fullA_chol", MethodKind::kFullACholesky, 0, 0, std::nullopt},
      {"fullA_sym", MethodKind::kFullASymmetric, 0, 0, std::nullopt},
      {"fullA_sym:0.3", MethodKind::kFullASymmetric, 0, 0, 0.3},
      {"blockA_64", MethodKind::kBlockA, 0, 64, std::nullopt},
      {"lowrankA_32", MethodKind::kLowRankA, 0, 32, std::nullopt},
      {"lowrankA_32:1.0", MethodKind::kLowRankA, 0, 32, 1.0},
      {"lowrankA_8:2", MethodKind::kLowRankA, 0, 8, 2.0},
      {"nystromA_32:1.0", MethodKind::kNystromA, 0, 32, 1.0},
      {"outG_chol", MethodKind::kOutGCholesky, 0, 0, std::nullopt},
      {"kfac_chol", MethodKind::kKfacCholesky, 0, 0, std::nullopt},
  };
  for (const Case& c : cases) {
    absl::StatusOr<MethodSpec> m = ParseMethod(c.name);
    ASSERT_OK(m) << c.name;
    EXPECT_EQ(m->name, c.name);
    EXPECT_EQ(m->kind, c.kind) << c.name;
    EXPECT_EQ(m->block_size, c.block) << c.name;
    EXPECT_EQ(m->rank, c.rank) << c.name;
    EXPECT_EQ(m->beta, c.beta) << c.name;
  }
}

TEST(MethodTest, RejectsUnknownAndMalformedNames) {
  for (const char* bad :
       {"", "Euclid", "magic", "lowrankA_", "lowrankA_0", "lowrankA_032",
        "lowrankA_x", "lowrankA_32:", "lowrankA_32:-1", "lowrankA_32:0",
        "lowrankA_32:1e3", "lowrankA_32:1.2.3", "lowrankA_32:nan", "diagA:1.0",
        "euclid:1.0", "kfac_chol:0.3", "euclid_block0", "blockA_-4",
        "fullA_sym:"}) {
    absl::StatusOr<MethodSpec> m = ParseMethod(bad);
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("unknown method"))
        << bad;
  }
}

TEST(MethodTest, ListKeepsOrderAndRejectsDuplicates) {
  absl::StatusOr<std::vector<MethodSpec>> l =
      ParseMethodList("lowrankA_32:1.0,euclid,diagA");
  ASSERT_OK(l);
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0].name, "lowrankA_32:1.0");
  EXPECT_EQ((*l)[1].name, "euclid");
  EXPECT_THAT(ParseMethodList("euclid,euclid"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMethodList("euclid,,diagA"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MethodTest, DefaultsFollowInputs) {
  EXPECT_THAT(DefaultMethods(false, false, false),
              ElementsAre("euclid", "euclid_block512"));
  EXPECT_THAT(DefaultMethods(true, false, false),
              ElementsAre("euclid", "euclid_block512", "diagA", "fullA_chol",
                          "fullA_sym", "fullA_sym:0.3", "blockA_64",
                          "lowrankA_32", "lowrankA_32:1.0"));
  EXPECT_THAT(DefaultMethods(false, false, true),
              ElementsAre("euclid", "euclid_block512", "outG_chol"));
  const std::vector<std::string> all = DefaultMethods(true, true, true);
  ASSERT_EQ(all.size(), 13u);
  EXPECT_EQ(all[9], "nystromA_32");
  EXPECT_EQ(all[10], "nystromA_32:1.0");
  EXPECT_EQ(all.back(), "kfac_chol");
  EXPECT_THAT(DefaultWorkerMethods(true),
              ElementsAre("euclid", "lowrankA_32:1.0"));
  EXPECT_THAT(DefaultWorkerMethods(false), ElementsAre("euclid"));
}

TEST(MethodTest, CheckInputsNamesTheMissingFlag) {
  auto check = [](const char* name, bool a, bool x, bool g) {
    return CheckInputs(*ParseMethod(name), a, x, g);
  };
  EXPECT_OK(check("euclid", false, false, false));
  EXPECT_THAT(std::string(check("diagA", false, false, true).message()),
              HasSubstr("--a or --acts"));
  EXPECT_OK(check("lowrankA_32", true, false, false));
  EXPECT_THAT(std::string(check("nystromA_32", true, false, true).message()),
              HasSubstr("--acts"));
  EXPECT_OK(check("nystromA_32", true, true, false));
  EXPECT_THAT(std::string(check("outG_chol", true, true, false).message()),
              HasSubstr("--g"));
  EXPECT_THAT(check("kfac_chol", false, false, true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(check("kfac_chol", true, false, true));
}

}  // namespace
}  // namespace gift::fidelity
