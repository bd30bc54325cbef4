// giftd's option table (config_options.h) and the three texts printed from
// it: --print-config, --help and the README table.
#include "daemon/config_options.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "daemon/config.h"
#include "daemon/limits.h"
#include "daemon/selection_policy_schema.h"
#include "daemon/selector_policy.h"
#include "kernels/wire_format.h"
#include "shm/layout.h"

namespace gift::daemon {
namespace internal {
namespace {

absl::Status BadValue(const std::string& expected, const std::string& text) {
  return absl::InvalidArgumentError(
      absl::StrFormat("expected %s, got '%s'", expected, text));
}

// The offset of the first byte of `s` that is not well-formed UTF-8
// (overlong forms, surrogates and code points above U+10FFFF included), or
// npos. YAML is Unicode text: --print-config could not write such bytes so
// that they read back.
size_t InvalidUtf8At(const std::string& s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int n;  // continuation bytes
    if (c < 0x80) {
      n = 0;
    } else if ((c >> 5) == 0x6) {
      n = 1;
    } else if ((c >> 4) == 0xe) {
      n = 2;
    } else if ((c >> 3) == 0x1e) {
      n = 3;
    } else {
      return i;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return i;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return i;
    }
    i += n + 1;
  }
  return std::string::npos;
}

// Shortest text that parses back to the same double.
std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

Option MakeOption(std::string name, std::string value, std::string help) {
  Option o;
  o.name = std::move(name);
  o.value = std::move(value);
  o.help = std::move(help);
  return o;
}

// The builders take a generic accessor `[](auto& c) -> auto& {...}` so one
// lambda serves both the parser (mutable) and the printer (const).
template <typename Get>
Option IntOption(std::string name, Get get, int min, std::string help) {
  Option o = MakeOption(name, "INT", std::move(help));
  o.set = [get](const std::string& text, DaemonConfig& c) {
    if (!absl::SimpleAtoi(text, &get(c))) return BadValue("an integer", text);
    return absl::OkStatus();
  };
  o.get = [get](const DaemonConfig& c) { return absl::StrCat(get(c)); };
  o.check = [get, name, min](const DaemonConfig& c) {
    if (get(c) >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be >= %d (got %d)", name, min, get(c)));
  };
  return o;
}

// above_min: the value must be > min (else >= min).
template <typename Get>
Option DoubleOption(std::string name, Get get, double min, bool above_min,
                    std::string help) {
  Option o = MakeOption(name, "FLOAT", std::move(help));
  o.set = [get](const std::string& text, DaemonConfig& c) {
    double v;
    if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) {
      return BadValue("a finite number", text);
    }
    get(c) = v;
    return absl::OkStatus();
  };
  o.get = [get](const DaemonConfig& c) { return FormatDouble(get(c)); };
  o.check = [get, name, min, above_min](const DaemonConfig& c) {
    double v = get(c);
    if (above_min ? v > min : v >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be %s %s (got %s)", name,
        above_min ? ">" : ">=", FormatDouble(min), FormatDouble(v)));
  };
  return o;
}

// IntOption with an upper bound too (the lower bound's message as every
// option's).
template <typename Get>
Option IntRangeOption(std::string name, Get get, int min, int64_t max,
                      std::string help) {
  Option o = IntOption(name, get, min, std::move(help));
  o.check = [get, name, max, below = o.check](const DaemonConfig& c) {
    if (absl::Status s = below(c); !s.ok()) return s;
    if (get(c) <= max) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be <= %d (got %d)", name, max, get(c)));
  };
  return o;
}

// DoubleOption that must also lie in [lo, hi].
template <typename Get>
Option DoubleRangeOption(std::string name, Get get, double min, bool above_min,
                         double lo, double hi, std::string help) {
  Option o = DoubleOption(name, get, min, above_min, std::move(help));
  o.check = [get, name, lo, hi, below = o.check](const DaemonConfig& c) {
    if (absl::Status s = below(c); !s.ok()) return s;
    if (get(c) >= lo && get(c) <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be in [%s, %s] (got %s)", name, FormatDouble(lo),
        FormatDouble(hi), FormatDouble(get(c))));
  };
  return o;
}

// Free text (paths, addresses), printed double-quoted so "" survives; or,
// with `words`, one of a fixed set, printed plain.
template <typename Get>
Option StringOption(std::string name, std::string value, Get get,
                    std::string help, std::vector<std::string> words = {}) {
  if (!words.empty()) value = absl::StrJoin(words, "|");
  Option o = MakeOption(name, value, std::move(help));
  o.set = [get](const std::string& text, DaemonConfig& c) {
    if (const size_t at = InvalidUtf8At(text); at != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected UTF-8 text, got invalid byte 0x%02x at offset %d",
          static_cast<unsigned char>(text[at]), at));
    }
    get(c) = text;
    return absl::OkStatus();
  };
  if (words.empty()) {
    o.get = [get](const DaemonConfig& c) { return YamlQuoted(get(c)); };
    return o;
  }
  o.get = [get](const DaemonConfig& c) { return get(c); };
  o.check = [get, name, words, value](const DaemonConfig& c) {
    for (const std::string& w : words) {
      if (get(c) == w) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be one of %s (got '%s')", name, value, get(c)));
  };
  return o;
}

// The names come from kernels/wire_format.h (WireFormatName of each code);
// a valid name is kept as WireFormatName spells it (lower case).
Option WireFormatOption() {
  std::vector<std::string> names;
  for (int code = 0; code <= kernels::WireFormat::kMxfp4Code; ++code) {
    names.push_back(
        kernels::WireFormatName(kernels::WireFormat::FromCode(code)));
  }
  Option o = StringOption(
      "format", "", [](auto& c) -> auto& { return c.format; },
      "Default wire format of a job's layers (a rank may ask its own, "
      "gift.init(format=...)); a layer whose d_in is not a multiple of a "
      "4-bit format's block (16 nvfp4, 32 mxfp4) takes e4m3",
      names);
  o.set = [set = o.set](const std::string& text, DaemonConfig& c) {
    RETURN_IF_ERROR(set(text, c));
    if (absl::StatusOr<kernels::WireFormat> f = kernels::ParseWireFormat(text);
        f.ok()) {
      c.format = kernels::WireFormatName(*f);
    }
    return absl::OkStatus();
  };
  return o;
}

Option SeedOption() {
  Option o = MakeOption("omega_seed", "UINT64",
                        "Seed of the job's Gaussian test matrix before the "
                        "first factor (decimal or 0x hex)");
  o.set = [](const std::string& text, DaemonConfig& c) {
    bool hex = text.size() > 2 && text[0] == '0' && (text[1] | 0x20) == 'x';
    bool ok = !text.empty() && text[0] != '-' && text[0] != '+' &&
              (hex ? absl::SimpleHexAtoi(text, &c.omega_seed)
                   : absl::SimpleAtoi(text, &c.omega_seed));
    return ok ? absl::OkStatus() : BadValue("an unsigned 64-bit integer", text);
  };
  o.get = [](const DaemonConfig& c) {
    return absl::StrFormat("0x%016x", c.omega_seed);
  };
  return o;
}

Option SelectionKindOption() {
  Option o = MakeOption("selection.kind", SelectionKindList("|", "|"),
                        kSelectionKindDoc);
  o.set = [](const std::string& text, DaemonConfig& c) {
    absl::StatusOr<SelectionKind> kind = ParseSelectionKind(text);
    if (!kind.ok()) return BadValue(SelectionKindList(", ", " or "), text);
    c.selection.kind = *kind;
    return absl::OkStatus();
  };
  o.get = [](const DaemonConfig& c) {
    return std::string(SelectionKindName(c.selection.kind));
  };
  return o;
}

// A numeric selection.* option from the schema (selection_policy_schema.h):
// its key, help and lower bound; SelectorPolicy::Validate checks the upper
// bound (its message says "selection: ").
Option SelectionFieldOption(const PolicyMember& m) {
  const PolicyField& f = *m.field;
  const std::string name = absl::StrCat("selection.", f.name);
  if (m.int_member != nullptr) {
    return IntOption(
        name, [p = m.int_member](auto& c) -> auto& { return c.selection.*p; },
        static_cast<int>(f.min), PolicyHelp(f));
  }
  return DoubleOption(
      name, [p = m.double_member](auto& c) -> auto& { return c.selection.*p; },
      f.min, /*above_min=*/false, PolicyHelp(f));
}

// The option's name is the field's path: `selection.top_k` is both the C++
// member and the YAML key.
#define GIFT_FIELD_GET(f) \
  [](auto& c) -> auto& { return c.f; }
#define GIFT_FIELD(f) #f, GIFT_FIELD_GET(f)
#define GIFT_INT(f, min, help) IntOption(GIFT_FIELD(f), min, help)
#define GIFT_INT_RANGE(f, min, max, help) \
  IntRangeOption(GIFT_FIELD(f), min, max, help)
// A limits.h field under its own name (max_layers, not limits.max_layers).
#define GIFT_LIMIT(f, min, max, help) \
  IntRangeOption(#f, GIFT_FIELD_GET(limits.f), min, max, help)
#define GIFT_DOUBLE(f, min, above, help) \
  DoubleOption(GIFT_FIELD(f), min, above, help)
#define GIFT_STRING(f, value, help) \
  StringOption(#f, value, GIFT_FIELD_GET(f), help)
#define GIFT_ENUM(f, help, ...) \
  StringOption(#f, "", GIFT_FIELD_GET(f), help, {__VA_ARGS__})

std::vector<Option> Endpoints() {
  std::vector<Option> v = {
      GIFT_STRING(node, "NAME", "Node name in status, metrics and shm names"),
      GIFT_STRING(agent_socket, "PATH",
                  "Unix socket of the Agent service (absolute path)"),
      GIFT_STRING(control_address, "HOST:PORT",
                  "Control service (giftctl) address"),
      GIFT_STRING(metrics_address, "HOST:PORT",
                  "Prometheus /metrics address; empty disables"),
      GIFT_STRING(control_token_file, "PATH",
                  "Bearer token file for Control; required when "
                  "control_address is not loopback"),
      GIFT_STRING(tls_cert_file, "PATH",
                  "TLS certificate for Control (with tls_key_file)"),
      GIFT_STRING(tls_key_file, "PATH",
                  "TLS private key for Control (with tls_cert_file)"),
      GIFT_STRING(shm_prefix, "NAME", "POSIX shared-memory name prefix"),
  };
  v.front().default_text = "host name";
  v.back().default_text = "/gift-<node>";
  return v;
}

// Empty peer_address: a one-node giftd; the others matter only with it.
std::vector<Option> Peer() {
  return {
      GIFT_STRING(job_id, "NAME",
                  "The job this giftd serves (required with peer_address)"),
      GIFT_STRING(peer_address, "HOST:PORT",
                  "Peer service address for the job's other daemons; empty: "
                  "one-node giftd"),
      GIFT_STRING(peer_advertise_address, "HOST:PORT",
                  "How the other daemons reach this one (default: "
                  "peer_address, then not a wildcard)"),
      GIFT_STRING(leader_address, "HOST:PORT",
                  "The leader's Peer address; this giftd leads when it "
                  "equals its advertise address"),
      GIFT_STRING(job_token_file, "PATH",
                  "File holding the job's peer token (required with "
                  "peer_address)"),
      GIFT_STRING(peer_tls_cert_file, "PATH",
                  "TLS certificate for Peer (with peer_tls_key_file)"),
      GIFT_STRING(peer_tls_key_file, "PATH",
                  "TLS private key for Peer (with peer_tls_cert_file)"),
      GIFT_STRING(peer_tls_ca_file, "PATH",
                  "CA bundle the peers' certificates are verified with "
                  "(required with Peer TLS)"),
      GIFT_INT(peer_timeout_ms, 1,
               "The leader drops a follower silent this long, ms (> "
               "poll_interval_ms)"),
      GIFT_STRING(coordinator, "URI",
                  "Leader election on etcd: etcd://host:port[,host:port] "
                  "(etcds:// for TLS); replaces leader_address"),
      GIFT_INT_RANGE(coordinator_ttl_s, 2, 3600,
                     "Election lease, s: a leader cut off from etcd this "
                     "long steps down"),
      GIFT_STRING(coordinator_user, "NAME", "etcd user (with a password file)"),
      GIFT_STRING(coordinator_password_file, "PATH",
                  "File holding the etcd user's password"),
      GIFT_STRING(coordinator_ca_file, "PATH",
                  "CA bundle etcd's certificate is verified with"),
      GIFT_STRING(coordinator_cert_file, "PATH",
                  "Client certificate for etcd (with coordinator_key_file)"),
      GIFT_STRING(coordinator_key_file, "PATH",
                  "Client key for etcd (with coordinator_cert_file)"),
  };
}

// beta: a number, or `auto` (beta_auto, starting at β = 1).
Option BetaOption() {
  Option o = DoubleRangeOption(
      GIFT_FIELD(beta), 0, true, kMinBeta, kMaxBeta,
      "Low-rank damping strength beta, [1e-08, 1e+08], or auto: per layer "
      "the best of 0.3, 1 and 3 as the probes measure them");
  o.value = "FLOAT|auto";
  o.set = [number = o.set](const std::string& text, DaemonConfig& c) {
    if (text == "auto") {
      c.beta_auto = true;
      c.beta = 1.0;
      return absl::OkStatus();
    }
    c.beta_auto = false;
    return number(text, c);
  };
  o.get = [number = o.get](const DaemonConfig& c) {
    return c.beta_auto ? std::string("auto") : number(c);
  };
  return o;
}

std::vector<Option> Plan() {
  return {
      GIFT_INT_RANGE(refresh_interval, 1, kMaxRefreshInterval,
                     "Factor refresh interval K, in steps"),
      GIFT_INT(rank, 1, "Default factor rank r (<= max_rank)"),
      GIFT_INT_RANGE(max_rank, 1, 4096,
                     "Factor slot capacity: largest run-time rank"),
      GIFT_INT(probe_interval, 1,
               "Probe step interval M (measured gain); the ranks probe at it"),
      GIFT_INT_RANGE(audit_interval, 0, kMaxAuditInterval,
                     "Audit step interval: an FP32 allreduce beside the "
                     "quantized one measures what was applied; 0 = none"),
      GIFT_INT(sketch_rows, 1, "Sampled input rows per layer and step"),
      GIFT_INT_RANGE(sketch_oversample, 0, shm::kMaxOversample,
                     "Sketch oversampling p: a window sketches r + p columns "
                     "(the same on every node of a job)"),
      GIFT_INT(sketch_stride, 0,
               "Sketch stride s: a window samples rows on every s-th step; "
               "0 = auto, K / 16 (at least 1)"),
      GIFT_INT(max_sketch_period, 0,
               "Longest sketch period: a GIFT-path layer whose factor "
               "subspace holds is refreshed (and sketched) every P-th window "
               "only, P up to this; 0 = auto, (staleness_limit - max(K, "
               "staleness_limit / 4)) / K; 1 = "
               "every window"),
      GIFT_INT(staleness_limit, 1,
               "Steps a factor may age before a rank falls back to Euclidean"),
      BetaOption(),
      DoubleRangeOption(GIFT_FIELD(full_beta), 0, true, kMinBeta, kMaxBeta,
                        "Full-transform damping (tau = full_beta tr A / "
                        "d_in), [1e-08, 1e+08]"),
      GIFT_INT(full_max_d_in, 1, "Largest d_in allowed the full transform"),
      GIFT_ENUM(transform, "Default whitening transform", "lowrank", "full"),
      WireFormatOption(),
      SeedOption(),
  };
}

// The schema's fields; lower bounds here name the key, SelectorPolicy::
// Validate has the rest.
std::vector<Option> Selection() {
  std::vector<Option> v = {SelectionKindOption()};
  for (const PolicyMember& m : PolicyMembers()) {
    v.push_back(SelectionFieldOption(m));
  }
  return v;
}

std::vector<Option> Daemon() {
  return {
      GIFT_INT(refresh_threads, 1, "Factor refresher threads"),
      GIFT_INT(refresher_device, -1, "CUDA device of the refresher; -1 = CPU"),
      GIFT_INT(heartbeat_interval_ms, 10, "Rank heartbeat interval, ms"),
      GIFT_INT(rank_timeout_ms, 1,
               "A rank silent this long is reaped, ms (> heartbeat)"),
      GIFT_INT(poll_interval_ms, 10,
               "Telemetry poll / selector period, ms: the shortest; while no "
               "rank steps the waits double, with a full poll at least every "
               "second"),
      GIFT_ENUM(log_level, "Log level", "debug", "info", "warning", "error"),
  };
}

// What ranks and operators may send (limits.h); over a limit, a request is
// refused with INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming it.
std::vector<Option> Limits() {
  return {
      GIFT_LIMIT(max_layer_d_in, 1, shm::kMaxDIn,
                 "Largest d_in of a layer a rank may declare"),
      GIFT_LIMIT(max_layer_d_out, 1, int64_t{1} << 31,
                 "Largest d_out of a layer a rank may declare"),
      GIFT_LIMIT(max_layers, 1, 65536, "Most layers one rank may declare"),
      GIFT_LIMIT(max_rank_shm_bytes, 1, std::numeric_limits<int64_t>::max(),
                 "Most shared memory of one rank (control block, data and "
                 "full regions), bytes"),
      GIFT_LIMIT(max_local_ranks, 1, 4096,
                 "Most ranks registered with this giftd at once"),
      GIFT_LIMIT(max_sessions_per_pid, 1, 4096,
                 "Most sessions one process may hold"),
      GIFT_LIMIT(max_job_id_bytes, 1, 1024,
                 "Longest job id (ASCII letters, digits and ._-:@+=/)"),
      GIFT_LIMIT(max_layer_name_bytes, 1, shm::kNameBytes - 1,
                 "Longest layer name (printable ASCII)"),
      GIFT_LIMIT(max_store_value_bytes, 1, 4 << 20,
                 "Largest rendezvous-store value, bytes"),
      GIFT_LIMIT(max_store_job_bytes, 1, int64_t{1} << 40,
                 "Most rendezvous-store bytes (keys and values) of one job"),
      GIFT_LIMIT(max_store_jobs, 1, 1024,
                 "Most jobs with store keys at once (a new job replaces the "
                 "least recently used one other than giftd's own)"),
  };
}

#undef GIFT_LIMIT
#undef GIFT_INT_RANGE
#undef GIFT_ENUM
#undef GIFT_STRING
#undef GIFT_DOUBLE
#undef GIFT_INT
#undef GIFT_FIELD
#undef GIFT_FIELD_GET

}  // namespace

const std::vector<Option>& Options() {
  static const std::vector<Option>* options = [] {
    auto* all = new std::vector<Option>();
    auto add = [all](std::vector<Option> part, const char* group) {
      for (Option& o : part) {
        o.group = group;
        all->push_back(std::move(o));
      }
    };
    add(Endpoints(), "identity and endpoints");
    add(Peer(), "multi-node job (the Peer service)");
    add(Plan(), "plan defaults (changeable at run time through Control)");
    add(Selection(), "layer selection (changeable through Control)");
    add(Daemon(), "daemon");
    add(Limits(), "limits (what ranks and operators may send)");
    DaemonConfig defaults;
    for (Option& o : *all) {
      if (o.default_text.empty()) o.default_text = o.get(defaults);
    }
    return all;
  }();
  return *options;
}

// Accepts '-' for '_' so flags read naturally (--refresh-interval).
const Option* FindOption(std::string name) {
  absl::StrReplaceAll({{"-", "_"}}, &name);
  for (const Option& o : Options()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string FlagName(const std::string& name) {
  return "--" + absl::StrReplaceAll(name, {{"_", "-"}});
}

}  // namespace internal

using internal::FlagName;
using internal::Option;
using internal::Options;

std::string FormatConfig(const DaemonConfig& config) {
  std::string out =
      "# giftd configuration: every option with its effective value.\n"
      "# `giftd --config FILE` reads it back; flags override the file.\n";
  std::string group;
  bool in_selection = false;
  for (const Option& o : Options()) {
    if (o.group != group) {
      group = o.group;
      absl::StrAppend(&out, "\n# ---- ", group, "\n");
    }
    std::string key = o.name;
    std::string indent;
    if (absl::StartsWith(key, "selection.")) {
      if (!in_selection) absl::StrAppend(&out, "selection:\n");
      in_selection = true;
      key = key.substr(std::strlen("selection."));
      indent = "  ";
    }
    absl::StrAppend(&out, indent, "# ", o.help, " (default: ", o.default_text,
                    ")\n", indent, key, ": ", o.get(config), "\n");
  }
  return out;
}

std::string ConfigHelp() {
  std::string out =
      "Usage: giftd [--config FILE] [--OPTION=VALUE]... [--print-config] "
      "[--help]\n\n"
      "Options come from the YAML file named by --config (keys as below "
      "with '_',\nselection.* as a nested `selection:` map), then from "
      "flags, which override\nthe file. Flags take --key=value or --key "
      "value, with '-' or '_'.\n\n"
      "  --config FILE\n      YAML configuration file\n"
      "  --print-config\n      Print the effective configuration as YAML "
      "and exit\n"
      "  --help\n      Print this help and exit\n"
      "  --help-markdown\n      Print the options as a Markdown table (the "
      "README's) and exit\n";
  std::string group;
  for (const Option& o : Options()) {
    if (o.group != group) {
      group = o.group;
      absl::StrAppend(&out, "\n", group, ":\n");
    }
    absl::StrAppend(&out, "  ", FlagName(o.name), "=", o.value,
                    " (default: ", o.default_text, ")\n      ", o.help, "\n");
  }
  return out;
}

std::string ConfigMarkdown() {
  // GitHub tables end a cell at '|' even inside code spans.
  auto cell = [](const std::string& s) {
    return absl::StrReplaceAll(s, {{"|", "\\|"}});
  };
  std::string out =
      "| Option (YAML key) | Flag | Default | Meaning |\n"
      "|---|---|---|---|\n";
  for (const Option& o : Options()) {
    absl::StrAppend(&out, "| `", o.name, "` | `",
                    cell(FlagName(o.name) + "=" + o.value), "` | `",
                    cell(o.default_text), "` | ", cell(o.help), " |\n");
  }
  return out;
}

}  // namespace gift::daemon
