// The C ABI of libgift (include/gift/c_api.h): plan builders and bucket
// plans, over gift::BucketPlan (include/gift/bucket_plan.h).
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "client/api/c_api_internal.h"
#include "gift/bucket_plan.h"
#include "gift/c_api.h"
#include "gift/status.h"

using gift::Status;
using gift::StatusCode;
using gift::capi::Guard;
using gift::capi::Invalid;
using gift::capi::NewOrNull;
using gift::capi::Null;

// The C values are the C++ ones (both stable).
static_assert(GIFT_FORMAT_E4M3 == static_cast<int>(gift::WireFormat::kE4M3));
static_assert(GIFT_FORMAT_E5M2 == static_cast<int>(gift::WireFormat::kE5M2));
static_assert(GIFT_FORMAT_NVFP4 == static_cast<int>(gift::WireFormat::kNvfp4));
static_assert(GIFT_FORMAT_MXFP4 == static_cast<int>(gift::WireFormat::kMxfp4));

namespace {

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
                                           gift_wire_format_t format,
                                           int64_t block_size) {
  return Guard(__func__, [&] {
    gift::LayerSpec* l = nullptr;
    if (Status s = LayerOf(builder, layer, &l); !s.ok()) return s;
    const int f = static_cast<int>(format);
    if (f < GIFT_FORMAT_E4M3 || f > GIFT_FORMAT_MXFP4) {
      return Invalid("unknown wire format " + std::to_string(f) +
                     " (GIFT_FORMAT_E4M3, _E5M2, _NVFP4 or _MXFP4)");
    }
    if (block_size < 0) {
      return Invalid("negative block size " + std::to_string(block_size));
    }
    l->format = static_cast<gift::WireFormat>(f);
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

gift_status_t gift_plan_layer_format(const gift_plan_t* plan, const char* layer,
                                     gift_wire_format_t* out) {
  return Guard(__func__, [&] {
    if (plan == nullptr) return Null("plan");
    if (layer == nullptr) return Null("layer");
    if (out == nullptr) return Null("out");
    const int i = plan->plan.FindLayer(layer);
    if (i < 0) {
      return Status(StatusCode::kNotFound,
                    std::string("the plan has no layer '") + layer + "'");
    }
    *out = static_cast<gift_wire_format_t>(plan->plan.layers()[i].format);
    return Status();
  });
}
