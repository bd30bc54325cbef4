#include "client/transport_setup.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/daemon_store.h"
#include "client/net_endpoint.h"
#include "client/transport_factory.h"
#include "common/agent_socket.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// Opens the store options name into setup->store, or returns the caller's.
absl::StatusOr<Store*> OpenStore(const TransportSetupOptions& o,
                                 TransportSetup* setup) {
  if (o.daemon_store) {
    ASSIGN_OR_RETURN(
        setup->store,
        DaemonStore::Connect(
            o.agent_socket.empty() ? DefaultAgentSocket() : o.agent_socket,
            o.job_id));
    return setup->store.get();
  }
  if (o.job_store != nullptr) return o.job_store;
  ASSIGN_OR_RETURN(setup->store, FileStore::Create(o.store_dir));
  return setup->store.get();
}

// Sets c->hostname and setup->endpoint: the caller's hostname, or the
// address net_endpoint.h chooses.
absl::Status ChooseEndpoint(const TransportSetupOptions& o, TransportOptions* c,
                            TransportSetup* setup) {
  if (!o.hostname.empty()) {
    c->hostname = o.hostname;
    setup->endpoint = absl::StrCat(o.hostname, ", set by the caller");
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(
      const Endpoint e,
      ResolveEndpoint(EndpointRequest::FromEnvironment(o.socket_ifname)));
  c->hostname = e.address;
  setup->endpoint =
      absl::StrCat(e.address, e.interface.empty() ? "" : " on " + e.interface,
                   ", chosen by ", e.source);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransportSetup> SetUpTransport(
    const TransportSetupOptions& options) {
  TransportSetup setup;
  ASSIGN_OR_RETURN(Store* const base, OpenStore(options, &setup));
  setup.prefixed = std::make_unique<PrefixStore>(options.key_prefix, base);

  TransportOptions c;
  c.backend = options.backend;
  c.rank = options.rank;
  c.world_size = options.world_size;
  c.store = setup.prefixed.get();
  c.timeout = options.timeout;
  c.device = options.device;
  if (options.backend == "gloo") {
    RETURN_IF_ERROR(ChooseEndpoint(options, &c, &setup));
  }
  absl::StatusOr<std::unique_ptr<Transport>> comm = CreateTransport(c);
  if (!comm.ok()) {
    if (setup.endpoint.empty()) return comm.status();
    return absl::Status(
        comm.status().code(),
        absl::StrCat(comm.status().message(), " [gloo address ", setup.endpoint,
                     "; ranks on other hosts must reach it: set "
                     "GLOO_SOCKET_IFNAME or socket_ifname to the interface "
                     "they share]"));
  }
  setup.comm = *std::move(comm);
  return setup;
}

}  // namespace gift::client
