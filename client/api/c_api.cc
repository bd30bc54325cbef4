// The C ABI of libgift (include/gift/c_api.h), a thin layer over the public
// C++ API (include/gift/*.h). Every entry point checks its arguments,
// catches every exception (none crosses into C), and records the calling
// thread's last error message.
#include "gift/c_api.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "gift/allreduce.h"
#include "gift/bucket_plan.h"
#include "gift/communicator.h"
#include "gift/daemon_attachment.h"
#include "gift/status.h"

#ifndef GIFT_VERSION_STRING
#error "GIFT_VERSION_STRING must be defined by the build"
#endif

struct gift_communicator_options_t {
  gift::CommunicatorOptions o;
};
struct gift_communicator_t {
  std::shared_ptr<gift::Communicator> c;
};
struct gift_plan_builder_t {
  std::vector<gift::LayerSpec> layers;
};
struct gift_plan_t {
  gift::BucketPlan plan;
};
struct gift_allreduce_options_t {
  gift::AllReduceOptions o;
};
struct gift_allreduce_t {
  std::unique_ptr<gift::QuantizedAllReduce> ar;
  // The last completed step (gift_allreduce_last_step / _last_layer).
  bool has_last = false;
  gift::StepStats last;
};
struct gift_attachment_options_t {
  gift::AttachmentOptions o;
};
struct gift_attachment_t {
  std::shared_ptr<gift::DaemonAttachment> a;
};

namespace {

using gift::Status;
using gift::StatusCode;

thread_local std::string last_error;

// Records "<fn>: <what><detail>" as this thread's message and returns
// `code`. Never throws: without memory for the message it stays empty.
gift_status_t Fail(const char* fn, StatusCode code, const char* what,
                   const char* detail = "") noexcept {
  last_error.clear();
  try {
    last_error.append(fn).append(": ").append(what).append(detail);
  } catch (...) {
    last_error.clear();
  }
  return static_cast<gift_status_t>(code);
}

gift_status_t Finish(const char* fn, const Status& s) noexcept {
  if (s.ok()) {
    last_error.clear();
    return GIFT_OK;
  }
  return Fail(fn, s.code(), s.message().c_str());
}

// Runs `body` (returning a gift::Status) as the C function `fn`; no
// exception leaves it.
template <typename Body>
gift_status_t Guard(const char* fn, Body&& body) noexcept {
  try {
    return Finish(fn, body());
  } catch (const std::bad_alloc&) {
    return Fail(fn, StatusCode::kResourceExhausted, "out of memory");
  } catch (const std::exception& e) {
    return Fail(fn, StatusCode::kInternal, "unexpected exception: ", e.what());
  } catch (...) {
    return Fail(fn, StatusCode::kInternal, "unexpected exception");
  }
}

Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

Status Null(const char* what) {
  return Invalid(std::string(what) + " is NULL");
}

// A copy of a C string argument; INVALID_ARGUMENT for NULL.
Status CopyString(const char* s, const char* what, std::string* out) {
  if (s == nullptr) return Null(what);
  *out = s;
  return Status();
}

template <typename T>
T* NewOrNull() {
  try {
    return new T();
  } catch (...) {
    return nullptr;
  }
}

// Fills the fields of `info` that its struct_size covers from `full`.
template <typename T>
Status FillSized(T* info, T full) {
  if (info == nullptr) return Null("info");
  const size_t size = info->struct_size;
  if (size < sizeof(size_t)) {
    return Invalid("info->struct_size must be set to sizeof the struct");
  }
  full.struct_size = size;
  std::memcpy(static_cast<void*>(info), &full, std::min(size, sizeof(T)));
  return Status();
}

gift::LayerSpec* FindLayer(gift_plan_builder_t* b, const char* name) {
  for (gift::LayerSpec& l : b->layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

// The layer of a builder to change, or the error.
Status LayerOf(gift_plan_builder_t* b, const char* name, gift::LayerSpec** l) {
  if (b == nullptr) return Null("builder");
  if (name == nullptr) return Null("layer");
  *l = FindLayer(b, name);
  if (*l == nullptr) {
    return Status(StatusCode::kNotFound,
                  std::string("no layer '") + name + "' was added");
  }
  return Status();
}

}  // namespace

// The definitions below have C linkage: gift/c_api.h declares them inside
// extern "C".

// ---- Status
// ------------------------------------------------------------------

const char* gift_status_name(gift_status_t code) {
  const int c = static_cast<int>(code);
  if (c < 0 || c > 16) return "UNKNOWN";
  return gift::StatusCodeName(static_cast<StatusCode>(c));
}

const char* gift_last_error_message(void) { return last_error.c_str(); }

const char* gift_version(void) { return GIFT_VERSION_STRING; }

// ---- Communicator
// --------------------------------------------------------------

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

// ---- Bucket plan
// ---------------------------------------------------------------

gift_plan_builder_t* gift_plan_builder_create(void) {
  return NewOrNull<gift_plan_builder_t>();
}

void gift_plan_builder_destroy(gift_plan_builder_t* builder) { delete builder; }

gift_status_t gift_plan_builder_add_layer(gift_plan_builder_t* builder,
                                          const char* name,
                                          const int64_t* shape, size_t ndim,
                                          int64_t offset) {
  return Guard(__func__, [&] {
    if (builder == nullptr) return Null("builder");
    if (name == nullptr) return Null("name");
    if (*name == '\0') return Invalid("the layer name is empty");
    if (ndim != 1 && ndim != 2) {
      return Invalid(std::string("layer '") + name +
                     "': ndim must be 1 or 2, is " + std::to_string(ndim));
    }
    if (shape == nullptr) return Null("shape");
    if (offset < 0) {
      return Invalid(std::string("layer '") + name + "': negative offset " +
                     std::to_string(offset));
    }
    int64_t n = 1;
    for (size_t i = 0; i < ndim; ++i) {
      const int64_t d = shape[i];
      if (d < 0) {
        return Invalid(std::string("layer '") + name +
                       "': negative dimension " + std::to_string(d));
      }
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
        return Invalid(std::string("layer '") + name +
                       "': the element count overflows");
      }
      n *= d;
    }
    if (n > std::numeric_limits<int64_t>::max() - offset) {
      return Invalid(std::string("layer '") + name +
                     "': offset + elements overflows");
    }
    if (FindLayer(builder, name) != nullptr) {
      return Status(StatusCode::kAlreadyExists,
                    std::string("layer '") + name + "' was already added");
    }
    gift::LayerSpec l;
    l.name = name;
    l.shape.assign(shape, shape + ndim);
    l.offset = offset;
    builder->layers.push_back(std::move(l));
    return Status();
  });
}

gift_status_t gift_plan_builder_set_path(gift_plan_builder_t* builder,
                                         const char* layer,
                                         gift_layer_path_t path) {
  return Guard(__func__, [&] {
    gift::LayerSpec* l = nullptr;
    if (Status s = LayerOf(builder, layer, &l); !s.ok()) return s;
    const int p = static_cast<int>(path);
    if (p != GIFT_PATH_EUCLID && p != GIFT_PATH_GIFT) {
      return Invalid("unknown path " + std::to_string(p));
    }
    l->path = static_cast<gift::LayerPath>(p);
    return Status();
  });
}

gift_status_t gift_plan_builder_set_format(gift_plan_builder_t* builder,
                                           const char* layer,
                                           gift_fp8_format_t format,
                                           int64_t block_size) {
  return Guard(__func__, [&] {
    gift::LayerSpec* l = nullptr;
    if (Status s = LayerOf(builder, layer, &l); !s.ok()) return s;
    const int f = static_cast<int>(format);
    if (f != GIFT_FP8_E4M3 && f != GIFT_FP8_E5M2) {
      return Invalid("unknown FP8 format " + std::to_string(f));
    }
    if (block_size < 0) {
      return Invalid("negative block size " + std::to_string(block_size));
    }
    l->format = static_cast<gift::Fp8Format>(f);
    l->block_size = block_size;
    return Status();
  });
}

gift_status_t gift_plan_builder_set_transform(gift_plan_builder_t* builder,
                                              const char* layer,
                                              gift_transform_t transform) {
  return Guard(__func__, [&] {
    gift::LayerSpec* l = nullptr;
    if (Status s = LayerOf(builder, layer, &l); !s.ok()) return s;
    const int t = static_cast<int>(transform);
    if (t != GIFT_TRANSFORM_LOW_RANK && t != GIFT_TRANSFORM_FULL) {
      return Invalid("unknown transform " + std::to_string(t));
    }
    l->transform = static_cast<gift::GiftTransform>(t);
    return Status();
  });
}

gift_status_t gift_plan_create(const gift_plan_builder_t* builder,
                               int64_t epoch, int64_t bucket_elements,
                               gift_plan_t** out) {
  if (out != nullptr) *out = nullptr;
  return Guard(__func__, [&] {
    if (builder == nullptr) return Null("builder");
    if (out == nullptr) return Null("out");
    auto handle = std::make_unique<gift_plan_t>();
    Status s = gift::BucketPlan::Create(epoch, bucket_elements, builder->layers,
                                        &handle->plan);
    if (s.ok()) *out = handle.release();
    return s;
  });
}

void gift_plan_destroy(gift_plan_t* plan) { delete plan; }

int64_t gift_plan_epoch(const gift_plan_t* plan) {
  return plan != nullptr ? plan->plan.epoch() : 0;
}

int64_t gift_plan_bucket_elements(const gift_plan_t* plan) {
  return plan != nullptr ? plan->plan.bucket_elements() : 0;
}

int64_t gift_plan_communicated_elements(const gift_plan_t* plan) {
  return plan != nullptr ? plan->plan.communicated_elements() : 0;
}

size_t gift_plan_num_layers(const gift_plan_t* plan) {
  return plan != nullptr ? plan->plan.layers().size() : 0;
}

uint64_t gift_plan_fingerprint(const gift_plan_t* plan) {
  return plan != nullptr ? plan->plan.fingerprint() : 0;
}

// ---- Quantized allreduce
// ---------------------------------------------------------

gift_allreduce_options_t* gift_allreduce_options_create(void) {
  return NewOrNull<gift_allreduce_options_t>();
}

void gift_allreduce_options_destroy(gift_allreduce_options_t* options) {
  delete options;
}

gift_status_t gift_allreduce_options_set_mode(gift_allreduce_options_t* options,
                                              gift_allreduce_mode_t mode) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    const int m = static_cast<int>(mode);
    if (m < GIFT_MODE_FP8 || m > GIFT_MODE_NCCL_FP8) {
      return Invalid("unknown mode " + std::to_string(m));
    }
    options->o.mode = static_cast<gift::AllReduceMode>(m);
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_piece_bytes(
    gift_allreduce_options_t* options, int64_t piece_bytes) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (piece_bytes < 4) {
      return Invalid("piece_bytes must be >= 4, is " +
                     std::to_string(piece_bytes));
    }
    options->o.piece_bytes = piece_bytes;
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_probe_interval(
    gift_allreduce_options_t* options, int probe_interval) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (probe_interval < 0) {
      return Invalid("probe_interval must be >= 0, is " +
                     std::to_string(probe_interval));
    }
    options->o.probe_interval = probe_interval;
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_error_feedback(
    gift_allreduce_options_t* options, int enabled) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.error_feedback = enabled != 0;
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_audit_interval(
    gift_allreduce_options_t* options, int audit_interval) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (audit_interval < 0) {
      return Invalid("audit_interval must be >= 0, is " +
                     std::to_string(audit_interval));
    }
    options->o.audit_interval = audit_interval;
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_audit_drift(
    gift_allreduce_options_t* options, int enabled) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.audit_drift = enabled != 0;
    return Status();
  });
}

gift_status_t gift_allreduce_create(gift_communicator_t* comm,
                                    const gift_plan_t* plan,
                                    const gift_allreduce_options_t* options,
                                    gift_allreduce_t** out) {
  if (out != nullptr) *out = nullptr;
  return Guard(__func__, [&] {
    if (comm == nullptr) return Null("comm");
    if (plan == nullptr) return Null("plan");
    if (out == nullptr) return Null("out");
    auto handle = std::make_unique<gift_allreduce_t>();
    Status s = gift::QuantizedAllReduce::Create(
        comm->c, plan->plan,
        options != nullptr ? options->o : gift::AllReduceOptions(),
        &handle->ar);
    if (s.ok()) *out = handle.release();
    return s;
  });
}

void gift_allreduce_destroy(gift_allreduce_t* allreduce) { delete allreduce; }

gift_status_t gift_allreduce_step(gift_allreduce_t* allreduce, float* bucket,
                                  size_t count) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    // Only a step that ran reports: argument errors leave the last one.
    const int64_t before = allreduce->ar->steps();
    gift::StepStats stats;
    Status s = allreduce->ar->Step(bucket, count, &stats);
    if (allreduce->ar->steps() != before) {
      allreduce->last = std::move(stats);
      allreduce->has_last = true;
    }
    return s;
  });
}

gift_status_t gift_allreduce_begin_step(gift_allreduce_t* allreduce) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    return allreduce->ar->BeginStep();
  });
}

gift_status_t gift_allreduce_reduce_bucket(gift_allreduce_t* allreduce,
                                           const int32_t* layers,
                                           const int64_t* offsets,
                                           size_t num_layers, float* data,
                                           size_t count) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    const size_t plan_layers = allreduce->ar->plan().layers().size();
    if (num_layers > plan_layers) {
      return Invalid("num_layers " + std::to_string(num_layers) +
                     " exceeds the plan's " + std::to_string(plan_layers) +
                     " layers");
    }
    if (num_layers > 0 && (layers == nullptr || offsets == nullptr)) {
      return Null(layers == nullptr ? "layers" : "offsets");
    }
    if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid("count " + std::to_string(count) + " is too large");
    }
    gift::BucketLayout layout;
    layout.layers.assign(layers, layers + num_layers);
    layout.offsets.assign(offsets, offsets + num_layers);
    layout.elements = static_cast<int64_t>(count);
    return allreduce->ar->ReduceBucket(layout, data, count);
  });
}

gift_status_t gift_allreduce_end_step(gift_allreduce_t* allreduce) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    const int64_t before = allreduce->ar->steps();
    gift::StepStats stats;
    Status s = allreduce->ar->EndStep(&stats);
    if (allreduce->ar->steps() != before) {
      allreduce->last = std::move(stats);
      allreduce->has_last = true;
    }
    return s;
  });
}

gift_status_t gift_allreduce_set_audit_interval(gift_allreduce_t* allreduce,
                                                int steps) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    return allreduce->ar->SetAuditInterval(steps);
  });
}

gift_status_t gift_allreduce_add_plan(gift_allreduce_t* allreduce,
                                      const gift_plan_t* plan) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    if (plan == nullptr) return Null("plan");
    return allreduce->ar->AddPlan(plan->plan);
  });
}

namespace {

// Checks what a put_*_factor call can check before it reads the arrays:
// the layer and its d_in.
Status CheckFactorLayer(const gift_allreduce_t* allreduce, const char* layer,
                        int64_t version, int64_t d_in) {
  if (allreduce == nullptr) return Null("allreduce");
  if (layer == nullptr) return Null("layer");
  const gift::BucketPlan& plan = allreduce->ar->plan();
  const int i = plan.FindLayer(layer);
  if (i < 0 || plan.layers()[i].shape.size() != 2) {
    return Invalid(std::string("'") + layer +
                   "' is not a 2-D layer of the plan");
  }
  if (d_in != plan.layers()[i].shape[1]) {
    return Invalid(std::string("layer '") + layer + "' has d_in " +
                   std::to_string(plan.layers()[i].shape[1]) + ", not " +
                   std::to_string(d_in));
  }
  if (version < 0) {
    return Invalid("negative version " + std::to_string(version));
  }
  return Status();
}

// The array `p` of `len` floats, which must hold `want` (>= 0) of them.
Status CopyFloats(const float* p, size_t len, int64_t want, const char* what,
                  std::vector<float>* out) {
  if (want < 0 || static_cast<uint64_t>(want) != len) {
    return Invalid(std::string(what) + " has " + std::to_string(len) +
                   " floats, the factor needs " + std::to_string(want));
  }
  if (p == nullptr && len > 0) return Null(what);
  out->assign(p, p + len);
  return Status();
}

// a * b, or -1 when it overflows or either is negative.
int64_t Product(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return -1;
  return a * b;
}

}  // namespace

gift_status_t gift_allreduce_put_low_rank_factor(
    gift_allreduce_t* allreduce, const char* layer, int64_t version,
    int64_t d_in, int64_t r, const float* u, size_t u_len, const float* c,
    size_t c_len, const float* c_inv, size_t c_inv_len) {
  return Guard(__func__, [&] {
    if (Status s = CheckFactorLayer(allreduce, layer, version, d_in); !s.ok()) {
      return s;
    }
    if (r < 0) return Invalid("negative rank r " + std::to_string(r));
    gift::GiftFactor f;
    f.version = version;
    f.kind = gift::GiftTransform::kLowRank;
    f.d_in = d_in;
    f.r = r;
    if (Status s = CopyFloats(u, u_len, Product(d_in, r), "u", &f.u); !s.ok()) {
      return s;
    }
    if (Status s = CopyFloats(c, c_len, r, "c", &f.c); !s.ok()) return s;
    if (Status s = CopyFloats(c_inv, c_inv_len, r, "c_inv", &f.c_inv);
        !s.ok()) {
      return s;
    }
    return allreduce->ar->PutFactor(layer, f);
  });
}

gift_status_t gift_allreduce_put_full_factor(gift_allreduce_t* allreduce,
                                             const char* layer, int64_t version,
                                             int64_t d_in, const float* t,
                                             size_t t_len, const float* t_inv,
                                             size_t t_inv_len) {
  return Guard(__func__, [&] {
    if (Status s = CheckFactorLayer(allreduce, layer, version, d_in); !s.ok()) {
      return s;
    }
    gift::GiftFactor f;
    f.version = version;
    f.kind = gift::GiftTransform::kFull;
    f.d_in = d_in;
    const int64_t n = Product(d_in, d_in);
    if (Status s = CopyFloats(t, t_len, n, "t", &f.t); !s.ok()) return s;
    if (Status s = CopyFloats(t_inv, t_inv_len, n, "t_inv", &f.t_inv);
        !s.ok()) {
      return s;
    }
    return allreduce->ar->PutFactor(layer, f);
  });
}

gift_status_t gift_allreduce_attach(gift_allreduce_t* allreduce,
                                    gift_attachment_t* attachment) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    return allreduce->ar->Attach(attachment != nullptr ? attachment->a
                                                       : nullptr);
  });
}

gift_status_t gift_allreduce_last_step(const gift_allreduce_t* allreduce,
                                       gift_step_info_t* info) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    gift_step_info_t full;
    std::memset(&full, 0, sizeof(full));
    full.step = -1;
    if (allreduce->has_last) {
      const gift::StepStats& s = allreduce->last;
      full.step = s.step;
      full.plan_epoch = s.plan_epoch;
      full.probe_step = s.probe_step ? 1 : 0;
      full.num_layers = static_cast<int32_t>(s.layers.size());
      full.nonfinite_layers = s.nonfinite_layers;
      for (const gift::LayerStats& l : s.layers) {
        full.gift_layers += l.path == gift::LayerPath::kGift;
      }
      full.bytes_euclid = s.bytes_euclid;
      full.bytes_gift = s.bytes_gift;
      full.bytes_control = s.bytes_control;
      full.transform_seconds = s.transform_seconds;
      full.seconds = s.seconds;
      full.audit_step = s.audit_step ? 1 : 0;
      full.bytes_audit = s.bytes_audit;
      full.audit_seconds = s.audit_seconds;
    } else {
      full.plan_epoch = allreduce->ar->current_epoch();
    }
    return FillSized(info, full);
  });
}

gift_status_t gift_allreduce_last_layer(const gift_allreduce_t* allreduce,
                                        size_t index, gift_layer_info_t* info) {
  return Guard(__func__, [&] {
    if (allreduce == nullptr) return Null("allreduce");
    if (info == nullptr) return Null("info");
    const size_t n = allreduce->has_last ? allreduce->last.layers.size() : 0;
    if (index >= n) {
      return Status(StatusCode::kOutOfRange,
                    "layer index " + std::to_string(index) +
                        " >= the last step's " + std::to_string(n) + " layers");
    }
    const gift::LayerStats& l = allreduce->last.layers[index];
    gift_layer_info_t full;
    std::memset(&full, 0, sizeof(full));
    full.name = l.name.c_str();
    full.path =
        l.path == gift::LayerPath::kGift ? GIFT_PATH_GIFT : GIFT_PATH_EUCLID;
    full.factor_version = l.factor_version;
    full.elements = l.elements;
    full.upper = l.upper;
    full.lower = l.lower;
    full.nonfinite = l.nonfinite;
    full.err_sq = l.err_sq;
    full.x_sq = l.x_sq;
    full.nonfinite_result = l.nonfinite_result ? 1 : 0;
    full.probed = l.probed ? 1 : 0;
    full.probe_euclid_rel_l2 = l.probe_euclid_rel_l2;
    full.probe_gift_rel_l2 = l.probe_gift_rel_l2;
    full.audited = l.audited ? 1 : 0;
    full.drift_audited = l.drift_audited ? 1 : 0;
    full.audit_rel_l2 = l.audit_rel_l2;
    full.audit_cosine = l.audit_cosine;
    full.audit_drift = l.audit_drift;
    full.drift_steps = l.drift_steps;
    return FillSized(info, full);
  });
}

int64_t gift_allreduce_current_epoch(const gift_allreduce_t* allreduce) {
  return allreduce != nullptr ? allreduce->ar->current_epoch() : 0;
}

int64_t gift_allreduce_steps(const gift_allreduce_t* allreduce) {
  return allreduce != nullptr ? allreduce->ar->steps() : 0;
}

void* gift_allreduce_stream(const gift_allreduce_t* allreduce) {
  return allreduce != nullptr ? allreduce->ar->stream() : nullptr;
}

// ---- Daemon attachment
// -----------------------------------------------------------

gift_attachment_options_t* gift_attachment_options_create(void) {
  return NewOrNull<gift_attachment_options_t>();
}

void gift_attachment_options_destroy(gift_attachment_options_t* options) {
  delete options;
}

gift_status_t gift_attachment_options_set_agent_socket(
    gift_attachment_options_t* options, const char* path) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    return CopyString(path, "path", &options->o.agent_socket);
  });
}

gift_status_t gift_attachment_options_set_job_id(
    gift_attachment_options_t* options, const char* job_id) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    return CopyString(job_id, "job_id", &options->o.job_id);
  });
}

gift_status_t gift_attachment_options_set_rank(
    gift_attachment_options_t* options, int rank) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.rank = rank;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_world_size(
    gift_attachment_options_t* options, int world_size) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.world_size = world_size;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_local_rank(
    gift_attachment_options_t* options, int local_rank) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.local_rank = local_rank;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_device_memory(
    gift_attachment_options_t* options, int enabled, int device) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.device_memory = enabled != 0;
    options->o.device = device;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_retry_interval_seconds(
    gift_attachment_options_t* options, double seconds) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.retry_interval_seconds = seconds;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_rpc_timeout_seconds(
    gift_attachment_options_t* options, double seconds) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.rpc_timeout_seconds = seconds;
    return Status();
  });
}

gift_status_t gift_attachment_options_set_staleness_limit(
    gift_attachment_options_t* options, int64_t steps) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    options->o.staleness_limit = steps;
    return Status();
  });
}

gift_status_t gift_attachment_create(const gift_attachment_options_t* options,
                                     const gift_plan_t* base,
                                     gift_attachment_t** out) {
  if (out != nullptr) *out = nullptr;
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (base == nullptr) return Null("base");
    if (out == nullptr) return Null("out");
    auto handle = std::make_unique<gift_attachment_t>();
    Status s =
        gift::DaemonAttachment::Create(options->o, base->plan, &handle->a);
    if (s.ok()) *out = handle.release();
    return s;
  });
}

void gift_attachment_destroy(gift_attachment_t* attachment) {
  delete attachment;
}

int gift_attachment_wants_sketch(const gift_attachment_t* attachment,
                                 const char* layer) {
  if (attachment == nullptr || layer == nullptr) return 0;
  try {
    return attachment->a->WantsSketch(layer) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

gift_status_t gift_attachment_sketch(gift_attachment_t* attachment,
                                     const char* layer,
                                     const float* activations, size_t count,
                                     int64_t rows, void* producer_stream) {
  return Guard(__func__, [&] {
    if (attachment == nullptr) return Null("attachment");
    if (layer == nullptr) return Null("layer");
    return attachment->a->Sketch(layer, activations, count, rows,
                                 producer_stream);
  });
}

void* gift_attachment_sketch_stream(const gift_attachment_t* attachment) {
  return attachment != nullptr ? attachment->a->sketch_stream() : nullptr;
}

gift_status_t gift_attachment_get_info(const gift_attachment_t* attachment,
                                       gift_attachment_info_t* info) {
  return Guard(__func__, [&] {
    if (attachment == nullptr) return Null("attachment");
    const gift::AttachmentStats s = attachment->a->stats();
    gift_attachment_info_t full;
    std::memset(&full, 0, sizeof(full));
    full.attached = s.attached ? 1 : 0;
    full.attaches = s.attaches;
    full.detaches = s.detaches;
    full.plans_applied = s.plans_applied;
    full.factors_received = s.factors_received;
    full.stale_drops = s.stale_drops;
    full.windows_closed = s.windows_closed;
    full.windows_skipped = s.windows_skipped;
    full.current_epoch = s.current_epoch;
    full.current_refresh_interval = s.current_refresh_interval;
    return FillSized(info, full);
  });
}
