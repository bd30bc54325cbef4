// gift::BucketPlan (include/gift/bucket_plan.h) over client::EpochPlan.
#include "gift/bucket_plan.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/api/internal.h"
#include "client/epoch_plan.h"
#include "kernels/wire_format.h"

namespace gift {
namespace {

// What client::EpochPlan::Create cannot see once the public values are
// converted: enum values outside their range (the internal enums are
// narrower) and shapes whose element count overflows int64.
Status CheckPublicLayer(const LayerSpec& l) {
  const std::string who = absl::StrCat("bucket plan layer '", l.name, "': ");
  const int path = static_cast<int>(l.path);
  const int transform = static_cast<int>(l.transform);
  const int format = static_cast<int>(l.format);
  if (path < 0 || path > 1 || transform < 0 || transform > 1 || format < 0 ||
      format > static_cast<int>(WireFormat::kMxfp4)) {
    return api::InvalidArgument(absl::StrCat(who, "unknown enum value (path ",
                                             path, ", transform ", transform,
                                             ", format ", format, ")"));
  }
  int64_t n = 1;
  for (int64_t d : l.shape) {
    if (d < 0) {
      return api::InvalidArgument(absl::StrCat(who, "negative dimension ", d));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return api::InvalidArgument(
          absl::StrCat(who, "the element count of the shape overflows"));
    }
    n *= d;
  }
  // A 4-bit layer's blocks run along its rows (kernels/wire_format.h).
  if (l.shape.size() == 2) {
    absl::Status fits = kernels::CheckFormatFitsShape(
        kernels::WireFormat::FromCode(format), l.shape[0], l.shape[1],
        /*two_d=*/true);
    if (!fits.ok()) {
      return api::InvalidArgument(absl::StrCat(who, fits.message()));
    }
  }
  return Status();
}

}  // namespace

Status BucketPlan::Create(int64_t epoch, int64_t bucket_elements,
                          std::vector<LayerSpec> layers, BucketPlan* out) {
  if (out == nullptr)
    return api::InvalidArgument("BucketPlan::Create: out is null");
  // A bucket is addressed in bytes by the callers: its floats must fit.
  if (bucket_elements > std::numeric_limits<int64_t>::max() /
                            static_cast<int64_t>(sizeof(float))) {
    return api::InvalidArgument(absl::StrCat(
        "bucket plan: bucket size ", bucket_elements, " floats is too large"));
  }
  std::vector<client::BucketLayer> internal;
  internal.reserve(layers.size());
  for (const LayerSpec& l : layers) {
    if (Status s = CheckPublicLayer(l); !s.ok()) return s;
    internal.push_back(api::ToInternal(l));
  }
  absl::StatusOr<client::EpochPlan> plan =
      client::EpochPlan::Create(epoch, bucket_elements, std::move(internal));
  if (!plan.ok()) return api::FromAbsl(plan.status());
  out->rep_ = std::make_shared<const Rep>(*std::move(plan), std::move(layers));
  return Status();
}

BucketPlan::BucketPlan() = default;
BucketPlan::~BucketPlan() = default;
BucketPlan::BucketPlan(const BucketPlan&) = default;
BucketPlan& BucketPlan::operator=(const BucketPlan&) = default;
BucketPlan::BucketPlan(BucketPlan&&) noexcept = default;
BucketPlan& BucketPlan::operator=(BucketPlan&&) noexcept = default;

bool BucketPlan::valid() const { return rep_ != nullptr; }

int64_t BucketPlan::epoch() const {
  return rep_ != nullptr ? rep_->plan.epoch() : 0;
}

int64_t BucketPlan::bucket_elements() const {
  return rep_ != nullptr ? rep_->plan.bucket_elements() : 0;
}

int64_t BucketPlan::communicated_elements() const {
  return rep_ != nullptr ? rep_->plan.communicated_elements() : 0;
}

const std::vector<LayerSpec>& BucketPlan::layers() const {
  static const std::vector<LayerSpec>* const kNone =
      new std::vector<LayerSpec>();
  return rep_ != nullptr ? rep_->layers : *kNone;
}

int BucketPlan::FindLayer(const std::string& name) const {
  return rep_ != nullptr ? rep_->plan.FindLayer(name) : -1;
}

uint64_t BucketPlan::fingerprint() const {
  return rep_ != nullptr ? rep_->plan.Fingerprint() : 0;
}

bool BucketPlan::SameLayout(const BucketPlan& other) const {
  if (rep_ == nullptr || other.rep_ == nullptr) return false;
  return rep_->plan.SameLayout(other.rep_->plan);
}

Status BucketPlan::WithGiftLayers(int64_t epoch,
                                  const std::vector<std::string>& gift_layers,
                                  BucketPlan* out) const {
  if (out == nullptr) {
    return api::InvalidArgument("BucketPlan::WithGiftLayers: out is null");
  }
  if (rep_ == nullptr) {
    return api::InvalidArgument("BucketPlan::WithGiftLayers: invalid plan");
  }
  std::vector<LayerSpec> layers = rep_->layers;
  for (LayerSpec& l : layers) l.path = LayerPath::kEuclid;
  for (const std::string& name : gift_layers) {
    const int i = rep_->plan.FindLayer(name);
    if (i < 0) {
      return api::InvalidArgument(absl::StrCat(
          "BucketPlan::WithGiftLayers: unknown layer '", name, "'"));
    }
    layers[i].path = LayerPath::kGift;
  }
  return Create(epoch, rep_->plan.bucket_elements(), std::move(layers), out);
}

}  // namespace gift
