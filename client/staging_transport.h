// A host-memory view of a device-memory communicator, for the small control
// messages of the allreduce (plan and option fingerprints, the per-step
// version agreement; DESIGN §4) that are built on the host: every call
// copies its host buffers to a device scratch buffer on the given stream,
// runs the same call on the wrapped communicator on that stream, and copies
// the result back. Not for payload: it costs two copies and a host wait.
// The wrapped communicator counts the bytes (its bytes_sent); this one counts
// none. Compiled only when GIFT_HAVE_CUDA.
//
//   StagingTransport control(nccl.get(), stream);
//   RETURN_IF_ERROR(CheckPlanAcrossRanks(control, plan));
//
// Thread safety: as Transport; it also uses the wrapped communicator.
#ifndef GIFT_CLIENT_STAGING_TRANSPORT_H_
#define GIFT_CLIENT_STAGING_TRANSPORT_H_

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/transport.h"

struct CUstream_st;

namespace gift::client {

class StagingTransport : public Transport {
 public:
  // REQUIRES: inner has device memory and outlives this; stream is a
  // cudaStream_t of inner's device.
  StagingTransport(Transport* inner, void* stream);
  ~StagingTransport() override;

  absl::string_view backend_name() const override { return "staged"; }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  // Host memory has no streams: only nullptr is accepted.
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
  // Device scratch of at least `bytes`.
  absl::StatusOr<char*> Scratch(size_t bytes);
  absl::Status ToDevice(void* dst, const void* src, size_t bytes);
  // Copies back and waits for the stream.
  absl::Status ToHost(void* dst, const void* src, size_t bytes);

  Transport* const inner_;
  CUstream_st* const stream_;
  char* scratch_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_STAGING_TRANSPORT_H_
