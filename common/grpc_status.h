// The one place that converts between absl::Status and grpc::Status (their
// codes align one for one). Only gRPC adapters include this header.
#ifndef GIFT_COMMON_GRPC_STATUS_H_
#define GIFT_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace gift {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// `what` (e.g. "Register") prefixes the message, so a caller sees which
// remote call failed.
inline absl::Status FromGrpcStatus(const grpc::Status& s,
                                   const std::string& what = "") {
  if (s.ok()) return absl::OkStatus();
  std::string msg =
      what.empty() ? s.error_message() : what + ": " + s.error_message();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), msg);
}

}  // namespace gift

#endif  // GIFT_COMMON_GRPC_STATUS_H_
