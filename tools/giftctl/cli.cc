// giftctl's grammar. Global options are taken out wherever they stand; what
// remains is the command, its positional arguments and its options, which
// each command's parser consumes; anything left over is a usage error.
#include "tools/giftctl/cli.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/limits.h"
#include "daemon/selection_policy_schema.h"
#include "kernels/wire_format.h"
#include "proto/wire_format_proto.h"
#include "tools/giftctl/format.h"

namespace gift::giftctl {

const char kUsageLine[] =
    "usage: giftctl [--address HOST:PORT] [--token-file F] [--tls-ca F] "
    "[--json] [--timeout S] COMMAND [ARGS]\n";

const char kUsage[] =
    "usage: giftctl [--address HOST:PORT] [--token-file F] [--tls-ca F] "
    "[--json] [--timeout S] COMMAND [ARGS]\n"
    "\n"
    "Operator client of giftd's Control service.\n"
    "\n"
    "Global options:\n"
    "  --address HOST:PORT  Control address (default 127.0.0.1:50151, or\n"
    "                       $GIFT_CONTROL_ADDRESS)\n"
    "  --token-file F       send the token in F as 'authorization: Bearer'\n"
    "  --tls-ca F           use TLS, trusting the CA certificates in F\n"
    "  --json               print responses as JSON (proto field names)\n"
    "  --timeout S          seconds per call, in (0, 86400] (default 5)\n"
    "\n"
    "Commands:\n"
    "  status                     daemon status\n"
    "  layers                     every layer's selection and factor state\n"
    "  set-interval K             factor refresh interval, steps\n"
    "  set-rank R                 factor rank\n"
    "  set-audit-interval N       steps between audit steps (0 = none)\n"
    "  pin LAYER                  always on the GIFT path\n"
    "  unpin LAYER                let the selector decide\n"
    "  pin-out LAYER              never on the GIFT path\n"
    "  layer LAYER [--transform lowrank|full] [--rank R] [--beta B|auto]\n"
    "              [--format e4m3|e5m2|nvfp4|mxfp4]\n"
    "                             change (or show) one layer's settings\n"
    "  policy [--kind top-k|elbow|threshold] [--top-k N] [--top-k-4bit N]\n"
    "         [--threshold X] [--hysteresis H] [--window N] [--max-layers N]\n"
    "         [--max-flops F]\n"
    "         [--min-gain G] [--entry-gain G] [--entry-probes N]\n"
    "         [--gain-hold F] [--warmup N] [--plan-interval N]\n"
    "         [--audit-window N] [--audit-margin M]\n"
    "                             change (or show) the selection policy\n"
    "  refresh [LAYER]            refresh factors now (default: every\n"
    "                             candidate layer)\n"
    "  watch [--interval MS] [--count N]\n"
    "                             print telemetry until Ctrl-C or N updates\n"
    "  health [--service NAME]    gRPC health check (default: the whole\n"
    "                             server); exit 0 when SERVING, else 1\n"
    "\n"
    "Exit status: 0 success, 1 call failed, 2 usage error.\n";

namespace {

// WatchTelemetryRequest.interval_ms: 0 (giftd's default) or at least this.
constexpr int kWatchMinIntervalMs = 50;

absl::Status Usage(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// A command's positional arguments and options, consumed as they are read.
struct CommandArgs {
  std::string name;
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // without "--"

  bool Take(const std::string& option, std::string* value) {
    auto it = options.find(option);
    if (it == options.end()) return false;
    *value = it->second;
    options.erase(it);
    return true;
  }
  absl::Status Positional(size_t min, size_t max) const {
    if (positional.size() >= min && positional.size() <= max) {
      return absl::OkStatus();
    }
    return Usage(absl::StrFormat(
        "%s: expected %s argument%s, got %d", name,
        min == max ? absl::StrCat(min) : absl::StrCat(min, "-", max),
        min == 1 && max == 1 ? "" : "s", positional.size()));
  }
  absl::Status Done() const {
    if (options.empty()) return absl::OkStatus();
    return Usage(absl::StrFormat("%s: unknown option '--%s'", name,
                                 options.begin()->first));
  }
};

// The range a number must be in, as giftd checks it (control.proto,
// daemon/limits.h, the selection policy's schema), so that a bad value is a
// usage error before any call instead of a value the daemon reads as "keep"
// or a call that fails. What only the daemon knows (r <= max_rank and d_in)
// stays its check.
struct Range {
  double min;
  bool min_open;  // min itself excluded
  double max;     // +inf: no upper bound
  bool max_open;

  bool Contains(double v) const {
    return (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
  // Integer bounds print as integers: [1, 1000000], not [1, 1e+06].
  std::string Text(bool integral) const {
    auto num = [integral](double v) {
      return integral ? absl::StrCat(static_cast<int64_t>(v))
                      : absl::StrFormat("%g", v);
    };
    if (std::isinf(max)) return absl::StrCat(min_open ? "> " : ">= ", num(min));
    return absl::StrCat("in ", min_open ? "(" : "[", num(min), ", ", num(max),
                        max_open ? ")" : "]");
  }
};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range kAtLeastOne = {1, false, kInf, false};
constexpr Range kNonNegative = {0, false, kInf, false};
constexpr Range kInterval = {1, false, daemon::kMaxRefreshInterval, false};
constexpr Range kAuditInterval = {0, false, daemon::kMaxAuditInterval, false};
constexpr Range kBeta = {daemon::kMinBeta, false, daemon::kMaxBeta, false};
// A call's deadline: the chrono conversion of a larger one would overflow.
constexpr Range kTimeout = {0, true, 86400, false};  // a day

// `text` as typed, parsed into `v`.
template <typename T>
absl::Status InRange(const std::string& what, const std::string& text, T v,
                     const Range& range) {
  if (range.Contains(v)) return absl::OkStatus();
  return Usage(absl::StrCat(what, ": must be ",
                            range.Text(std::is_integral_v<T>), ", got ", text));
}

absl::Status ParseNumber(const std::string& what, const std::string& text,
                         int* out) {
  if (absl::SimpleAtoi(text, out)) return absl::OkStatus();
  return Usage(
      absl::StrFormat("%s: expected an integer, got '%s'", what, text));
}

absl::Status ParseNumber(const std::string& what, const std::string& text,
                         double* out) {
  if (absl::SimpleAtod(text, out) && std::isfinite(*out)) {
    return absl::OkStatus();
  }
  return Usage(absl::StrFormat("%s: expected a number, got '%s'", what, text));
}

template <typename T>
absl::Status ParseInRange(const std::string& what, const std::string& text,
                          const Range& range, T* out) {
  RETURN_IF_ERROR(ParseNumber(what, text, out));
  return InRange(what, text, *out, range);
}

// A request field the daemon reads 0 as "keep the current value" for: a 0
// the user meant literally cannot be sent; say so rather than silently
// doing nothing.
absl::Status NonZero(const std::string& command, const std::string& option,
                     double value) {
  if (value != 0) return absl::OkStatus();
  return Usage(
      absl::StrFormat("%s: --%s 0 cannot be sent (0 keeps the current value)",
                      command, option));
}

// `--option` when present: parsed and in `range` (and, with `zero_keeps`,
// not 0, which that field reads as "keep"); *given says whether it was there.
template <typename T>
absl::Status OptField(CommandArgs& a, const std::string& option,
                      const Range& range, bool zero_keeps, T* out,
                      bool* given) {
  std::string text;
  *given = a.Take(option, &text);
  if (!*given) return absl::OkStatus();
  const std::string what = "--" + option;
  T v{};
  RETURN_IF_ERROR(ParseNumber(what, text, &v));
  if (zero_keeps) RETURN_IF_ERROR(NonZero(a.name, option, v));
  RETURN_IF_ERROR(InRange(what, text, v, range));
  *out = v;
  return absl::OkStatus();
}

template <typename T>
absl::Status OptKeepField(CommandArgs& a, const std::string& option,
                          const Range& range, T* out, bool* given) {
  return OptField(a, option, range, /*zero_keeps=*/true, out, given);
}

absl::Status ParseLayer(CommandArgs& a, Invocation& inv) {
  RETURN_IF_ERROR(a.Positional(1, 1));
  gift::v1::SetLayerPolicyRequest& req = inv.set_layer_policy;
  req.set_layer(a.positional[0]);
  gift::v1::LayerSettings* s = req.mutable_settings();
  if (a.name == "pin") s->set_pin(gift::v1::PIN_IN);
  if (a.name == "unpin") s->set_pin(gift::v1::PIN_AUTO);
  if (a.name == "pin-out") s->set_pin(gift::v1::PIN_OUT);
  if (a.name != "layer") return a.Done();
  std::string text;
  if (a.Take("transform", &text)) {
    if (text != "lowrank" && text != "full") {
      return Usage("--transform: expected lowrank or full, got '" + text + "'");
    }
    s->set_transform(text == "full" ? gift::v1::TRANSFORM_FULL
                                    : gift::v1::TRANSFORM_LOWRANK);
  }
  if (a.Take("format", &text)) {
    absl::StatusOr<kernels::WireFormat> f = kernels::ParseWireFormat(text);
    if (!f.ok()) return Usage(absl::StrCat("--format: ", f.status().message()));
    s->set_format(ToProto(*f));
  }
  // 0 keeps the layer's rank and beta: not sendable.
  int rank = 0;
  double beta = 0;
  bool given;
  RETURN_IF_ERROR(OptKeepField(a, "rank", kAtLeastOne, &rank, &given));
  // --beta auto: giftd picks the layer's β from the probes (low-rank).
  if (auto it = a.options.find("beta");
      it != a.options.end() && it->second == "auto") {
    a.options.erase(it);
    s->set_beta_auto(true);
  }
  RETURN_IF_ERROR(OptKeepField(a, "beta", kBeta, &beta, &given));
  s->set_rank(rank);
  s->set_beta(beta);
  return a.Done();
}

absl::Status ParseKind(const std::string& text, gift::v1::SelectionPolicy* p) {
  const daemon::SelectionKindSpelling* kind = daemon::FindSelectionKind(text);
  if (kind == nullptr) {
    return Usage("--kind: expected " + daemon::SelectionKindList(", ", " or ") +
                 ", got '" + text + "'");
  }
  p->set_kind(ProtoSelectionKind(kind->kind));
  return absl::OkStatus();
}

// A schema field's option (daemon/selection_policy_schema.h: its giftctl
// name and range) into the SelectionPolicy field of the same name; a given
// option makes its field present (0 too: --max-layers 0 lifts the budget),
// a missing one leaves it absent (keep).
absl::Status ParsePolicyField(CommandArgs& a, const daemon::PolicyField& f,
                              gift::v1::SelectionPolicy* p) {
  const google::protobuf::FieldDescriptor* field =
      p->GetDescriptor()->FindFieldByName(f.name);
  if (field == nullptr) {
    return absl::InternalError(
        absl::StrCat("SelectionPolicy has no field ", f.name));
  }
  const Range range = {f.min, false, f.max, f.max_open};
  bool given;
  if (f.type == daemon::PolicyField::Type::kInt) {
    int v = 0;
    RETURN_IF_ERROR(OptField(a, f.flag, range, false, &v, &given));
    if (given) p->GetReflection()->SetInt32(p, field, v);
  } else {
    double v = 0;
    RETURN_IF_ERROR(OptField(a, f.flag, range, false, &v, &given));
    if (given) p->GetReflection()->SetDouble(p, field, v);
  }
  return absl::OkStatus();
}

absl::Status ParsePolicy(CommandArgs& a, Invocation& inv) {
  RETURN_IF_ERROR(a.Positional(0, 0));
  gift::v1::SelectionPolicy* p = inv.set_policy.mutable_policy();
  std::string text;
  if (a.Take("kind", &text)) RETURN_IF_ERROR(ParseKind(text, p));
  for (const daemon::PolicyField& f : daemon::kPolicyFields) {
    RETURN_IF_ERROR(ParsePolicyField(a, f, p));
  }
  return a.Done();
}

absl::Status ParseCommand(CommandArgs& a, Invocation& inv) {
  const std::string& c = a.name;
  if (c == "status" || c == "layers") {
    inv.command = c == "status" ? Command::kStatus : Command::kLayers;
    RETURN_IF_ERROR(a.Positional(0, 0));
    return a.Done();
  }
  if (c == "set-interval" || c == "set-rank") {
    RETURN_IF_ERROR(a.Positional(1, 1));
    int v = 0;
    // r >= 1: the daemon checks it against max_rank and every d_in.
    RETURN_IF_ERROR(ParseInRange(
        c, a.positional[0], c == "set-rank" ? kAtLeastOne : kInterval, &v));
    inv.command = c == "set-rank" ? Command::kSetRank : Command::kSetInterval;
    inv.set_interval.set_steps(v);
    inv.set_rank.set_rank(v);
    return a.Done();
  }
  if (c == "set-audit-interval") {
    RETURN_IF_ERROR(a.Positional(1, 1));
    int v = 0;
    RETURN_IF_ERROR(ParseInRange(c, a.positional[0], kAuditInterval, &v));
    inv.command = Command::kSetAuditInterval;
    inv.set_audit_interval.set_steps(v);
    return a.Done();
  }
  if (c == "pin" || c == "unpin" || c == "pin-out" || c == "layer") {
    inv.command = Command::kSetLayerPolicy;
    return ParseLayer(a, inv);
  }
  if (c == "policy") {
    inv.command = Command::kPolicy;
    return ParsePolicy(a, inv);
  }
  if (c == "refresh") {
    inv.command = Command::kRefresh;
    RETURN_IF_ERROR(a.Positional(0, 1));
    if (!a.positional.empty()) inv.refresh.set_layer(a.positional[0]);
    return a.Done();
  }
  if (c == "watch") {
    inv.command = Command::kWatch;
    RETURN_IF_ERROR(a.Positional(0, 0));
    int interval = 0;  // 0: giftd's default period
    std::string text;
    if (a.Take("interval", &text)) {
      RETURN_IF_ERROR(
          ParseInRange("--interval", text, kNonNegative, &interval));
      if (interval != 0 && interval < kWatchMinIntervalMs) {
        return Usage(absl::StrFormat(
            "--interval: must be 0 (the default) or >= %d ms, got %d",
            kWatchMinIntervalMs, interval));
      }
    }
    if (a.Take("count", &text)) {
      RETURN_IF_ERROR(
          ParseInRange("--count", text, kNonNegative, &inv.watch_count));
    }
    inv.watch.set_interval_ms(interval);
    return a.Done();
  }
  if (c == "health") {
    inv.command = Command::kHealth;
    RETURN_IF_ERROR(a.Positional(0, 0));
    a.Take("service", &inv.health_service);
    return a.Done();
  }
  return Usage("unknown command '" + c + "'");
}

absl::Status ApplyGlobal(const std::string& name, const std::string& value,
                         Invocation& inv) {
  if (name == "address") inv.address = value;
  if (name == "token-file") inv.token_file = value;
  if (name == "tls-ca") inv.tls_ca = value;
  if (name == "timeout") {
    RETURN_IF_ERROR(
        ParseInRange("--timeout", value, kTimeout, &inv.timeout_seconds));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, const std::string& env_address) {
  Invocation inv;
  if (!env_address.empty()) inv.address = env_address;
  CommandArgs command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "--") || arg == "--") {
      if (command.name.empty()) {
        command.name = arg;
      } else {
        command.positional.push_back(arg);
      }
      continue;
    }
    size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    if (name == "json" || name == "help") {
      if (eq != std::string::npos)
        return Usage(arg.substr(0, eq) + ": takes no value");
      (name == "json" ? inv.json : inv.help) = true;
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Usage("--" + name + ": missing value");
    }
    bool global = name == "address" || name == "token-file" ||
                  name == "tls-ca" || name == "timeout";
    if (global) {
      RETURN_IF_ERROR(ApplyGlobal(name, value, inv));
    } else if (!command.options.emplace(name, value).second) {
      return Usage("--" + name + ": given more than once");
    }
  }
  if (inv.help) return inv;
  if (command.name.empty()) {
    if (!command.options.empty()) {
      return Usage("unknown option '--" + command.options.begin()->first + "'");
    }
    return Usage("missing command");
  }
  inv.command_name = command.name;
  RETURN_IF_ERROR(ParseCommand(command, inv));
  return inv;
}

}  // namespace gift::giftctl
