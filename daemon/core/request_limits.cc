#include "daemon/core/request_limits.h"

#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/log.h"
#include "shm/layout.h"

namespace gift::daemon {
namespace {

bool IdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("._-:@+=/").find(c) != absl::string_view::npos;
}

bool Printable(char c) { return c >= 0x20 && c <= 0x7e; }

template <typename Pred>
bool All(absl::string_view s, Pred p) {
  for (char c : s) {
    if (!p(c)) return false;
  }
  return true;
}

absl::Status Range(const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s %d is outside [%d, %d]", what, v, lo, hi));
}

}  // namespace

absl::Status CheckLayerShapes(
    const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers,
    const Limits& limits) {
  if (layers.size() > limits.max_layers) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d layers declared; max_layers is %d", layers.size(),
                        limits.max_layers));
  }
  std::set<absl::string_view> names;
  for (const v1::LayerShape& l : layers) {
    RETURN_IF_ERROR(CheckLayerName(l.name(), limits));
    if (!names.insert(l.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer name '%s' is repeated", Clip(l.name())));
    }
    if (l.d_out() < 1 || l.d_out() > limits.max_layer_d_out || l.d_in() < 1 ||
        l.d_in() > limits.max_layer_d_in) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %s has shape %d x %d; d_out must be in [1, "
          "max_layer_d_out %d] and d_in in [1, max_layer_d_in %d]",
          l.name(), l.d_out(), l.d_in(), limits.max_layer_d_out,
          limits.max_layer_d_in));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckReattach(const v1::RegisterRequest& r, const Limits& limits) {
  RETURN_IF_ERROR(CheckCount("last_plan_epoch", r.last_plan_epoch()));
  RETURN_IF_ERROR(CheckCount("step", r.step()));
  if (r.last_factor_version_size() > r.layers_size() ||
      r.resumed_gift_layers_size() > r.layers_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d factor versions and %d resumed layers for %d layers",
        r.last_factor_version_size(), r.resumed_gift_layers_size(),
        r.layers_size()));
  }
  for (const auto& [name, version] : r.last_factor_version()) {
    RETURN_IF_ERROR(CheckLayerName(name, limits));
    RETURN_IF_ERROR(CheckCount("last_factor_version", version, -1));
  }
  for (const std::string& name : r.resumed_gift_layers()) {
    RETURN_IF_ERROR(CheckLayerName(name, limits));
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const v1::RegisterRequest& r) {
  if (r.memory() != v1::MEMORY_KIND_HOST &&
      r.memory() != v1::MEMORY_KIND_DEVICE) {
    return absl::InvalidArgumentError("memory kind must be HOST or DEVICE");
  }
  const std::string& bus = r.device_pci_bus_id();
  if (bus.size() > kMaxPciBusIdBytes || !All(bus, [](char c) {
        return absl::ascii_isxdigit(static_cast<unsigned char>(c)) ||
               c == ':' || c == '.';
      })) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device_pci_bus_id '%s' is not a PCI bus id (at most "
                        "%d hex digits, ':' and '.')",
                        Clip(bus), kMaxPciBusIdBytes));
  }
  if (r.memory() == v1::MEMORY_KIND_DEVICE) {
    RETURN_IF_ERROR(Range("device", r.device(), 0, 4095));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJobId(absl::string_view job_id, const Limits& limits) {
  if (job_id.empty() ||
      job_id.size() > static_cast<size_t>(limits.max_job_id_bytes) ||
      !All(job_id, IdChar)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "job_id '%s' must be 1 to max_job_id_bytes %d bytes of ASCII "
        "letters, digits and . _ - : @ + = / (it labels every metric series)",
        Clip(job_id), limits.max_job_id_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckLayerName(absl::string_view name, const Limits& limits) {
  if (name.empty() ||
      name.size() > static_cast<size_t>(limits.max_layer_name_bytes) ||
      !All(name, Printable)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer name '%s' must be 1 to max_layer_name_bytes %d bytes of "
        "printable ASCII",
        Clip(name), limits.max_layer_name_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(const char* what, int64_t v, int64_t lo) {
  return Range(what, v, lo, shm::kMaxStep);
}

absl::Status CheckRegisterRequest(const v1::RegisterRequest& r,
                                  const Limits& limits) {
  RETURN_IF_ERROR(CheckJobId(r.job_id(), limits));
  if (r.world_size() < 1 || r.world_size() > kMaxWorldSize || r.rank() < 0 ||
      r.rank() >= r.world_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d of world size %d is out of range (world size at most %d)",
        r.rank(), r.world_size(), kMaxWorldSize));
  }
  RETURN_IF_ERROR(Range("local_rank", r.local_rank(), 0, kMaxWorldSize - 1));
  RETURN_IF_ERROR(Range("pid", r.pid(), 1, kMaxPid));
  if (r.layout_version() != shm::kLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shared memory layout version %d, giftd speaks %d: upgrade the "
        "client library or giftd so that they match",
        r.layout_version(), shm::kLayoutVersion));
  }
  RETURN_IF_ERROR(CheckDevice(r));
  RETURN_IF_ERROR(CheckLayerShapes(r.layers(), limits));
  return CheckReattach(r, limits);
}

absl::StatusOr<int64_t> SessionShmBytes(
    const std::vector<shm::LayerDecl>& layers, const std::vector<bool>& full,
    const Limits& limits) {
  auto too_much = [&limits](const char* what) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "a rank with these layers needs %s than max_rank_shm_bytes %d bytes "
        "of shared memory",
        what, limits.max_rank_shm_bytes));
  };
  uint64_t total = shm::ControlBlockBytes(static_cast<uint32_t>(layers.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    const shm::LayerGeometry g = shm::GeometryOf(layers[i]);
    uint64_t bytes =
        shm::LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap).bytes;
    if (full[i] &&
        __builtin_add_overflow(
            bytes, shm::FullRegionLayout::Compute(g.d_in).bytes, &bytes)) {
      return too_much("more");
    }
    if (__builtin_add_overflow(total, bytes, &total)) return too_much("more");
  }
  if (total > static_cast<uint64_t>(limits.max_rank_shm_bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "a rank with these layers needs %d bytes of shared memory; "
        "max_rank_shm_bytes is %d",
        total, limits.max_rank_shm_bytes));
  }
  return static_cast<int64_t>(total);
}

}  // namespace gift::daemon
