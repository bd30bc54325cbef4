// gift::Status (include/gift/status.h) and the conversions of the facade
// (client/api/internal.h).
#include "gift/status.h"

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "client/api/internal.h"
#include "kernels/cpu_baseline.h"
#include "kernels/wire_format.h"

namespace gift {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) : code_(code) {
  if (code_ != StatusCode::kOk) message_ = std::move(message);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

namespace api {

Status FromAbsl(const absl::Status& status) {
  if (status.ok()) return Status();
  const int code = static_cast<int>(status.code());
  // abseil's codes are the canonical ones, numbered as StatusCode.
  const StatusCode c = code >= 1 && code <= 16 ? static_cast<StatusCode>(code)
                                               : StatusCode::kUnknown;
  return Status(c, std::string(status.message()));
}

Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

Status FailedPrecondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}

Status CheckCpu() {
  static const Status* const cpu =
      new Status(FromAbsl(kernels::CheckCpuBaseline()));
  return *cpu;
}

// The public format values are the kernels' wire-format codes (and the C
// API's gift_wire_format_t): stable.
static_assert(static_cast<int>(WireFormat::kE4M3) ==
              kernels::WireFormat::kE4M3Code);
static_assert(static_cast<int>(WireFormat::kE5M2) ==
              kernels::WireFormat::kE5M2Code);
static_assert(static_cast<int>(WireFormat::kNvfp4) ==
              kernels::WireFormat::kNvfp4Code);
static_assert(static_cast<int>(WireFormat::kMxfp4) ==
              kernels::WireFormat::kMxfp4Code);

client::BucketLayer ToInternal(const LayerSpec& layer) {
  client::BucketLayer l;
  l.name = layer.name;
  l.shape = layer.shape;
  l.offset = layer.offset;
  l.path = static_cast<client::LayerPath>(layer.path);
  l.transform = static_cast<client::GiftTransform>(layer.transform);
  // The public values are the wire-format codes (CheckPublicLayer).
  l.format = kernels::WireFormat::FromCode(static_cast<int>(layer.format));
  l.block_size = layer.block_size;
  return l;
}

LayerSpec FromInternal(const client::BucketLayer& layer) {
  LayerSpec l;
  l.name = layer.name;
  l.shape = layer.shape;
  l.offset = layer.offset;
  l.path = static_cast<LayerPath>(layer.path);
  l.transform = static_cast<GiftTransform>(layer.transform);
  l.format = static_cast<WireFormat>(layer.format.code());
  l.block_size = layer.block_size;
  return l;
}

}  // namespace api
}  // namespace gift
