// The C ABI of libgift (include/gift/c_api.h): communicator options and
// communicators, over gift::Communicator (include/gift/communicator.h).
#include <memory>
#include <string>
#include <utility>

#include "client/api/c_api_internal.h"
#include "gift/c_api.h"
#include "gift/communicator.h"
#include "gift/status.h"

using gift::Status;
using gift::capi::CopyString;
using gift::capi::Guard;
using gift::capi::Invalid;
using gift::capi::NewOrNull;
using gift::capi::Null;

// The definitions below have C linkage: gift/c_api.h declares them inside
// extern "C".

gift_communicator_options_t* gift_communicator_options_create(void) {
  return NewOrNull<gift_communicator_options_t>();
}

void gift_communicator_options_destroy(gift_communicator_options_t* options) {
  delete options;
}

gift_status_t gift_communicator_options_set_backend(
    gift_communicator_options_t* options, gift_backend_t backend) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    const int b = static_cast<int>(backend);
    if (b != GIFT_BACKEND_GLOO && b != GIFT_BACKEND_NCCL) {
      return Invalid("unknown backend " + std::to_string(b));
    }
    options->o.backend = static_cast<gift::Backend>(b);
    return Status();
  });
}

gift_status_t gift_communicator_options_set_rank(
    gift_communicator_options_t* options, int rank) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.rank = rank;
    return Status();
  });
}

gift_status_t gift_communicator_options_set_world_size(
    gift_communicator_options_t* options, int world_size) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.world_size = world_size;
    return Status();
  });
}

gift_status_t gift_communicator_options_set_store_dir(
    gift_communicator_options_t* options, const char* dir) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    std::string d;
    if (Status s = CopyString(dir, "dir", &d); !s.ok()) return s;
    options->o.store_dir = std::move(d);
    options->o.daemon_store = false;
    return Status();
  });
}

gift_status_t gift_communicator_options_set_daemon_store(
    gift_communicator_options_t* options, const char* agent_socket,
    const char* job_id) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    std::string job;
    if (Status s = CopyString(job_id, "job_id", &job); !s.ok()) return s;
    if (job.empty()) return Invalid("job_id is empty");
    options->o.agent_socket = agent_socket != nullptr ? agent_socket : "";
    options->o.job_id = std::move(job);
    options->o.daemon_store = true;
    options->o.store_dir.clear();
    return Status();
  });
}

gift_status_t gift_communicator_options_set_key_prefix(
    gift_communicator_options_t* options, const char* prefix) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    return CopyString(prefix, "prefix", &options->o.key_prefix);
  });
}

gift_status_t gift_communicator_options_set_timeout_seconds(
    gift_communicator_options_t* options, double seconds) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.timeout_seconds = seconds;
    return Status();
  });
}

gift_status_t gift_communicator_options_set_hostname(
    gift_communicator_options_t* options, const char* hostname) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    return CopyString(hostname, "hostname", &options->o.hostname);
  });
}

gift_status_t gift_communicator_options_set_socket_ifname(
    gift_communicator_options_t* options, const char* ifname) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    return CopyString(ifname, "ifname", &options->o.socket_ifname);
  });
}

gift_status_t gift_communicator_options_set_device(
    gift_communicator_options_t* options, int device) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.device = device;
    return Status();
  });
}

gift_status_t gift_communicator_create(
    const gift_communicator_options_t* options, gift_communicator_t** out) {
  if (out != nullptr) *out = nullptr;
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (out == nullptr) return Null("out");
    auto handle = std::make_unique<gift_communicator_t>();
    Status s = gift::Communicator::Create(options->o, &handle->c);
    if (s.ok()) *out = handle.release();
    return s;
  });
}

void gift_communicator_destroy(gift_communicator_t* comm) { delete comm; }

int gift_communicator_rank(const gift_communicator_t* comm) {
  return comm != nullptr ? comm->c->rank() : -1;
}

int gift_communicator_world_size(const gift_communicator_t* comm) {
  return comm != nullptr ? comm->c->world_size() : 0;
}

int gift_communicator_device_memory(const gift_communicator_t* comm) {
  return comm != nullptr && comm->c->device_memory() ? 1 : 0;
}

uint64_t gift_communicator_bytes_sent(const gift_communicator_t* comm) {
  return comm != nullptr ? comm->c->bytes_sent() : 0;
}

gift_status_t gift_communicator_barrier(gift_communicator_t* comm) {
  return Guard(__func__, [&] {
    if (comm == nullptr) return Null("comm");
    return comm->c->Barrier();
  });
}

gift_status_t gift_communicator_broadcast(gift_communicator_t* comm, void* data,
                                          size_t bytes, int root) {
  return Guard(__func__, [&] {
    if (comm == nullptr) return Null("comm");
    return comm->c->Broadcast(data, bytes, root);
  });
}
