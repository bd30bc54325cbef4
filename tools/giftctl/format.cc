#include "tools/giftctl/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/wire_format.h"
#include "proto/wire_format_proto.h"

namespace gift::giftctl {
namespace {

// Display columns of a UTF-8 string: one per code point ("×" is one).
size_t Width(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
}

std::string Duration(double seconds) {
  if (!(seconds >= 0)) return "-";
  int64_t s = static_cast<int64_t>(seconds);
  if (s < 60) return absl::StrFormat("%.1fs", seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm%02ds", s / 3600, s / 60 % 60, s % 60);
}

std::string Fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  return absl::StrFormat("%.*f", digits, v);
}

// The newest audit figure and its path, e.g. "0.0812 gift"; "-" for none.
std::string Audit(double v, const std::string& path) {
  if (path.empty() || std::isnan(v)) return "-";
  return absl::StrCat(Fixed(v, 4), " ", path);
}

// Which windows the ranks sketch: "every", "1/3 now" (a window of every
// third, this one sketched), "1/3 off", then "@node", the daemon that owns
// the windows, in a multi-node job; "-" when not a candidate.
std::string Sketch(const gift::v1::LayerStatus& l) {
  if (!l.candidate()) return "-";
  const std::string owner = l.owner().empty() ? "" : "@" + l.owner();
  if (l.sketch_period() <= 1) return "every" + owner;
  return absl::StrCat("1/", l.sketch_period(), l.sketched() ? " now" : " off",
                      owner);
}

std::vector<std::string> LayerRow(const gift::v1::LayerStatus& l) {
  const gift::v1::LayerSettings& s = l.settings();
  bool has_factor = l.factor_version() >= 0;
  return {
      l.name(),
      absl::StrCat(l.d_out(), "×", l.d_in()),
      l.selected() ? "yes" : "-",
      l.candidate() ? "yes" : "-",
      PinName(s.pin()),
      TransformName(s.transform()),
      s.rank() > 0 ? absl::StrCat(s.rank()) : "-",
      s.beta_auto()  ? absl::StrFormat("auto:%g", s.beta())
      : s.beta() > 0 ? absl::StrFormat("%g", s.beta())
                     : "-",
      FormatName(s.format()),
      Bytes(l.bytes_sent()),
      Fixed(l.vulnerability(), 4),
      Fixed(l.gain(), 3),
      has_factor ? absl::StrCat(l.factor_version()) : "-",
      has_factor ? Fixed(l.factor_age_steps(), 0) : "-",
      Sketch(l),
      Audit(l.audit_path() == "gift" ? l.audit_rel_l2_gift()
                                     : l.audit_rel_l2_euclid(),
            l.audit_path()),
      Audit(l.audit_path() == "gift" ? l.audit_drift_gift()
                                     : l.audit_drift_euclid(),
            l.audit_path()),
      absl::StrCat(l.reason(), l.format_reason().empty() ? "" : "; format ",
                   l.format_reason(), l.sketch_period() > 1 ? "; sketch: " : "",
                   l.sketch_period() > 1 ? l.sketch_reason() : "")};
}

}  // namespace

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], Width(row[i]));
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line.append(widths[i] - Width(row[i]) + 2, ' ');
      }
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

gift::v1::SelectionKind ProtoSelectionKind(daemon::SelectionKind kind) {
  switch (kind) {
    case daemon::SelectionKind::kTopK:
      return gift::v1::SELECTION_KIND_TOP_K;
    case daemon::SelectionKind::kElbow:
      return gift::v1::SELECTION_KIND_ELBOW;
    case daemon::SelectionKind::kThreshold:
      return gift::v1::SELECTION_KIND_THRESHOLD;
  }
  return gift::v1::SELECTION_KIND_UNSPECIFIED;
}

// The schema's spelling (daemon/selection_policy_schema.h).
std::string KindName(gift::v1::SelectionKind kind) {
  for (const daemon::SelectionKindSpelling& k : daemon::kSelectionKinds) {
    if (ProtoSelectionKind(k.kind) == kind) return k.name;
  }
  return "-";
}

std::string TransformName(gift::v1::Transform transform) {
  switch (transform) {
    case gift::v1::TRANSFORM_LOWRANK:
      return "lowrank";
    case gift::v1::TRANSFORM_FULL:
      return "full";
    default:
      return "-";
  }
}

std::string FormatName(gift::v1::WireFormat format) {
  absl::StatusOr<kernels::WireFormat> f = FromProto(format);
  return f.ok() ? kernels::WireFormatName(*f) : "-";
}

std::string Bytes(int64_t bytes) {
  if (bytes <= 0) return "-";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B")
                : absl::StrFormat("%.1f %s", v, kUnits[u]);
}

std::string PinName(gift::v1::Pin pin) {
  switch (pin) {
    case gift::v1::PIN_AUTO:
      return "auto";
    case gift::v1::PIN_IN:
      return "in";
    case gift::v1::PIN_OUT:
      return "out";
    default:
      return "-";
  }
}

std::string FormatPolicy(const gift::v1::SelectionPolicy& p) {
  return absl::StrFormat(
      "%s k=%d k_4bit=%d threshold=%g hysteresis=%g window=%d max_layers=%d "
      "max_flops=%g min_gain=%g entry_gain=%g entry_probes=%d gain_hold=%g "
      "warmup=%d plan_interval=%d audit_window=%d audit_margin=%g",
      KindName(p.kind()), p.top_k(), p.top_k_4bit(), p.threshold(),
      p.hysteresis(), p.window_steps(), p.max_layers(), p.max_extra_flops(),
      p.min_gain(), p.entry_gain(), p.entry_probes(), p.gain_hold(),
      p.warmup_steps(), p.plan_interval_steps(), p.audit_window(),
      p.audit_margin());
}

// With an elected leader: the term, the coordinator and the changes seen.
static std::string FormatElection(const gift::v1::PeerStatus& p) {
  if (p.coordinator().empty()) {
    return p.term() > 0 ? absl::StrFormat(", term %d", p.term()) : "";
  }
  return absl::StrFormat(", term %d (elected on %s; %d leader changes seen)",
                         p.term(), p.coordinator(), p.leader_changes());
}

static std::string FormatPeerRole(const gift::v1::PeerStatus& p) {
  switch (p.role()) {
    case gift::v1::PEER_ROLE_LEADER:
      return absl::StrFormat("leader of job %s at %s", p.job_id(),
                             p.leader_address());
    case gift::v1::PEER_ROLE_FOLLOWER: {
      if (p.leader_address().empty()) {
        return absl::StrFormat("follower in job %s, no leader known",
                               p.job_id());
      }
      std::string out = absl::StrFormat("follower of %s in job %s, ",
                                        p.leader_address(), p.job_id());
      if (!p.connected()) {
        absl::StrAppend(&out, "NOT connected");
      } else {
        absl::StrAppend(&out, "connected to leader instance ",
                        p.leader_instance());
      }
      if (p.seconds_since_leader() >= 0) {
        absl::StrAppend(&out, absl::StrFormat(" (answered %.1f s ago)",
                                              p.seconds_since_leader()));
      } else {
        absl::StrAppend(&out, " (never answered)");
      }
      return out;
    }
    case gift::v1::PEER_ROLE_STANDALONE:
      return "standalone (no peers)";
    default:
      return "-";
  }
}

std::string FormatPeer(const gift::v1::PeerStatus& p) {
  if (p.role() == gift::v1::PEER_ROLE_STANDALONE) return FormatPeerRole(p);
  return FormatPeerRole(p) + FormatElection(p);
}

std::string FormatMember(const gift::v1::PeerMemberStatus& m) {
  std::string out = absl::StrFormat("%s at %s (instance %s)", m.node(),
                                    m.address(), m.instance());
  if (m.self()) {
    absl::StrAppend(&out, ", this daemon");
  } else if (m.seconds_since_seen() >= 0) {
    absl::StrAppend(
        &out, absl::StrFormat(", seen %.1f s ago", m.seconds_since_seen()));
  }
  return out;
}

std::string FormatStatus(const gift::v1::GetStatusResponse& s) {
  std::vector<std::vector<std::string>> rows = {
      {"node", s.node()},
      {"daemon_instance", s.daemon_instance()},
      {"version", s.version()},
      {"uptime", Duration(s.uptime_seconds())},
      {"job_id", s.job_id().empty() ? "-" : s.job_id()},
      {"ranks",
       absl::StrFormat("%d/%d registered, %d reaped", s.ranks_registered(),
                       s.world_size(), s.ranks_reaped())},
      {"step", absl::StrCat(s.step())},
      {"plan_epoch", absl::StrCat(s.plan_epoch())},
      {"refresh_interval", absl::StrCat(s.refresh_interval(), " steps")},
      {"sketch_stride",
       absl::StrCat("every ", std::max(1, s.sketch_stride()),
                    s.sketch_stride() > 1 ? " steps" : " step")},
      {"audit_interval", s.audit_interval() > 0
                             ? absl::StrCat(s.audit_interval(), " steps")
                             : std::string("off")},
      {"rank", absl::StrCat(s.rank())},
      {"policy", FormatPolicy(s.policy())},
      {"layers",
       absl::StrFormat("%d (%d selected)", s.layers(), s.selected_layers())},
      {"refreshes", absl::StrCat(s.refreshes())},
      {"peer", FormatPeer(s.peer())},
  };
  for (const gift::v1::PeerMemberStatus& m : s.peer().members()) {
    rows.push_back({"member", FormatMember(m)});
  }
  return FormatTable(rows);
}

std::string FormatLayers(
    const google::protobuf::RepeatedPtrField<gift::v1::LayerStatus>& layers) {
  std::vector<std::vector<std::string>> rows = {
      {"LAYER", "SHAPE", "SEL", "CAND", "PIN", "TRANSFORM", "R", "BETA", "FMT",
       "BYTES", "VULN", "GAIN", "FACTOR", "AGE", "SKETCH", "AUDIT", "DRIFT",
       "REASON"}};
  for (const gift::v1::LayerStatus& layer : layers) {
    rows.push_back(LayerRow(layer));
  }
  return FormatTable(rows);
}

std::string FormatTelemetry(const gift::v1::TelemetryUpdate& u) {
  const gift::v1::GetStatusResponse& s = u.status();
  return absl::StrCat(
      absl::StrFormat("step %d  plan_epoch %d  ranks %d/%d  layers %d "
                      "(%d selected)  refreshes %d\n",
                      s.step(), s.plan_epoch(), s.ranks_registered(),
                      s.world_size(), s.layers(), s.selected_layers(),
                      s.refreshes()),
      FormatLayers(u.layers()));
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a well-formed message only fails on invalid UTF-8 in a string
  // field; report it in place of the output rather than print nothing.
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::StrCat("{\"error\": \"",
                        absl::CEscape(std::string(status.message())), "\"}");
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace gift::giftctl
