#include "client/epoch_plan.h"

#include <cinttypes>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// Canonical little-endian serialisation, the input of the fingerprint.
class Serializer {
 public:
  void Int(int64_t v) {
    uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>(u >> 8 * i));
  }
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

uint64_t ComputeFingerprint(int64_t epoch, int64_t bucket_elements,
                            const std::vector<BucketLayer>& layers) {
  Serializer s;
  s.Str("gift.bucket_plan.v1");
  s.Int(epoch);
  s.Int(bucket_elements);
  s.Int(static_cast<int64_t>(layers.size()));
  for (const BucketLayer& l : layers) {
    s.Str(l.name);
    s.Int(static_cast<int64_t>(l.shape.size()));
    for (int64_t d : l.shape) s.Int(d);
    s.Int(l.offset);
    s.Int(static_cast<int64_t>(l.path));
    s.Int(static_cast<int64_t>(l.transform));
    s.Int(l.format.code());
    s.Int(l.block_size);
  }
  return Fnv1a64(s.bytes().data(), s.bytes().size());
}

absl::Status CheckLayer(const BucketLayer& l, int64_t bucket_elements) {
  const std::string who = absl::StrCat("bucket plan layer '", l.name, "': ");
  if (l.shape.empty() || l.shape.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "shape must have 1 or 2 dims, has ", l.shape.size()));
  }
  for (int64_t d : l.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, "negative dimension ", d));
    }
  }
  if (l.offset < 0 || l.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "negative offset or block size"));
  }
  if (l.size() > bucket_elements - l.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "elements [", l.offset, ", ", l.offset + l.size(),
                     ") end past the bucket (", bucket_elements, ")"));
  }
  if (l.path == LayerPath::kGift && l.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "the GIFT path needs a 2-D (d_out x d_in) layer"));
  }
  if (!l.format.valid() || static_cast<int>(l.path) > 1 ||
      static_cast<int>(l.transform) > 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, "unknown enum value"));
  }
  if (l.format.is_fp4() && l.block_size != 0 &&
      l.block_size != kernels::Fp4BlockSize(l.format.fp4())) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, kernels::WireFormatName(l.format), " has blocks of ",
                     kernels::Fp4BlockSize(l.format.fp4()),
                     " elements (block size ", l.block_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* LayerPathName(LayerPath path) {
  return path == LayerPath::kGift ? "gift" : "euclid";
}

int64_t BucketLayer::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return shape.empty() ? 0 : n;
}

uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

absl::StatusOr<EpochPlan> EpochPlan::Create(int64_t epoch,
                                            int64_t bucket_elements,
                                            std::vector<BucketLayer> layers) {
  if (epoch < 0 || bucket_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket plan: negative epoch (", epoch,
                     ") or bucket size (", bucket_elements, ")"));
  }
  absl::flat_hash_set<std::string> names;
  int64_t end = 0;
  for (const BucketLayer& l : layers) {
    if (l.name.empty()) {
      return absl::InvalidArgumentError("bucket plan: a layer has no name");
    }
    if (!names.insert(l.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket plan: duplicate layer name '", l.name, "'"));
    }
    RETURN_IF_ERROR(CheckLayer(l, bucket_elements));
    if (l.offset < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket plan layer '", l.name, "': offset ", l.offset,
          " overlaps the previous layer or is out of order (previous ends at ",
          end, ")"));
    }
    end = l.offset + l.size();
  }
  EpochPlan plan;
  plan.epoch_ = epoch;
  plan.bucket_elements_ = bucket_elements;
  plan.fingerprint_ = ComputeFingerprint(epoch, bucket_elements, layers);
  plan.layers_ = std::move(layers);
  for (const BucketLayer& l : plan.layers_) {
    plan.packed_offsets_.push_back(plan.communicated_);
    plan.communicated_ += l.size();
  }
  return plan;
}

int EpochPlan::FindLayer(const std::string& name) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool EpochPlan::has_gift_layers() const {
  for (const BucketLayer& l : layers_) {
    if (l.path == LayerPath::kGift) return true;
  }
  return false;
}

bool EpochPlan::SameLayout(const EpochPlan& other) const {
  if (bucket_elements_ != other.bucket_elements_ ||
      layers_.size() != other.layers_.size()) {
    return false;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const BucketLayer &a = layers_[i], &b = other.layers_[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset) {
      return false;
    }
  }
  return true;
}

absl::Status CheckPlanAcrossRanks(Transport& comm, const EpochPlan& plan) {
  // MIN of [hi, lo, -hi, -lo] (32-bit halves, so negation cannot overflow)
  // yields the minimum and the maximum in one call.
  const uint64_t f = plan.Fingerprint();
  const int64_t hi = static_cast<int64_t>(f >> 32);
  const int64_t lo = static_cast<int64_t>(f & 0xFFFFFFFFu);
  int64_t v[4] = {hi, lo, -hi, -lo};
  RETURN_IF_ERROR(comm.AllReduce(v, v, 4, DataType::kInt64, ReduceOp::kMin));
  if (v[0] == -v[2] && v[1] == -v[3] && v[0] == hi && v[1] == lo) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "bucket plan mismatch across ranks (this rank's fingerprint %016" PRIx64
      ", epoch %d, %d layers, rank %d of %d): every rank must build the same "
      "bucket plan",
      f, plan.epoch(), plan.layers().size(), comm.rank(), comm.world_size()));
}

}  // namespace gift::client
