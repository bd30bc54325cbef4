#include "tools/fidelity/inputs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/status_matchers.h"
#include "tools/fidelity/geometry.h"

namespace gift::fidelity {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(InputsTest, CheckPsdAcceptsRankDeficientMoments) {
  // 10 rows in 30 dimensions: A has rank 10 and 20 (rounding-)zero
  // eigenvalues, as a moment from few samples does.
  const RowMatrixf x = RowMatrixf::Random(10, 30);
  EXPECT_OK(CheckPsd(MomentFromActivations(x), "a.npy", "A"));
  EXPECT_OK(CheckPsd(Eigen::MatrixXd::Identity(4, 4), "a.npy", "A"));
}

TEST(InputsTest, CheckPsdRejectsNegativeAndAsymmetric) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Identity(5, 5);
  a(2, 2) = -1e-3;  // below -1e-5 · tr
  absl::Status s = CheckPsd(a, "a.npy", "A");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("a.npy: A is not symmetric"));
  a(2, 2) = -1e-6;  // within the tolerance: float rounding
  EXPECT_OK(CheckPsd(a, "a.npy", "A"));
  Eigen::MatrixXd b = Eigen::MatrixXd::Identity(5, 5);
  b(0, 1) = 0.1;
  EXPECT_THAT(std::string(CheckPsd(b, "g.npy", "G").message()),
              HasSubstr("max |S - S^T|"));
  EXPECT_THAT(CheckPsd(-Eigen::MatrixXd::Identity(3, 3), "a", "A"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(InputsTest, CheckFiniteNamesTheFirstBadIndex) {
  tools::NpyArray x;
  x.shape = {2, 3, 4};
  x.data.assign(24, 1.0f);
  EXPECT_OK(CheckFinite(x, "w.npy"));
  x.data[1 * 12 + 2 * 4 + 1] = std::numeric_limits<float>::infinity();
  x.data[23] = std::nanf("");
  absl::Status s = CheckFinite(x, "w.npy");
  EXPECT_EQ(std::string(s.message()),
            "w.npy: non-finite value inf at index [1, 2, 1]");
}

}  // namespace
}  // namespace gift::fidelity
