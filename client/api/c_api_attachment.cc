// The C ABI of libgift (include/gift/c_api.h): attachment options and
// daemon attachments, over gift::DaemonAttachment
// (include/gift/daemon_attachment.h).
#include <cstring>
#include <memory>
#include <string>

#include "client/api/c_api_internal.h"
#include "gift/c_api.h"
#include "gift/daemon_attachment.h"
#include "gift/status.h"

using gift::Status;
using gift::capi::CopyString;
using gift::capi::FillSized;
using gift::capi::Guard;
using gift::capi::NewOrNull;
using gift::capi::Null;

// The definitions below have C linkage: gift/c_api.h declares them inside
// extern "C".

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
