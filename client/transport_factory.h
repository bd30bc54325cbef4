// The one place that picks a communicator backend.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<FileStore> files,
//                    FileStore::Create(store_dir));
//   PrefixStore store("grad/", files.get());
//   TransportOptions options;
//   options.backend = "gloo";
//   options.rank = rank;
//   options.world_size = world_size;
//   options.store = &store;
//   ASSIGN_OR_RETURN(std::unique_ptr<Transport> comm,
//                    CreateTransport(options));
//
// Creation is itself collective: every rank of the job calls it with the same
// backend, world size and store namespace, and it returns once all ranks are
// connected, or with DEADLINE_EXCEEDED / UNAVAILABLE within about `timeout`.
#ifndef GIFT_CLIENT_TRANSPORT_FACTORY_H_
#define GIFT_CLIENT_TRANSPORT_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/store.h"
#include "client/transport.h"

namespace gift::client {

struct TransportOptions {
  // "gloo" (CPU, host memory, TCP) or "nccl" (GPU, device memory).
  // Default: "gloo".
  std::string backend = "gloo";
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  // REQUIRES: world_size >= 1.
  int world_size = 0;
  // Rendezvous store. The communicator writes its keys into it ("0", "1", ...
  // for Gloo, "nccl_unique_id" for NCCL), so give each communicator its own
  // namespace (a PrefixStore) or a fresh store. REQUIRES: not null; outlives
  // the CreateTransport call (the communicator does not keep it).
  Store* store = nullptr;
  // Bound of creation and of every later call (Transport::SetTimeout
  // changes it afterwards). Default: 60 s. REQUIRES: > 0.
  absl::Duration timeout = Transport::kDefaultTimeout;
  // Gloo: the address this rank listens on and announces to its peers. Used
  // when `interface` is empty. Default: "127.0.0.1" (one host).
  std::string hostname = "127.0.0.1";
  // Gloo: a network interface (e.g. "eth0") to listen on instead of
  // `hostname`. Default: "" (use hostname).
  std::string interface;
  // NCCL: the CUDA device of this rank. Default: 0. REQUIRES: >= 0.
  int device = 0;
};

// Validates `options` (INVALID_ARGUMENT for a bad rank, world size, timeout,
// device, null store or unknown backend; FAILED_PRECONDITION "built without
// CUDA" for nccl in a CPU-only build) and builds the backend.
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(
    const TransportOptions& options);

}  // namespace gift::client

#endif  // GIFT_CLIENT_TRANSPORT_FACTORY_H_
