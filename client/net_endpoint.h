// Which address a rank's Gloo communicator listens on and announces to its
// peers, chosen as PyTorch users expect (torch.distributed's gloo backend
// reads the same variable):
//   1. the interface the caller names (gift.init(socket_ifname=...));
//   2. $GLOO_SOCKET_IFNAME (PyTorch's; the first of a comma-separated list);
//   3. $GIFT_SOCKET_IFNAME;
//   4. the interface whose address routes to $MASTER_ADDR (a connected UDP
//      socket's local address: no packet is sent), as torchrun sets it;
//   5. the address of this host's name; else 127.0.0.1.
//
//   ASSIGN_OR_RETURN(Endpoint e,
//   ResolveEndpoint(EndpointRequest::FromEnvironment(""))); options.hostname =
//   e.address;  // e.source says why, for error messages
//
// Thread safety: pure functions (FromEnvironment reads the environment).
#ifndef GIFT_CLIENT_NET_ENDPOINT_H_
#define GIFT_CLIENT_NET_ENDPOINT_H_

#include <string>

#include "absl/status/statusor.h"

namespace gift::client {

struct EndpointRequest {
  std::string interface;    // explicit choice; "" = none
  std::string gloo_ifname;  // $GLOO_SOCKET_IFNAME
  std::string gift_ifname;  // $GIFT_SOCKET_IFNAME
  std::string master_addr;  // $MASTER_ADDR

  static EndpointRequest FromEnvironment(std::string interface);
};

struct Endpoint {
  std::string interface;  // "" when chosen by host name
  std::string address;    // numeric IPv4 or IPv6
  // How it was chosen, e.g. "GLOO_SOCKET_IFNAME=eth0" or "the route to
  // MASTER_ADDR=10.0.0.1".
  std::string source;
};

// NOT_FOUND naming the interface (and the ones this host has) when a named
// interface does not exist or has no address; UNAVAILABLE when MASTER_ADDR
// does not resolve or has no route.
absl::StatusOr<Endpoint> ResolveEndpoint(const EndpointRequest& request);

// The first address of an interface that is up (IPv4 preferred).
absl::StatusOr<std::string> InterfaceAddress(const std::string& interface);

}  // namespace gift::client

#endif  // GIFT_CLIENT_NET_ENDPOINT_H_
