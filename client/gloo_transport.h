// Transport on Gloo's TCP transport: the CPU backend (host memory).
//
// Ranks rendezvous through the Store (via GlooStoreAdapter) and connect a
// full mesh of TCP pairs. AllReduce, AllGatherV, Broadcast and Barrier are
// Gloo's own collectives (ring allreduce, ring allgatherv, binomial-tree
// broadcast, dissemination barrier); AllToAllV is pairwise send/recv on
// unbound buffers. Every wait is bounded by the communicator's timeout.
// Gloo reports errors by exception; they are caught in one place and turned
// into a Status. Create through CreateTransport (transport_factory.h).
//
// Thread safety: as Transport.
#ifndef GIFT_CLIENT_GLOO_TRANSPORT_H_
#define GIFT_CLIENT_GLOO_TRANSPORT_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/transport.h"
#include "client/transport_factory.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace gift::client {

class GlooTransport : public Transport {
 public:
  // Connects to all peers. REQUIRES: options validated by the factory.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(
      const TransportOptions& options);

  ~GlooTransport() override;

  absl::string_view backend_name() const override { return "gloo"; }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  absl::Status SetStream(void* stream) override;

  // Bytes rank `rank` sends in Gloo's ring allreduce of `total_bytes` with
  // elements of `element_size` bytes (the segmenting of gloo/allreduce.cc).
  static uint64_t RingAllReduceBytes(size_t total_bytes, size_t element_size,
                                     int world_size, int rank);
  // Bytes rank `rank` sends in Gloo's ring allgatherv.
  static uint64_t RingAllGatherVBytes(std::span<const size_t> sizes, int rank);
  // Bytes rank `rank` sends in Gloo's binomial-tree broadcast from `root`.
  static uint64_t TreeBroadcastBytes(size_t bytes, int world_size, int rank,
                                     int root);

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
  GlooTransport(int rank, int world_size, absl::Duration timeout,
                std::shared_ptr<gloo::Context> context);

  // Passes `status` through, prefixed with the rank. On failure it first
  // closes every connection, so that peers blocked on this rank fail at once
  // instead of waiting for their own timeout.
  absl::Status Checked(absl::Status status);

  std::shared_ptr<gloo::Context> context_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_GLOO_TRANSPORT_H_
