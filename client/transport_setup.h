// How a training rank sets up its communicator: the rendezvous store (the
// job's own, giftd's Agent socket, or a FileStore on a shared directory),
// the key namespace, the address its Gloo listens on, and the collective
// creation (transport_factory.h), with a hint naming that address when
// the ranks fail to connect. The one copy of these steps behind the public
// API (gift::Communicator::Create, client/api/communicator.cc) and the
// Python extension's rank state (client/python/native_rank.h).
//
//   TransportSetupOptions o;
//   o.rank = rank;
//   o.world_size = world_size;
//   o.store_dir = "/shared/job42/store";
//   o.key_prefix = "job42/grad/";
//   ASSIGN_OR_RETURN(TransportSetup setup, SetUpTransport(o));
//   RETURN_IF_ERROR(setup.comm->Barrier());
//
// Collective like CreateTransport: every rank calls it with the same
// backend, world size, store and key prefix.
//
// Thread safety: SetUpTransport may run on several threads at once (each
// with its own options); a TransportSetup is as thread-safe as its parts.
#ifndef GIFT_CLIENT_TRANSPORT_SETUP_H_
#define GIFT_CLIENT_TRANSPORT_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/store.h"
#include "client/transport.h"

namespace gift::client {

struct TransportSetupOptions {
  // "gloo" (host memory, TCP) or "nccl" (device memory). Default: "gloo".
  std::string backend = "gloo";
  // REQUIRES: 0 <= rank < world_size.
  int rank = -1;
  int world_size = 0;
  // NCCL: the CUDA device of this rank. Default: 0. REQUIRES: >= 0.
  int device = 0;
  // Bound of the rendezvous and of every later call. Default: 60 s.
  // REQUIRES: > 0.
  absl::Duration timeout = Transport::kDefaultTimeout;

  // The rendezvous store, the first of:
  //  * giftd's Agent socket when daemon_store (REQUIRES: job_id not empty);
  //    agent_socket "" = DefaultAgentSocket() (common/agent_socket.h);
  //  * job_store, a store of the caller's (not owned; REQUIRES: outlives the
  //    SetUpTransport call, which is all the communicator needs of it);
  //  * a FileStore on store_dir (REQUIRES: not empty then).
  // Default: none (an error unless one is set).
  bool daemon_store = false;
  std::string agent_socket;
  std::string job_id;
  Store* job_store = nullptr;
  std::string store_dir;
  // The namespace of the communicator's keys in that store, e.g. the job's
  // prefix and "grad/". Default: "" (the whole store).
  std::string key_prefix;

  // Gloo: the address this rank listens on and announces. "" = chosen as
  // net_endpoint.h says (socket_ifname, $GLOO_SOCKET_IFNAME,
  // $GIFT_SOCKET_IFNAME, the route to $MASTER_ADDR, ...). Default: "".
  std::string hostname;
  // Gloo: the interface to take the address of when hostname is "".
  // Default: "" (net_endpoint.h's order).
  std::string socket_ifname;
};

// A connected communicator and what it was bootstrapped through. Members
// are destroyed in reverse order: the communicator before its stores.
struct TransportSetup {
  // The store SetUpTransport opened (daemon or file), or null when the
  // caller's job_store served.
  std::unique_ptr<Store> store;
  // options.key_prefix over the store. The communicator no longer needs it;
  // callers may keep it for the communicator's lifetime or drop it.
  std::unique_ptr<PrefixStore> prefixed;
  std::unique_ptr<Transport> comm;
  // Gloo: where this rank listens and why, e.g. "10.0.0.5 on eth0, chosen
  // by GLOO_SOCKET_IFNAME=eth0" or "10.0.0.5, set by the caller"; "" for
  // NCCL.
  std::string endpoint;
};

// The store's, the endpoint's or CreateTransport's error. When Gloo fails
// to connect, the message ends with the address and how to choose another:
// "... [gloo address A; ranks on other hosts must reach it: set
// GLOO_SOCKET_IFNAME or socket_ifname to the interface they share]".
absl::StatusOr<TransportSetup> SetUpTransport(
    const TransportSetupOptions& options);

}  // namespace gift::client

#endif  // GIFT_CLIENT_TRANSPORT_SETUP_H_
