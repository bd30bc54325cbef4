// How giftctl prints Control responses: aligned human-readable tables, or
// JSON with the proto field names. Pure functions of the protos, so they are
// unit-tested without a daemon.
//
//   std::cout << FormatLayers(response.layers());
//   std::cout << ToJson(response, /*pretty=*/true) << "\n";
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_GIFTCTL_FORMAT_H_
#define GIFT_TOOLS_GIFTCTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/selection_policy_schema.h"
#include "gift/v1/control.pb.h"
#include "gift/v1/types.pb.h"

namespace gift::giftctl {

// Rows of cells as columns padded to the widest cell (UTF-8 aware); the
// last column is not padded. Every line ends in '\n'.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// "top-k", "lowrank", "e4m3", "in", ...; "-" for UNSPECIFIED.
std::string KindName(gift::v1::SelectionKind kind);
// The proto value of a kind of the selection policy's schema.
gift::v1::SelectionKind ProtoSelectionKind(daemon::SelectionKind kind);
std::string TransformName(gift::v1::Transform transform);
// "e4m3", "e5m2", "nvfp4", "mxfp4" (kernels::WireFormatName); "-" for
// UNSPECIFIED or an unknown value.
std::string FormatName(gift::v1::WireFormat format);
// "-" for 0, "512 B", "1.5 KiB", "3.2 MiB", ... (binary units).
std::string Bytes(int64_t bytes);
std::string PinName(gift::v1::Pin pin);

// One line: "top-k k=8 hysteresis=0.1 window=50 ...".
std::string FormatPolicy(const gift::v1::SelectionPolicy& policy);
// "leader of job J at ADDR", "follower of ADDR in job J, connected to
// leader instance I (answered 0.4 s ago)", "standalone (no peers)".
std::string FormatPeer(const gift::v1::PeerStatus& peer);
// Key/value lines; the peer role, then one "member" line per job member.
std::string FormatStatus(const gift::v1::GetStatusResponse& status);
// A header and one row per layer.
std::string FormatLayers(
    const google::protobuf::RepeatedPtrField<gift::v1::LayerStatus>& layers);
// A status summary line, then the layers table.
std::string FormatTelemetry(const gift::v1::TelemetryUpdate& update);

// The message as JSON with proto field names and every field (zeros too);
// `pretty` indents, otherwise one line.
std::string ToJson(const google::protobuf::Message& message, bool pretty);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_FORMAT_H_
