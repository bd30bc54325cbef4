// The checks of what a rank or an operator sends giftd over gRPC that need
// no daemon state, against the limits of limits.h: ids and names (length
// and charset: they become metric labels and log text), the numbers of a
// Register or Heartbeat request, and the shared memory a session would
// take. Daemon::Register runs them before it allocates anything; the
// errors name the limit and the value (strings clipped, log.h).
//
//   RETURN_IF_ERROR(CheckRegisterRequest(request, config.limits));
//   ASSIGN_OR_RETURN(int64_t bytes, SessionShmBytes(decls, full));
//
// Thread safety: pure functions.
#ifndef GIFT_DAEMON_CORE_REQUEST_LIMITS_H_
#define GIFT_DAEMON_CORE_REQUEST_LIMITS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/limits.h"
#include "gift/v1/agent.pb.h"
#include "shm/protocol.h"

namespace gift::daemon {

// INVALID_ARGUMENT unless 1..max_job_id_bytes of ASCII letters, digits and
// . _ - : @ + = /.
absl::Status CheckJobId(absl::string_view job_id, const Limits& limits);
// INVALID_ARGUMENT unless 1..max_layer_name_bytes of printable ASCII.
absl::Status CheckLayerName(absl::string_view name, const Limits& limits);
// A step, epoch or version a rank reports: INVALID_ARGUMENT unless in
// [lo, shm::kMaxStep].
absl::Status CheckCount(const char* what, int64_t v, int64_t lo = 0);

// A rank's (or a follower's) layer list: at most max_layers layers
// (RESOURCE_EXHAUSTED) with unique valid names and 1 <= d_out <=
// max_layer_d_out, 1 <= d_in <= max_layer_d_in.
absl::Status CheckLayerShapes(
    const google::protobuf::RepeatedPtrField<v1::LayerShape>& layers,
    const Limits& limits);

// Register without the daemon's state: the job id; rank, world size,
// local rank and pid in range; layout version (FAILED_PRECONDITION) and
// memory kind; at most max_layers layers (RESOURCE_EXHAUSTED) with unique
// valid names and 1 <= d_out <= max_layer_d_out, 1 <= d_in <=
// max_layer_d_in; the device fields; the re-attachment fields in range.
absl::Status CheckRegisterRequest(const v1::RegisterRequest& r,
                                  const Limits& limits);

// Bytes of shared memory of a session with these layers (control block,
// data regions, and a full region for each layer with full[i]), or
// RESOURCE_EXHAUSTED when the sum passes max_rank_shm_bytes (named) or
// overflows. REQUIRES: full.size() == layers.size(); each layer valid for
// shm::GeometryOf.
absl::StatusOr<int64_t> SessionShmBytes(
    const std::vector<shm::LayerDecl>& layers, const std::vector<bool>& full,
    const Limits& limits);

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_REQUEST_LIMITS_H_
