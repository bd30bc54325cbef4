#include "client/transport_factory.h"

#include "absl/strings/str_cat.h"
#include "client/gloo_transport.h"
#if defined(GIFT_HAVE_CUDA)
#include "client/nccl_transport.h"
#endif

namespace gift::client {
namespace {

absl::Status Validate(const TransportOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " outside [0, ", options.world_size, ")"));
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("a rendezvous store is required");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be >= 0, got ", options.device));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(
    const TransportOptions& options) {
  if (options.backend != "gloo" && options.backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown communicator backend \"", options.backend,
                     "\" (expected gloo or nccl)"));
  }
  if (absl::Status s = Validate(options); !s.ok()) return s;
  if (options.backend == "gloo") return GlooTransport::Create(options);
#if defined(GIFT_HAVE_CUDA)
  return NcclTransport::Create(options);
#else
  return absl::FailedPreconditionError(
      "communicator backend nccl: libgift was built without CUDA "
      "(configure with -DGIFT_CUDA=ON)");
#endif
}

}  // namespace gift::client
