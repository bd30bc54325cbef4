// The one place an ncclResult_t becomes an absl::Status, and the check macro
// that returns it with file:line and the failed call. ncclInProgress is not
// an error: non-blocking communicators return it for work still being set up.
//
//   GIFT_NCCL_RETURN_IF_ERROR(ncclAllGather(send, recv, n, ncclUint8, comm,
//   s));
//
// Include only from NCCL backend sources (never from public headers).
#ifndef GIFT_COMMON_NCCL_CHECK_H_
#define GIFT_COMMON_NCCL_CHECK_H_

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::internal {

inline absl::Status NcclError(ncclResult_t r, const char* call,
                              const char* file, int line) {
  const std::string msg = absl::StrCat(file, ":", line, ": ", call,
                                       " failed: ", ncclGetErrorString(r));
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace gift::internal

#define GIFT_NCCL_RETURN_IF_ERROR(call)                                 \
  do {                                                                  \
    ncclResult_t gift_nccl_r_ = (call);                                 \
    if (gift_nccl_r_ != ncclSuccess && gift_nccl_r_ != ncclInProgress)  \
      return ::gift::internal::NcclError(gift_nccl_r_, #call, __FILE__, \
                                         __LINE__);                     \
  } while (0)

#endif  // GIFT_COMMON_NCCL_CHECK_H_
