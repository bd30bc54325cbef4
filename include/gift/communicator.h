// gift::Communicator: the collective engine of one rank of a job, created
// by one factory for every backend.
//
//   gift::CommunicatorOptions o;
//   o.rank = rank;
//   o.world_size = 2;
//   o.store_dir = "/shared/job42/store";  // empty at the start of the job
//   std::shared_ptr<gift::Communicator> comm;
//   gift::Status s = gift::Communicator::Create(o, &comm);
//
// Backends: Gloo (CPU; buffers in host memory; TCP) and NCCL (GPU; buffers
// in device memory of `device`; needs a libgift built with CUDA).
//
// Rendezvous: the ranks find each other through a key-value store that
// every rank reaches, one of
//   * a directory (store_dir): a local disk for ranks on one host, a shared
//     file system across hosts. It should be empty at the start of a job
//     (keys left from an earlier job would be read as set); give every job
//     its own directory or key_prefix;
//   * the local giftd (daemon_store): the daemon's Agent unix socket serves
//     the store, and the daemons of a multi-node job forward it to the
//     job's leader; no shared file system needed.
//
// Creation is collective: every rank calls Create with the same backend,
// world size, store and key prefix, and it returns once all ranks are
// connected, or with DEADLINE_EXCEEDED / UNAVAILABLE within about
// timeout_seconds.
//
// Thread safety: collective calls (Barrier, Broadcast, and every step of a
// QuantizedAllReduce over this communicator) must not run concurrently;
// the accessors may be called from any thread.
#ifndef GIFT_COMMUNICATOR_H_
#define GIFT_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gift/export.h"
#include "gift/status.h"

namespace gift {

enum class Backend : int { kGloo = 0, kNccl = 1 };

// "gloo" or "nccl".
GIFT_EXPORT const char* BackendName(Backend backend);

struct CommunicatorOptions {
  // Default: Gloo.
  Backend backend = Backend::kGloo;
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  // REQUIRES: world_size >= 1.
  int world_size = 0;

  // Rendezvous through a directory; used when daemon_store is false.
  // REQUIRES: not empty unless daemon_store.
  std::string store_dir;
  // Rendezvous through the local giftd instead. Default: false.
  bool daemon_store = false;
  // giftd's Agent socket (daemon_store). Default: "" = $GIFT_AGENT_SOCKET,
  // else /tmp/gift/agent.sock.
  std::string agent_socket;
  // The job (daemon_store). REQUIRES: not empty with daemon_store; the same
  // on every rank.
  std::string job_id;
  // Prepended to every rendezvous key, so that several communicators (or
  // jobs) can share one store. Default: "".
  std::string key_prefix;

  // Bound of creation and of every later collective call.
  // Default: 60 s. REQUIRES: > 0.
  double timeout_seconds = 60;

  // Gloo: the address this rank listens on and announces to its peers.
  // Default: "" = chosen from socket_ifname, else as PyTorch does:
  // $GLOO_SOCKET_IFNAME, $GIFT_SOCKET_IFNAME, the interface that routes to
  // $MASTER_ADDR, the address of the host name, 127.0.0.1.
  std::string hostname;
  // Gloo: the network interface to listen on (e.g. "eth0"), when hostname
  // is empty. Default: "" (see hostname).
  std::string socket_ifname;

  // NCCL: this rank's CUDA device. Default: 0. REQUIRES: >= 0.
  int device = 0;
};

class GIFT_EXPORT Communicator {
 public:
  // Collective. INVALID_ARGUMENT for bad options (rank, world size,
  // timeout, device, no store); FAILED_PRECONDITION for NCCL in a libgift
  // built without CUDA, or a CPU that lacks what the library was compiled
  // for (x86-64 level); NOT_FOUND for an unknown socket_ifname;
  // DEADLINE_EXCEEDED / UNAVAILABLE when the peers do not all arrive.
  // REQUIRES: out not null.
  static Status Create(const CommunicatorOptions& options,
                       std::shared_ptr<Communicator>* out);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  Backend backend() const;
  // True for NCCL: every buffer given to this communicator, or to an
  // allreduce over it, is device memory.
  bool device_memory() const;
  // Gloo: the address this rank listens on and why it was chosen (for
  // messages); "" for NCCL.
  const std::string& endpoint() const;

  // Returns once every rank has entered the barrier. Collective.
  Status Barrier();
  // Copies data[0, bytes) of rank `root` into data on every rank.
  // Collective; memory of the communicator's kind. INVALID_ARGUMENT for a
  // null data with bytes > 0 or a root outside [0, world_size).
  Status Broadcast(void* data, size_t bytes, int root);

  // Payload bytes this rank has sent since creation (all call kinds).
  uint64_t bytes_sent() const;
  // The bound of later calls. REQUIRES: seconds > 0 (INVALID_ARGUMENT).
  Status SetTimeout(double seconds);

 private:
  friend class QuantizedAllReduce;
  struct Rep;
  explicit Communicator(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace gift

#endif  // GIFT_COMMUNICATOR_H_
