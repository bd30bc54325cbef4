#include "tools/fidelity/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/status_matchers.h"
#include "common/testing.h"
#include "tools/npy.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A folder of this process's own: ctest runs the cases of this suite
    // as parallel processes, which would race on shared file names.
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    std::mt19937 rng(11);
    std::normal_distribution<float> n(0, 1);
    std::vector<float> w(8 * 40), x(100 * 40);
    for (float& v : w) v = n(rng);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = n(rng) * (1 + (i % 40 < 3) * 20);
    ASSERT_OK(tools::WriteNpy(Path("w.npy"), {8, 40}, w));
    ASSERT_OK(tools::WriteNpy(Path("x.npy"), {100, 40}, x));
  }
  std::string Path(const std::string& name) { return dir_ + "/cli_" + name; }
  int Run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return RunFidelityCli(args, out_, err_);
  }

  gift::testing::TempDir tmp_{"cli_test"};
  std::string dir_;
  std::ostringstream out_, err_;
};

TEST_F(CliTest, ParsesBothFlagForms) {
  absl::StatusOr<CliOptions> o =
      ParseCli({"--grad=w.npy", "--a", "a.npy", "--format=e5m2", "--json",
                "--methods", "euclid,diagA"});
  ASSERT_OK(o);
  EXPECT_EQ(o->paths.grad, "w.npy");
  EXPECT_EQ(o->paths.a, "a.npy");
  EXPECT_TRUE(o->format == kernels::WireFormat(kernels::Fp8Format::kE5M2));
  EXPECT_TRUE(o->json);
  EXPECT_EQ(o->methods, "euclid,diagA");
  EXPECT_THAT(ParseCli({"--grad", "w", "--json=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCli({"--grad="}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ParseCli({"--help"})->help);
}

TEST_F(CliTest, JsonReportHasEveryMethodInOrder) {
  ASSERT_EQ(Run({"--grad", Path("w.npy"), "--acts", Path("x.npy"), "--json",
                 "--methods", "lowrankA_8:1.0,euclid,nystromA_8:1.0"}),
            0)
      << err_.str();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(out_.str());
  EXPECT_EQ(j["format"], "e4m3");
  EXPECT_EQ(j["d_out"], 8);
  EXPECT_EQ(j["d_in"], 40);
  std::vector<std::string> names;
  for (auto& [k, v] : j["methods"].items()) {
    names.push_back(k);
    EXPECT_GT(v["rel_l2"].get<double>(), 0) << k;
    EXPECT_GT(v["cos"].get<double>(), 0.99) << k;
  }
  EXPECT_THAT(names, ::testing::ElementsAre("lowrankA_8:1.0", "euclid",
                                            "nystromA_8:1.0"));
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CliTest, TakesTheFourBitFormats) {
  absl::StatusOr<CliOptions> o = ParseCli({"--grad", "w", "--format=nvfp4"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->format == kernels::WireFormat(kernels::Fp4Format::kNvfp4));
  o = ParseCli({"--grad", "w", "--format", "mxfp4"});
  ASSERT_OK(o);
  EXPECT_TRUE(o->format == kernels::WireFormat(kernels::Fp4Format::kMxfp4));
  EXPECT_THAT(ParseCli({"--grad", "w", "--format", "fp4"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("e4m3, e5m2, nvfp4 or mxfp4")));
  ASSERT_EQ(Run({"--grad", Path("w.npy"), "--json", "--format", "mxfp4",
                 "--methods", "euclid"}),
            0)
      << err_.str();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(out_.str());
  EXPECT_EQ(j["format"], "mxfp4");
  EXPECT_GT(j["methods"]["euclid"]["rel_l2"].get<double>(), 0.01);
  ASSERT_EQ(Run({"--grad", Path("w.npy"), "--format", "nvfp4", "--methods",
                 "euclid"}),
            0);
  EXPECT_THAT(out_.str(), HasSubstr("4-bit nvfp4 one-step round trip"));
}

TEST_F(CliTest, ErrorsAreOneLineAndExitTwo) {
  EXPECT_EQ(Run({"--grad", Path("w.npy"), "--methods", "diagA"}), 2);
  EXPECT_THAT(err_.str(), StartsWith("gift-fidelity: error: "));
  EXPECT_THAT(err_.str(), HasSubstr("diagA"));
  const std::string err = err_.str();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(Run({"--grad", Path("x.npy"), "--a", Path("w.npy")}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("does not match d_in"));
  EXPECT_EQ(Run({}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--grad"));
}

TEST_F(CliTest, HelpGoesToStdout) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("usage: gift-fidelity"));
  EXPECT_THAT(out_.str(), HasSubstr("--grad-workers"));
}

}  // namespace
}  // namespace gift::fidelity
