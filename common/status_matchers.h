// gtest matchers for absl::Status and absl::StatusOr<T>.
//
//   EXPECT_THAT(DoIt(), IsOk());
//   EXPECT_THAT(Parse("x"), StatusIs(absl::StatusCode::kInvalidArgument));
//   ASSERT_OK(DoIt());
#ifndef GIFT_COMMON_STATUS_MATCHERS_H_
#define GIFT_COMMON_STATUS_MATCHERS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::gift::testing::GetStatus(arg);
  if (!s.ok()) *result_listener << "status: " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = ::gift::testing::GetStatus(arg);
  *result_listener << "status: " << s;
  return s.code() == code;
}

// StatusIs(code, HasSubstr("...")): the code and a matcher on the message.
MATCHER_P2(StatusIs, code, message,
           "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = ::gift::testing::GetStatus(arg);
  *result_listener << "status: " << s;
  return s.code() == code &&
         ::testing::Matches(message)(std::string(s.message()));
}

}  // namespace gift::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::gift::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::gift::testing::IsOk())

#endif  // GIFT_COMMON_STATUS_MATCHERS_H_
