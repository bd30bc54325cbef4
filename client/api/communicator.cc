// gift::Communicator (include/gift/communicator.h) over the internal
// communicator factory, the rendezvous stores and the endpoint choice.
#include "gift/communicator.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/api/internal.h"
#include "client/communicator_factory.h"
#include "client/daemon_store.h"
#include "client/net_endpoint.h"
#include "client/store.h"

namespace gift {
namespace {

std::string DefaultAgentSocket() {
  const char* env = std::getenv("GIFT_AGENT_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/tmp/gift/agent.sock";
}

Status CheckOptions(const CommunicatorOptions& o) {
  const int backend = static_cast<int>(o.backend);
  if (backend != 0 && backend != 1) {
    return api::InvalidArgument(
        absl::StrCat("communicator: unknown backend ", backend));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return api::InvalidArgument(
        absl::StrCat("communicator: rank ", o.rank, " of world size ",
                     o.world_size, " (REQUIRES 0 <= rank < world_size)"));
  }
  if (!(o.timeout_seconds > 0) || !std::isfinite(o.timeout_seconds)) {
    return api::InvalidArgument(
        absl::StrCat("communicator: timeout_seconds must be finite and > 0, "
                     "is ",
                     o.timeout_seconds));
  }
  if (o.daemon_store) {
    if (o.job_id.empty()) {
      return api::InvalidArgument(
          "communicator: the daemon store needs a job_id");
    }
  } else if (o.store_dir.empty()) {
    return api::InvalidArgument(
        "communicator: no rendezvous store: set store_dir (a directory every "
        "rank reaches) or daemon_store");
  }
  if (o.device < 0) {
    return api::InvalidArgument(
        absl::StrCat("communicator: negative device ", o.device));
  }
  return Status();
}

}  // namespace

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "unknown";
}

Status Communicator::Create(const CommunicatorOptions& options,
                            std::shared_ptr<Communicator>* out) {
  if (out == nullptr) {
    return api::InvalidArgument("Communicator::Create: out is null");
  }
  out->reset();
  if (Status s = CheckOptions(options); !s.ok()) return s;
  if (Status s = api::CheckCpu(); !s.ok()) return s;

  auto rep = std::make_unique<Rep>();
  rep->options = options;
  client::Store* base = nullptr;
  if (options.daemon_store) {
    absl::StatusOr<std::unique_ptr<client::DaemonStore>> store =
        client::DaemonStore::Connect(options.agent_socket.empty()
                                         ? DefaultAgentSocket()
                                         : options.agent_socket,
                                     options.job_id);
    if (!store.ok()) return api::FromAbsl(store.status());
    rep->store = *std::move(store);
  } else {
    absl::StatusOr<std::unique_ptr<client::FileStore>> store =
        client::FileStore::Create(options.store_dir);
    if (!store.ok()) return api::FromAbsl(store.status());
    rep->store = *std::move(store);
  }
  base = rep->store.get();
  rep->prefixed = std::make_unique<client::PrefixStore>(
      absl::StrCat(options.key_prefix, "comm/"), base);

  client::CommunicatorOptions c;
  c.backend = BackendName(options.backend);
  c.rank = options.rank;
  c.world_size = options.world_size;
  c.store = rep->prefixed.get();
  c.timeout = absl::Seconds(options.timeout_seconds);
  c.device = options.device;
  if (options.backend == Backend::kGloo) {
    if (!options.hostname.empty()) {
      c.hostname = options.hostname;
      rep->endpoint = absl::StrCat(options.hostname, ", set by the caller");
    } else {
      absl::StatusOr<client::Endpoint> e = client::ResolveEndpoint(
          client::EndpointRequest::FromEnvironment(options.socket_ifname));
      if (!e.ok()) return api::FromAbsl(e.status());
      c.hostname = e->address;
      rep->endpoint = absl::StrCat(
          e->address, e->interface.empty() ? "" : " on " + e->interface,
          ", chosen by ", e->source);
    }
  }
  absl::StatusOr<std::unique_ptr<client::Communicator>> comm =
      client::CreateCommunicator(c);
  if (!comm.ok()) {
    Status s = api::FromAbsl(comm.status());
    if (rep->endpoint.empty()) return s;
    return Status(s.code(),
                  absl::StrCat(s.message(), " [gloo address ", rep->endpoint,
                               "; ranks on other hosts must reach it: set "
                               "GLOO_SOCKET_IFNAME or socket_ifname to the "
                               "interface they share]"));
  }
  rep->comm = *std::move(comm);
  out->reset(new Communicator(std::move(rep)));
  return Status();
}

Communicator::Communicator(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

Communicator::~Communicator() {
  // The connections first, then the store they were bootstrapped through.
  rep_->comm.reset();
  rep_->prefixed.reset();
  rep_->store.reset();
}

int Communicator::rank() const { return rep_->comm->rank(); }

int Communicator::world_size() const { return rep_->comm->world_size(); }

Backend Communicator::backend() const { return rep_->options.backend; }

bool Communicator::device_memory() const {
  return rep_->comm->memory_kind() == client::MemoryKind::kDevice;
}

const std::string& Communicator::endpoint() const { return rep_->endpoint; }

Status Communicator::Barrier() { return api::FromAbsl(rep_->comm->Barrier()); }

Status Communicator::Broadcast(void* data, size_t bytes, int root) {
  if (data == nullptr && bytes > 0) {
    return api::InvalidArgument("Communicator::Broadcast: data is null");
  }
  if (root < 0 || root >= world_size()) {
    return api::InvalidArgument(absl::StrCat("Communicator::Broadcast: root ",
                                             root, " outside [0, ",
                                             world_size(), ")"));
  }
  if (bytes == 0) return Status();
  return api::FromAbsl(rep_->comm->Broadcast(data, bytes, root));
}

uint64_t Communicator::bytes_sent() const {
  return rep_->comm->bytes_sent().Total();
}

Status Communicator::SetTimeout(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    return api::InvalidArgument(
        absl::StrCat("Communicator::SetTimeout: seconds must be finite and "
                     "> 0, is ",
                     seconds));
  }
  return api::FromAbsl(rep_->comm->SetTimeout(absl::Seconds(seconds)));
}

}  // namespace gift
