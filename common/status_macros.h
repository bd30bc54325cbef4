// Status propagation helpers missing from Abseil 20220623.
//
// Errors cross module boundaries as absl::Status / absl::StatusOr<T>. These
// macros return early with the failed status:
//
//   absl::Status Load(const std::string& path) {
//     RETURN_IF_ERROR(CheckPath(path));
//     ASSIGN_OR_RETURN(Array a, ReadNpy(path));
//     ...
//   }
#ifndef GIFT_COMMON_STATUS_MACROS_H_
#define GIFT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GIFT_STATUS_CONCAT_INNER_(a, b) a##b
#define GIFT_STATUS_CONCAT_(a, b) GIFT_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status gift_status_ = (expr);    \
    if (!gift_status_.ok()) return gift_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  GIFT_ASSIGN_OR_RETURN_IMPL_(      \
      GIFT_STATUS_CONCAT_(gift_statusor_, __LINE__), lhs, expr)

#define GIFT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // GIFT_COMMON_STATUS_MACROS_H_
