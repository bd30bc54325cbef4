#include "client/transport.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

absl::Status CheckPerRank(std::span<const size_t> v, int world_size,
                          absl::string_view name) {
  if (v.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has ", v.size(), " entries; world size is ", world_size));
  }
  return absl::OkStatus();
}

// Checks that the byte ranges [offsets[p], +sizes[p]) of one buffer exist
// and, when `disjoint`, that the non-empty ones do not overlap.
absl::Status CheckRanges(const void* base, std::span<const size_t> sizes,
                         std::span<const size_t> offsets, bool disjoint,
                         absl::string_view name) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t p = 0; p < sizes.size(); ++p) {
    if (sizes[p] == 0) continue;
    if (base == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " is null but its size for rank ", p, " is ", sizes[p]));
    }
    if (offsets[p] + sizes[p] < offsets[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " range of rank ", p, " overflows"));
    }
    ranges.emplace_back(offsets[p], offsets[p] + sizes[p]);
  }
  if (!disjoint) return absl::OkStatus();
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ranges overlap at byte ", ranges[i].first));
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t SizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt64:
      return 8;
  }
  return 0;
}

absl::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

absl::Duration Transport::timeout() const {
  absl::MutexLock lock(&mu_);
  return timeout_;
}

absl::Status Transport::SetTimeout(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
  absl::MutexLock lock(&mu_);
  timeout_ = timeout;
  return absl::OkStatus();
}

BytesSent Transport::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

template <typename Call>
absl::Status Transport::Run(absl::string_view what,
                            uint64_t BytesSent::*counter, Call call) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(backend_name(), " ", what, " on rank ", rank_,
                       ": communicator is broken by an earlier failure: ",
                       broken_.ToString()));
    }
  }
  uint64_t sent = 0;
  absl::Status status = call(sent);
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    broken_ = status;
    return status;
  }
  bytes_sent_.*counter += sent;
  return absl::OkStatus();
}

absl::Status Transport::AllToAllV(const void* send,
                                  std::span<const size_t> send_sizes,
                                  std::span<const size_t> send_offsets,
                                  void* recv,
                                  std::span<const size_t> recv_sizes,
                                  std::span<const size_t> recv_offsets) {
  RETURN_IF_ERROR(CheckPerRank(send_sizes, world_size_, "send_sizes"));
  RETURN_IF_ERROR(CheckPerRank(send_offsets, world_size_, "send_offsets"));
  RETURN_IF_ERROR(CheckPerRank(recv_sizes, world_size_, "recv_sizes"));
  RETURN_IF_ERROR(CheckPerRank(recv_offsets, world_size_, "recv_offsets"));
  if (send_sizes[rank_] != recv_sizes[rank_]) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllToAllV: this rank sends itself ", send_sizes[rank_],
                     " bytes but expects to receive ", recv_sizes[rank_]));
  }
  RETURN_IF_ERROR(CheckRanges(send, send_sizes, send_offsets, false, "send"));
  RETURN_IF_ERROR(CheckRanges(recv, recv_sizes, recv_offsets, true, "recv"));
  const bool empty = std::all_of(send_sizes.begin(), send_sizes.end(),
                                 [](size_t n) { return n == 0; }) &&
                     std::all_of(recv_sizes.begin(), recv_sizes.end(),
                                 [](size_t n) { return n == 0; });
  return Run("AllToAllV", &BytesSent::all_to_all, [&](uint64_t& sent) {
    if (empty) return absl::OkStatus();
    return DoAllToAllV(send, send_sizes, send_offsets, recv, recv_sizes,
                       recv_offsets, sent);
  });
}

absl::Status Transport::AllGatherV(const void* send, size_t send_bytes,
                                   void* recv,
                                   std::span<const size_t> recv_sizes) {
  RETURN_IF_ERROR(CheckPerRank(recv_sizes, world_size_, "recv_sizes"));
  if (recv_sizes[rank_] != send_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGatherV: send_bytes is ", send_bytes,
                     " but recv_sizes[rank] is ", recv_sizes[rank_]));
  }
  size_t total = 0;
  for (size_t n : recv_sizes) total += n;
  if ((send_bytes > 0 && send == nullptr) || (total > 0 && recv == nullptr)) {
    return absl::InvalidArgumentError("AllGatherV: null buffer");
  }
  return Run("AllGatherV", &BytesSent::all_gather, [&](uint64_t& sent) {
    if (total == 0) return absl::OkStatus();
    return DoAllGatherV(send, send_bytes, recv, recv_sizes, sent);
  });
}

absl::Status Transport::AllReduce(const void* send, void* recv, size_t count,
                                  DataType type, ReduceOp op) {
  if (type == DataType::kBFloat16 && op != ReduceOp::kSum) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduce: bfloat16 supports sum only, not ", ReduceOpName(op)));
  }
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    return absl::InvalidArgumentError("AllReduce: null buffer");
  }
  return Run("AllReduce", &BytesSent::all_reduce, [&](uint64_t& sent) {
    if (count == 0) return absl::OkStatus();
    return DoAllReduce(send, recv, count, type, op, sent);
  });
}

absl::Status Transport::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Broadcast: root ", root, " outside [0, ", world_size_, ")"));
  }
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError("Broadcast: null buffer");
  }
  return Run("Broadcast", &BytesSent::broadcast, [&](uint64_t& sent) {
    if (bytes == 0) return absl::OkStatus();
    return DoBroadcast(data, bytes, root, sent);
  });
}

absl::Status Transport::Barrier() {
  return Run("Barrier", &BytesSent::barrier,
             [&](uint64_t& sent) { return DoBarrier(sent); });
}

}  // namespace gift::client
