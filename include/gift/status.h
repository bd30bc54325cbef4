// gift::Status: the result of every fallible call of the C++ API.
//
// LevelDB style: functions return a Status and hand results back through
// an out-parameter, which is written only on success.
//
//   std::shared_ptr<gift::Communicator> comm;
//   gift::Status s = gift::Communicator::Create(options, &comm);
//   if (!s.ok()) {
//     std::cerr << s << "\n";  // e.g. "INVALID_ARGUMENT: world_size ..."
//     return 1;
//   }
//
// The codes are the canonical ones of gRPC and abseil, with the same
// numbers (and the same numbers as gift_status_t of the C ABI). What each
// call returns for which condition is documented beside the call:
// INVALID_ARGUMENT for bad arguments (detected before anything is sent),
// DEADLINE_EXCEEDED / UNAVAILABLE when a peer died or stalled,
// FAILED_PRECONDITION for a call that the object's state does not allow.
//
// Thread safety: a Status is a plain value.
#ifndef GIFT_STATUS_H_
#define GIFT_STATUS_H_

#include <iosfwd>
#include <string>
#include <utility>

#include "gift/export.h"

namespace gift {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for a value outside the enum).
GIFT_EXPORT const char* StatusCodeName(StatusCode code);

class [[nodiscard]] GIFT_EXPORT Status {
 public:
  // OK.
  Status() = default;
  // A `code` of kOk makes an OK status (the message is dropped).
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }
  // "OK", or "<CODE NAME>: <message>".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }
  friend bool operator!=(const Status& a, const Status& b) { return !(a == b); }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Writes status.ToString().
GIFT_EXPORT std::ostream& operator<<(std::ostream& os, const Status& status);

}  // namespace gift

#endif  // GIFT_STATUS_H_
