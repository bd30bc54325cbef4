// Transport on NCCL: the GPU backend (device memory, caller's stream).
//
// Rank 0 creates the NCCL unique id and publishes it through the Store; every
// rank then joins a non-blocking NCCL communicator whose initialisation is
// polled against the timeout (ncclCommAbort when it runs out). AllToAllV and
// unequal AllGatherV are grouped ncclSend/ncclRecv, equal AllGatherV is
// ncclAllGather, AllReduce is ncclAllReduce (float32, bfloat16, int64),
// Broadcast ncclBroadcast, Barrier a one-element allreduce. Each call enqueues
// on the stream set by SetStream and returns once the stream has drained,
// polling cudaStreamQuery and ncclCommGetAsyncError until the timeout; on a
// timeout the NCCL communicator is aborted (so kernels waiting on a dead peer
// are released) and the call returns DEADLINE_EXCEEDED.
// Compiled only when GIFT_HAVE_CUDA; create through CreateTransport.
//
// Thread safety: as Transport.
#ifndef GIFT_CLIENT_NCCL_TRANSPORT_H_
#define GIFT_CLIENT_NCCL_TRANSPORT_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/transport.h"
#include "client/transport_factory.h"

// The opaque handle types behind ncclComm_t and cudaStream_t, so that this
// header needs neither nccl.h nor the CUDA headers.
struct ncclComm;
struct CUstream_st;

namespace gift::client {

class NcclTransport : public Transport {
 public:
  // REQUIRES: options validated by the factory.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(
      const TransportOptions& options);

  ~NcclTransport() override;

  absl::string_view backend_name() const override { return "nccl"; }
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  absl::Status SetStream(void* stream) override;

 protected:
  absl::Status DoAllToAllV(const void* send, std::span<const size_t> send_sizes,
                           std::span<const size_t> send_offsets, void* recv,
                           std::span<const size_t> recv_sizes,
                           std::span<const size_t> recv_offsets,
                           uint64_t& sent) override;
  absl::Status DoAllGatherV(const void* send, size_t send_bytes, void* recv,
                            std::span<const size_t> recv_sizes,
                            uint64_t& sent) override;
  absl::Status DoAllReduce(const void* send, void* recv, size_t count,
                           DataType type, ReduceOp op, uint64_t& sent) override;
  absl::Status DoBroadcast(void* data, size_t bytes, int root,
                           uint64_t& sent) override;
  absl::Status DoBarrier(uint64_t& sent) override;

 private:
  NcclTransport(int rank, int world_size, absl::Duration timeout, int device,
                ncclComm* comm);

  // Polls until the enqueued work has finished on the stream and NCCL reports
  // no pending or failed operation; aborts the communicator on a timeout or
  // an asynchronous NCCL error.
  absl::Status Wait(absl::string_view what, absl::Time deadline);
  absl::Status Abort(absl::Status why);

  const int device_;
  ncclComm* comm_;  // null once aborted
  CUstream_st* stream_ = nullptr;
  void* barrier_word_ = nullptr;  // one device float for Barrier
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_NCCL_TRANSPORT_H_
