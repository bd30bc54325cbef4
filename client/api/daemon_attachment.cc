// gift::DaemonAttachment (include/gift/daemon_attachment.h) over
// client::GiftdConnection.
#include "gift/daemon_attachment.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/api/internal.h"
#include "client/giftd_connection.h"

namespace gift {
namespace {

bool PositiveFinite(double seconds) {
  return seconds > 0 && std::isfinite(seconds);
}

}  // namespace

Status DaemonAttachment::Create(const AttachmentOptions& options,
                                const BucketPlan& base,
                                std::shared_ptr<DaemonAttachment>* out) {
  if (out == nullptr) {
    return api::InvalidArgument("DaemonAttachment::Create: out is null");
  }
  out->reset();
  if (!base.valid()) {
    return api::InvalidArgument("DaemonAttachment::Create: invalid plan");
  }
  if (!PositiveFinite(options.retry_interval_seconds) ||
      !PositiveFinite(options.rpc_timeout_seconds) ||
      options.staleness_limit < 1) {
    return api::InvalidArgument(
        absl::StrCat("DaemonAttachment::Create: retry_interval_seconds (",
                     options.retry_interval_seconds,
                     ") and rpc_timeout_seconds (", options.rpc_timeout_seconds,
                     ") must be finite and > 0, staleness_limit (",
                     options.staleness_limit, ") >= 1"));
  }
  if (options.local_rank < 0 || options.device < 0) {
    return api::InvalidArgument(
        absl::StrCat("DaemonAttachment::Create: negative local_rank (",
                     options.local_rank, ") or device (", options.device, ")"));
  }
  if (Status s = api::CheckCpu(); !s.ok()) return s;
  client::ConnectionOptions o;
  o.agent_socket = options.agent_socket;
  o.job_id = options.job_id;
  o.rank = options.rank;
  o.world_size = options.world_size;
  o.local_rank = options.local_rank;
  o.device_memory = options.device_memory;
  o.device = options.device;
  o.retry_interval = absl::Seconds(options.retry_interval_seconds);
  o.rpc_timeout = absl::Seconds(options.rpc_timeout_seconds);
  o.staleness_limit = options.staleness_limit;
  absl::StatusOr<std::unique_ptr<client::GiftdConnection>> att =
      client::GiftdConnection::Create(o, base.rep_->plan);
  if (!att.ok()) return api::FromAbsl(att.status());
  auto rep = std::make_unique<Rep>();
  rep->base = base;
  rep->attachment = *std::move(att);
  out->reset(new DaemonAttachment(std::move(rep)));
  return Status();
}

DaemonAttachment::DaemonAttachment(std::unique_ptr<Rep> rep)
    : rep_(std::move(rep)) {}

DaemonAttachment::~DaemonAttachment() = default;

bool DaemonAttachment::WantsSketch(const std::string& layer) const {
  return rep_->attachment->WantsSketch(layer);
}

Status DaemonAttachment::Sketch(const std::string& layer,
                                const float* activations, size_t count,
                                int64_t rows, void* producer_stream) {
  const int i = rep_->base.FindLayer(layer);
  if (i < 0 || rep_->base.layers()[i].shape.size() != 2) {
    return api::InvalidArgument(
        absl::StrCat("DaemonAttachment::Sketch: '", layer,
                     "' is not a 2-D layer of the base plan"));
  }
  if (activations == nullptr) {
    return api::InvalidArgument(
        "DaemonAttachment::Sketch: activations is null");
  }
  const int64_t d_in = rep_->base.layers()[i].shape[1];
  if (rows < 1 ||
      (d_in > 0 && rows > std::numeric_limits<int64_t>::max() / d_in) ||
      count != static_cast<uint64_t>(rows * d_in)) {
    return api::InvalidArgument(
        absl::StrCat("DaemonAttachment::Sketch '", layer, "': ", count,
                     " floats are not rows (", rows, ") x d_in (", d_in, ")"));
  }
  return api::FromAbsl(
      rep_->attachment->Sketch(layer, activations, rows, producer_stream));
}

void* DaemonAttachment::sketch_stream() const {
  return rep_->attachment->sketch_stream();
}

const BucketPlan& DaemonAttachment::base_plan() const { return rep_->base; }

AttachmentStats DaemonAttachment::stats() const {
  const client::ConnectionStats s = rep_->attachment->stats();
  AttachmentStats o;
  o.attached = s.attached;
  o.attaches = s.attaches;
  o.detaches = s.detaches;
  o.plans_applied = s.plans_applied;
  o.factors_received = s.factors_received;
  o.stale_drops = s.stale_drops;
  o.windows_closed = s.windows_closed;
  o.windows_skipped = s.windows_skipped;
  o.current_epoch = s.current_epoch;
  o.current_refresh_interval = s.current_refresh_interval;
  o.daemon_instance = s.daemon_instance;
  o.last_error = s.last_error;
  return o;
}

}  // namespace gift
