// Transport: collective communication among the ranks of one job, over
// Gloo or NCCL (the public gift::Communicator wraps one).
//
// The quantized allreduce (DESIGN §3) is written once against this
// interface: an all-to-all with per-peer sizes for the reduce-scatter phase,
// an all-gather with per-rank sizes for the gather phase, and plain
// allreduce / broadcast / barrier for the baselines and the agreement vector
// (DESIGN §4). Backends: Gloo (CPU, host memory) and NCCL (GPU, device
// memory), chosen in one place, CreateTransport (transport_factory.h).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Transport> comm,
//                    CreateTransport(options));
//   std::vector<int64_t> ready = {epoch, version};
//   RETURN_IF_ERROR(comm->AllReduce(ready.data(), ready.data(), ready.size(),
//                                   DataType::kInt64, ReduceOp::kMin));
//
// Memory: every pointer is host memory for the Gloo backend and device
// memory of the communicator's GPU for the NCCL backend (memory_kind()).
// NCCL calls are enqueued on the stream given to SetStream (default: the
// legacy default stream) and the call returns once that stream has drained,
// so the results are ready when a call returns OK on either backend.
//
// Every rank must make the same calls in the same order with matching sizes.
// Each call returns within about timeout() when a peer dies or stalls, with
// DEADLINE_EXCEEDED (nothing arrived in time) or UNAVAILABLE (a connection
// broke); it never hangs. After such a failure the communicator is broken:
// later calls fail at once with FAILED_PRECONDITION, and the job has to build
// a new communicator. Argument errors (INVALID_ARGUMENT) are found before
// anything is sent and do not break it.
//
// Thread safety: collective calls must not run concurrently on one
// communicator (as with NCCL communicators); the accessors and BytesSent()
// may be called from any thread at any time.
#ifndef GIFT_CLIENT_TRANSPORT_H_
#define GIFT_CLIENT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gift::client {

enum class DataType { kFloat32, kBFloat16, kInt64 };
enum class ReduceOp { kSum, kMin, kMax };
enum class MemoryKind { kHost, kDevice };

size_t SizeOf(DataType type);
absl::string_view DataTypeName(DataType type);
absl::string_view ReduceOpName(ReduceOp op);

// Payload bytes this rank has put on the wire, per call kind, since the
// communicator was created. Bytes a rank "sends" to itself (local copies) and
// transport headers are not counted. Gloo counts exactly what its algorithms
// send (ring allreduce, ring allgatherv, binomial-tree broadcast, pairwise
// all-to-all; the multi-process tests check the counts against the bytes the
// process wrote to its sockets). NCCL chooses its algorithms at run time, so
// its counts are those of the equivalent ring (allreduce 2(W-1)/W of the
// buffer, broadcast the buffer on every rank but the last in the ring). A
// Gloo barrier sends empty messages (0 bytes); an NCCL barrier is a one-float
// allreduce.
struct BytesSent {
  uint64_t all_to_all = 0;
  uint64_t all_gather = 0;
  uint64_t all_reduce = 0;
  uint64_t broadcast = 0;
  uint64_t barrier = 0;

  uint64_t Total() const {
    return all_to_all + all_gather + all_reduce + broadcast + barrier;
  }
};

class Transport {
 public:
  // Default timeout of every call; settable per communicator.
  static constexpr absl::Duration kDefaultTimeout = absl::Seconds(60);

  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual absl::string_view backend_name() const = 0;
  virtual MemoryKind memory_kind() const = 0;

  absl::Duration timeout() const ABSL_LOCKS_EXCLUDED(mu_);
  // REQUIRES: timeout > 0.
  absl::Status SetTimeout(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // The stream later calls are enqueued on: a cudaStream_t for NCCL (nullptr
  // is the legacy default stream). Host backends have no streams and reject
  // anything but nullptr with INVALID_ARGUMENT.
  virtual absl::Status SetStream(void* stream) = 0;

  // Sends send[send_offsets[p], +send_sizes[p]) to rank p and receives rank
  // p's piece into recv[recv_offsets[p], +recv_sizes[p]), for every p
  // including this rank (a local copy). Sizes and offsets are in bytes, one
  // entry per rank; zero sizes are allowed. REQUIRES: recv_sizes[p] equals
  // rank p's send_sizes[rank()]; send_sizes[rank()] == recv_sizes[rank()];
  // the receive ranges do not overlap each other or the send ranges.
  absl::Status AllToAllV(const void* send, std::span<const size_t> send_sizes,
                         std::span<const size_t> send_offsets, void* recv,
                         std::span<const size_t> recv_sizes,
                         std::span<const size_t> recv_offsets);

  // Gathers send[0, send_bytes) of every rank into recv, packed in rank
  // order: rank p's bytes land at sum(recv_sizes[0..p)). REQUIRES:
  // recv_sizes has world_size() entries, recv_sizes[rank()] == send_bytes,
  // and send does not overlap recv.
  absl::Status AllGatherV(const void* send, size_t send_bytes, void* recv,
                          std::span<const size_t> recv_sizes);

  // Element-wise reduction of `count` elements over all ranks into recv on
  // every rank; send == recv (in place) is allowed. Supported: float32
  // sum/min/max, int64 sum/min/max, bfloat16 sum (every partial sum is
  // rounded to bfloat16, nearest-even, as NCCL does). All ranks get
  // bit-identical results.
  absl::Status AllReduce(const void* send, void* recv, size_t count,
                         DataType type, ReduceOp op);

  // Copies data[0, bytes) of rank `root` into data on every rank.
  absl::Status Broadcast(void* data, size_t bytes, int root);

  // Returns once every rank has entered the barrier.
  absl::Status Barrier();

  BytesSent bytes_sent() const ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  // REQUIRES: 0 <= rank < world_size.
  Transport(int rank, int world_size, absl::Duration timeout)
      : rank_(rank), world_size_(world_size), timeout_(timeout) {}

  // The backend's collectives. Arguments have been validated, sizes are not
  // all zero, and the communicator is not broken. Each adds what it sent to
  // `sent` (a field of the counters, updated only if the call succeeds).
  virtual absl::Status DoAllToAllV(const void* send,
                                   std::span<const size_t> send_sizes,
                                   std::span<const size_t> send_offsets,
                                   void* recv,
                                   std::span<const size_t> recv_sizes,
                                   std::span<const size_t> recv_offsets,
                                   uint64_t& sent) = 0;
  virtual absl::Status DoAllGatherV(const void* send, size_t send_bytes,
                                    void* recv,
                                    std::span<const size_t> recv_sizes,
                                    uint64_t& sent) = 0;
  virtual absl::Status DoAllReduce(const void* send, void* recv, size_t count,
                                   DataType type, ReduceOp op,
                                   uint64_t& sent) = 0;
  virtual absl::Status DoBroadcast(void* data, size_t bytes, int root,
                                   uint64_t& sent) = 0;
  virtual absl::Status DoBarrier(uint64_t& sent) = 0;

 private:
  // Runs one backend call: fails fast when broken, marks the communicator
  // broken when the call fails, and adds the bytes sent to `counter`.
  template <typename Call>
  absl::Status Run(absl::string_view what, uint64_t BytesSent::*counter,
                   Call call) ABSL_LOCKS_EXCLUDED(mu_);

  const int rank_;
  const int world_size_;
  mutable absl::Mutex mu_;
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  BytesSent bytes_sent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_TRANSPORT_H_
