#include "client/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/nccl_check.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

using ::gift::internal::NcclError;

constexpr char kUniqueIdKey[] = "nccl_unique_id";
constexpr absl::Duration kPoll = absl::Microseconds(50);

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Polls the communicator's asynchronous state until it leaves ncclInProgress.
absl::Status PollComm(ncclComm_t comm, absl::Time deadline, const char* what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    GIFT_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return NcclError(state, what, __FILE__, __LINE__);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": NCCL still in progress at the deadline"));
    }
    absl::SleepFor(kPoll);
  }
}

// Fetches the unique id from rank 0 through the store.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(const TransportOptions& o) {
  ncclUniqueId id;
  if (o.rank == 0) {
    GIFT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(o.store->Set(
        kUniqueIdKey, absl::string_view(id.internal, sizeof(id.internal))));
    return id;
  }
  ASSIGN_OR_RETURN(std::string bytes, o.store->Get(kUniqueIdKey, o.timeout));
  if (bytes.size() != sizeof(id.internal)) {
    return absl::DataLossError(absl::StrCat("NCCL unique id in the store has ",
                                            bytes.size(), " bytes, expected ",
                                            sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

}  // namespace

NcclTransport::NcclTransport(int rank, int world_size, absl::Duration timeout,
                             int device, ncclComm* comm)
    : Transport(rank, world_size, timeout), device_(device), comm_(comm) {}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // Flush and leave cleanly when possible; abort when the peers are gone.
    const ncclResult_t f = ncclCommFinalize(comm_);
    const bool clean =
        (f == ncclSuccess || f == ncclInProgress) &&
        PollComm(comm_, absl::Now() + timeout(), "ncclCommFinalize").ok();
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(
    const TransportOptions& options) {
  const absl::Time deadline = absl::Now() + options.timeout;
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeUniqueId(options));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, options.world_size, id,
                                                options.rank, &config);
  absl::Status s =
      r == ncclSuccess || r == ncclInProgress
          ? PollComm(comm, deadline, "ncclCommInitRankConfig")
          : NcclError(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (!s.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::Status(s.code(),
                        absl::StrCat("rank ", options.rank, " of ",
                                     options.world_size, ": ", s.message()));
  }
  auto c = std::unique_ptr<NcclTransport>(new NcclTransport(
      options.rank, options.world_size, options.timeout, options.device, comm));
  GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&c->barrier_word_, sizeof(float)));
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemset(c->barrier_word_, 0, sizeof(float)));
  return std::unique_ptr<Transport>(std::move(c));
}

absl::Status NcclTransport::SetStream(void* stream) {
  stream_ = static_cast<cudaStream_t>(stream);
  return absl::OkStatus();
}

absl::Status NcclTransport::Abort(absl::Status why) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return absl::Status(why.code(),
                      absl::StrCat("rank ", rank(), ": ", why.message()));
}

absl::Status NcclTransport::Wait(absl::string_view what, absl::Time deadline) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess)
      return Abort(NcclError(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Abort(
          NcclError(state, std::string(what).c_str(), __FILE__, __LINE__));
    }
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess && state == ncclSuccess) return absl::OkStatus();
    if (q != cudaSuccess && q != cudaErrorNotReady) {
      return Abort(
          internal::CudaError(q, "cudaStreamQuery", __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(
          what, ": not complete after ", absl::FormatDuration(timeout()),
          "; a peer is dead or stalled")));
    }
    absl::SleepFor(kPoll);
  }
}

absl::Status NcclTransport::DoAllToAllV(const void* send,
                                        std::span<const size_t> send_sizes,
                                        std::span<const size_t> send_offsets,
                                        void* recv,
                                        std::span<const size_t> recv_sizes,
                                        std::span<const size_t> recv_offsets,
                                        uint64_t& sent) {
  const absl::Time deadline = absl::Now() + timeout();
  const int me = rank();
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (recv_sizes[me] > 0) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out + recv_offsets[me], in + send_offsets[me],
                        recv_sizes[me], cudaMemcpyDeviceToDevice, stream_));
  }
  // Every started group must be ended, even when an enqueue fails.
  GIFT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status enqueue;
  for (int p = 0; p < world_size() && enqueue.ok(); ++p) {
    if (p == me) continue;
    enqueue = [&]() -> absl::Status {
      if (send_sizes[p] > 0) {
        GIFT_NCCL_RETURN_IF_ERROR(ncclSend(in + send_offsets[p], send_sizes[p],
                                           ncclUint8, p, comm_, stream_));
        sent += send_sizes[p];
      }
      if (recv_sizes[p] > 0) {
        GIFT_NCCL_RETURN_IF_ERROR(ncclRecv(out + recv_offsets[p], recv_sizes[p],
                                           ncclUint8, p, comm_, stream_));
      }
      return absl::OkStatus();
    }();
  }
  GIFT_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  if (!enqueue.ok()) return Abort(enqueue);
  return Wait("all-to-all-v", deadline);
}

absl::Status NcclTransport::DoAllGatherV(const void* send, size_t send_bytes,
                                         void* recv,
                                         std::span<const size_t> recv_sizes,
                                         uint64_t& sent) {
  const absl::Time deadline = absl::Now() + timeout();
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const bool equal = std::all_of(recv_sizes.begin(), recv_sizes.end(),
                                 [&](size_t n) { return n == send_bytes; });
  sent += static_cast<uint64_t>(world_size() - 1) * send_bytes;
  if (equal) {
    GIFT_NCCL_RETURN_IF_ERROR(
        ncclAllGather(send, recv, send_bytes, ncclUint8, comm_, stream_));
    return Wait("ncclAllGather", deadline);
  }
  // Unequal pieces: every rank sends its piece to every other rank.
  std::vector<size_t> displ(recv_sizes.size(), 0);
  for (size_t p = 1; p < displ.size(); ++p) {
    displ[p] = displ[p - 1] + recv_sizes[p - 1];
  }
  auto* out = static_cast<char*>(recv);
  if (send_bytes > 0) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out + displ[rank()], send, send_bytes,
                        cudaMemcpyDeviceToDevice, stream_));
  }
  const std::vector<size_t> zeros(recv_sizes.size(), 0);
  std::vector<size_t> send_sizes(recv_sizes.size(), send_bytes);
  send_sizes[rank()] = 0;
  std::vector<size_t> recv_only(recv_sizes.begin(), recv_sizes.end());
  recv_only[rank()] = 0;
  uint64_t ignored = 0;  // counted above
  return DoAllToAllV(send, send_sizes, zeros, recv, recv_only, displ, ignored);
}

absl::Status NcclTransport::DoAllReduce(const void* send, void* recv,
                                        size_t count, DataType type,
                                        ReduceOp op, uint64_t& sent) {
  const absl::Time deadline = absl::Now() + timeout();
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const uint64_t bytes = count * SizeOf(type);
  const uint64_t w = static_cast<uint64_t>(world_size());
  sent += 2 * (w - 1) * bytes / w;
  GIFT_NCCL_RETURN_IF_ERROR(ncclAllReduce(send, recv, count, NcclType(type),
                                          NcclOp(op), comm_, stream_));
  return Wait("ncclAllReduce", deadline);
}

absl::Status NcclTransport::DoBroadcast(void* data, size_t bytes, int root,
                                        uint64_t& sent) {
  const absl::Time deadline = absl::Now() + timeout();
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // Ring model: every rank forwards the buffer except the ring's last rank.
  const int last = (root + world_size() - 1) % world_size();
  if (world_size() > 1 && rank() != last) sent += bytes;
  GIFT_NCCL_RETURN_IF_ERROR(
      ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
  return Wait("ncclBroadcast", deadline);
}

absl::Status NcclTransport::DoBarrier(uint64_t& sent) {
  const absl::Time deadline = absl::Now() + timeout();
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const uint64_t w = static_cast<uint64_t>(world_size());
  sent += 2 * (w - 1) * sizeof(float) / w;
  GIFT_NCCL_RETURN_IF_ERROR(ncclAllReduce(
      barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_));
  return Wait("barrier", deadline);
}

}  // namespace gift::client
