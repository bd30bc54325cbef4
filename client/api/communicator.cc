// gift::Communicator (include/gift/communicator.h) over the internal
// communicator set-up (client/transport_setup.h): the rendezvous stores,
// the endpoint choice and the communicator factory.
#include "gift/communicator.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/api/internal.h"
#include "client/store.h"
#include "client/transport_setup.h"

namespace gift {
namespace {

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

// The internal set-up of `options`; the keys go under key_prefix + "comm/".
client::TransportSetupOptions SetupOptionsOf(
    const CommunicatorOptions& options) {
  client::TransportSetupOptions o;
  o.backend = BackendName(options.backend);
  o.rank = options.rank;
  o.world_size = options.world_size;
  o.device = options.device;
  o.timeout = absl::Seconds(options.timeout_seconds);
  o.daemon_store = options.daemon_store;
  o.agent_socket = options.agent_socket;
  o.job_id = options.job_id;
  o.store_dir = options.store_dir;
  o.key_prefix = absl::StrCat(options.key_prefix, "comm/");
  o.hostname = options.hostname;
  o.socket_ifname = options.socket_ifname;
  return o;
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

  absl::StatusOr<client::TransportSetup> setup =
      client::SetUpTransport(SetupOptionsOf(options));
  if (!setup.ok()) return api::FromAbsl(setup.status());

  auto rep = std::make_unique<Rep>();
  rep->options = options;
  rep->store = std::move(setup->store);
  rep->prefixed = std::move(setup->prefixed);
  rep->comm = std::move(setup->comm);
  rep->endpoint = std::move(setup->endpoint);
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
