// The C ABI of libgift (include/gift/c_api.h): allreduce options and
// quantized allreduces, over gift::QuantizedAllReduce
// (include/gift/allreduce.h).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/api/c_api_internal.h"
#include "gift/allreduce.h"
#include "gift/bucket_plan.h"
#include "gift/c_api.h"
#include "gift/status.h"

using gift::Status;
using gift::StatusCode;
using gift::capi::FillSized;
using gift::capi::Guard;
using gift::capi::Invalid;
using gift::capi::NewOrNull;
using gift::capi::Null;

// The definitions below have C linkage: gift/c_api.h declares them inside
// extern "C".

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

gift_status_t gift_allreduce_options_set_euclid_error_feedback(
    gift_allreduce_options_t* options, gift_euclid_feedback_t feedback) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    const int f = static_cast<int>(feedback);
    if (f < GIFT_EUCLID_FEEDBACK_AUTO || f > GIFT_EUCLID_FEEDBACK_ON) {
      return Invalid("unknown Euclidean error feedback " + std::to_string(f));
    }
    options->o.euclid_error_feedback = static_cast<gift::EuclidFeedback>(f);
    return Status();
  });
}

gift_status_t gift_allreduce_options_set_owner_release_cap(
    gift_allreduce_options_t* options, float cap) {
  return Guard(__func__, [&] {
    if (options == nullptr) return Null("options");
    if (!(cap >= 0) || !std::isfinite(cap)) {
      return Invalid("owner release cap must be finite and >= 0, is " +
                     std::to_string(cap));
    }
    options->o.owner_release_cap = cap;
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
