// giftd's configuration. One table (Options()) names every option once with
// its help, how to parse and print it and its own range check; YAML loading,
// flags, --print-config, --help and the README table are all loops over it,
// so an option cannot be parseable but undocumented, or printed but not
// readable back.
#include "daemon/config.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
// GCC 12 reports false dangling-pointer warnings inside yaml-cpp 0.7.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include "yaml-cpp/yaml.h"
#pragma GCC diagnostic pop

namespace gift::daemon {
namespace {

struct Option {
  std::string name;   // YAML key; '.' separates the selection map
  std::string group;  // comment heading in --print-config
  std::string value;  // value hint for --help: INT, lowrank|full, ...
  std::string help;
  std::string default_text;  // "" = the printed value of DaemonConfig{}
  // Parses `text` into the config; the error names the expected type.
  std::function<absl::Status(const std::string& text, DaemonConfig&)> set;
  // The value as YAML text (parsed back by `set`).
  std::function<std::string(const DaemonConfig&)> get;
  // The option's own range check; cross-field checks live in ValidateConfig.
  std::function<absl::Status(const DaemonConfig&)> check;
};

absl::Status BadValue(const std::string& expected, const std::string& text) {
  return absl::InvalidArgumentError(
      absl::StrFormat("expected %s, got '%s'", expected, text));
}

// Shortest text that parses back to the same double.
std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

std::string Quoted(const std::string& s) {
  YAML::Emitter out;
  out << YAML::DoubleQuoted << s;
  return out.c_str();
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

// Free text (paths, addresses), printed double-quoted so "" survives; or,
// with `words`, one of a fixed set, printed plain.
template <typename Get>
Option StringOption(std::string name, std::string value, Get get,
                    std::string help, std::vector<std::string> words = {}) {
  if (!words.empty()) value = absl::StrJoin(words, "|");
  Option o = MakeOption(name, value, std::move(help));
  o.set = [get](const std::string& text, DaemonConfig& c) {
    get(c) = text;
    return absl::OkStatus();
  };
  if (words.empty()) {
    o.get = [get](const DaemonConfig& c) { return Quoted(get(c)); };
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
  Option o = MakeOption("selection.kind", "top-k|elbow|threshold",
                        "Layer selection policy on the vulnerability score");
  o.set = [](const std::string& text, DaemonConfig& c) {
    absl::StatusOr<SelectionKind> kind = ParseSelectionKind(text);
    if (!kind.ok()) return BadValue("top-k, elbow or threshold", text);
    c.selection.kind = *kind;
    return absl::OkStatus();
  };
  o.get = [](const DaemonConfig& c) {
    return std::string(SelectionKindName(c.selection.kind));
  };
  return o;
}

// The option's name is the field's path: `selection.top_k` is both the C++
// member and the YAML key.
#define GIFT_FIELD_GET(f) \
  [](auto& c) -> auto& { return c.f; }
#define GIFT_FIELD(f) #f, GIFT_FIELD_GET(f)
#define GIFT_INT(f, min, help) IntOption(GIFT_FIELD(f), min, help)
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

std::vector<Option> Plan() {
  return {
      GIFT_INT(refresh_interval, 1, "Factor refresh interval K, in steps"),
      GIFT_INT(rank, 1, "Default factor rank r (<= max_rank)"),
      GIFT_INT(max_rank, 1, "Factor slot capacity: largest run-time rank"),
      GIFT_INT(probe_interval, 1, "Probe step interval M (measured gain)"),
      GIFT_INT(sketch_rows, 1, "Sampled input rows per layer and step"),
      GIFT_INT(staleness_limit, 1,
               "Steps a factor may age before a rank falls back to Euclidean"),
      GIFT_DOUBLE(beta, 0, true, "Low-rank damping strength beta"),
      GIFT_DOUBLE(full_beta, 0, true,
                  "Full-transform damping (tau = full_beta tr A / d_in)"),
      GIFT_INT(full_max_d_in, 1, "Largest d_in allowed the full transform"),
      GIFT_ENUM(transform, "Default whitening transform", "lowrank", "full"),
      GIFT_ENUM(format, "Default FP8 format", "e4m3", "e5m2"),
      SeedOption(),
  };
}

// Lower bounds here name the key; SelectorPolicy::Validate has the rest.
std::vector<Option> Selection() {
  return {
      SelectionKindOption(),
      GIFT_INT(selection.top_k, 1, "top-k: number of candidate layers"),
      GIFT_DOUBLE(selection.threshold, 0, false,
                  "threshold: minimum vulnerability score, [0, 1]"),
      GIFT_DOUBLE(selection.hysteresis, 0, false,
                  "Relative score margin to enter/leave, [0, 1)"),
      GIFT_INT(selection.window_steps, 1, "Score window, in steps"),
      GIFT_INT(selection.max_layers, 0,
               "Budget: most selected layers; 0 = unlimited"),
      GIFT_DOUBLE(selection.max_extra_flops, 0, false,
                  "Budget: extra whitening flops per step; 0 = unlimited"),
      GIFT_DOUBLE(selection.min_gain, 0, false, "Measured-gain guard, [0, 1)"),
  };
}

std::vector<Option> Daemon() {
  return {
      GIFT_INT(refresh_threads, 1, "Factor refresher threads"),
      GIFT_INT(refresher_device, -1, "CUDA device of the refresher; -1 = CPU"),
      GIFT_INT(heartbeat_interval_ms, 10, "Rank heartbeat interval, ms"),
      GIFT_INT(rank_timeout_ms, 1,
               "A rank silent this long is reaped, ms (> heartbeat)"),
      GIFT_INT(poll_interval_ms, 10, "Telemetry poll / selector period, ms"),
      GIFT_ENUM(log_level, "Log level", "debug", "info", "warning", "error"),
  };
}

#undef GIFT_ENUM
#undef GIFT_STRING
#undef GIFT_DOUBLE
#undef GIFT_INT
#undef GIFT_FIELD
#undef GIFT_FIELD_GET
#undef GIFT_FIELD

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
    add(Plan(), "plan defaults (changeable at run time through Control)");
    add(Selection(), "layer selection (changeable through Control)");
    add(Daemon(), "daemon");
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

// ---- defaults that depend on the machine

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

// POSIX shm names allow little beyond this; a node name can hold anything.
std::string SanitizeForShm(const std::string& node) {
  std::string out = node;
  for (char& ch : out) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '_' &&
        ch != '.' && ch != '-') {
      ch = '_';
    }
  }
  return out;
}

void FillMachineDefaults(DaemonConfig& c) {
  if (c.node.empty()) c.node = HostName();
  if (c.shm_prefix.empty()) c.shm_prefix = "/gift-" + SanitizeForShm(c.node);
}

// ---- YAML

absl::Status At(const std::string& file, const YAML::Mark& mark,
                const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s:%d: %s", file, mark.line + 1, msg));
}

absl::Status ApplyYamlMap(const YAML::Node& map, const std::string& prefix,
                          const std::string& file, std::set<std::string>& seen,
                          DaemonConfig& c) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node& key = it->first;
    const YAML::Node& value = it->second;
    if (!key.IsScalar()) return At(file, key.Mark(), "keys must be names");
    std::string name = prefix + key.Scalar();
    if (prefix.empty() && name == "selection") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) {
        return At(file, key.Mark(), "selection: expected a map");
      }
      RETURN_IF_ERROR(ApplyYamlMap(value, "selection.", file, seen, c));
      continue;
    }
    const Option* option = FindOption(name);
    if (option == nullptr) {
      return At(file, key.Mark(), absl::StrCat("unknown key '", name, "'"));
    }
    if (!seen.insert(option->name).second) {
      return At(file, key.Mark(), absl::StrCat("duplicate key '", name, "'"));
    }
    if (!value.IsScalar() && !value.IsNull()) {
      return At(file, key.Mark(), name + ": expected a single value");
    }
    // `key:` with nothing after it reads as "" (metrics_address: disables).
    absl::Status s = option->set(value.IsNull() ? "" : value.Scalar(), c);
    if (!s.ok()) return At(file, key.Mark(), name + ": " + s.message().data());
  }
  return absl::OkStatus();
}

absl::Status ApplyYaml(const std::string& yaml, const std::string& file,
                       DaemonConfig& c) {
  try {
    YAML::Node root = YAML::Load(yaml);
    if (root.IsNull()) return absl::OkStatus();  // empty or comments only
    if (!root.IsMap()) {
      return At(file, root.Mark(), "expected a map of options");
    }
    std::set<std::string> seen;
    return ApplyYamlMap(root, "", file, seen, c);
  } catch (const YAML::Exception& e) {
    return At(file, e.mark, e.msg);
  }
}

// ---- flags

bool IsFlag(const std::string& arg, const char* name) {
  return arg == absl::StrCat("--", name) ||
         arg == absl::StrCat("--", absl::StrReplaceAll(name, {{"-", "_"}}));
}

absl::Status ApplyFlags(const std::vector<std::string>& flags,
                        DaemonConfig& c) {
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& arg = flags[i];
    if (IsFlag(arg, "help") || arg == "-h") {
      c.help = true;
      continue;
    }
    if (IsFlag(arg, "print-config")) {
      c.print_config = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'"));
    }
    size_t eq = arg.find('=');
    std::string flag = arg.substr(0, eq);
    const Option* option = FindOption(flag.substr(2));
    if (option == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", flag, "'"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < flags.size() && !absl::StartsWith(flags[i + 1], "--")) {
      value = flags[++i];
    } else {
      return absl::InvalidArgumentError(flag + ": missing value");
    }
    absl::Status s = option->set(value, c);
    if (!s.ok()) {
      return absl::InvalidArgumentError(flag + ": " + s.message().data());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  auto fail = [&path](int err) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot read config file '%s': %s", path, std::strerror(err)));
  };
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return fail(errno);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return fail(err);
  return text;
}

// ---- cross-field checks

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// host:port, IPv6 hosts in brackets, numeric port (0 = any free port).
absl::Status CheckAddress(const std::string& name, const std::string& addr) {
  size_t colon = addr.rfind(':');
  std::string host = colon == std::string::npos ? "" : addr.substr(0, colon);
  bool bracketed = absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
  if (host.empty() || (host.find(':') != std::string::npos && !bracketed)) {
    return Invalid(absl::StrFormat(
        "%s must be host:port, IPv6 hosts in brackets (got '%s')", name, addr));
  }
  std::string port = addr.substr(colon + 1);
  int p = -1;
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || !absl::SimpleAtoi(port, &p) || p > 65535) {
    return Invalid(absl::StrFormat(
        "%s: port must be a number in 0..65535 (got '%s')", name, port));
  }
  return absl::OkStatus();
}

bool IsLoopback(const std::string& addr) {
  std::string host = addr.substr(0, addr.rfind(':'));
  return host == "127.0.0.1" || host == "[::1]" || host == "::1" ||
         host == "localhost";
}

absl::Status CheckPaths(const DaemonConfig& c) {
  if (c.node.empty()) return Invalid("node must not be empty");
  // sockaddr_un::sun_path holds 108 bytes with the terminating NUL.
  if (!absl::StartsWith(c.agent_socket, "/") || c.agent_socket.size() > 107) {
    return Invalid(absl::StrFormat(
        "agent_socket must be an absolute path of at most 107 bytes (got "
        "'%s')",
        c.agent_socket));
  }
  // Segment names append to the prefix; keep well inside NAME_MAX (255).
  if (c.shm_prefix.size() < 2 || c.shm_prefix[0] != '/' ||
      c.shm_prefix.find('/', 1) != std::string::npos ||
      c.shm_prefix.size() > 128) {
    return Invalid(absl::StrFormat(
        "shm_prefix must be '/' and 1..127 characters without '/' (got '%s')",
        c.shm_prefix));
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return Invalid("tls_cert_file and tls_key_file must be set together");
  }
  return absl::OkStatus();
}

absl::Status CheckEndpoints(const DaemonConfig& c) {
  RETURN_IF_ERROR(CheckAddress("control_address", c.control_address));
  if (!c.metrics_address.empty()) {
    RETURN_IF_ERROR(CheckAddress("metrics_address", c.metrics_address));
  }
  if (!IsLoopback(c.control_address) && c.control_token_file.empty()) {
    return Invalid(absl::StrFormat(
        "control_token_file is required when control_address is not "
        "loopback (got '%s')",
        c.control_address));
  }
  return CheckPaths(c);
}

}  // namespace

absl::Status ValidateConfig(const DaemonConfig& config) {
  for (const Option& option : Options()) {
    if (option.check) RETURN_IF_ERROR(option.check(config));
  }
  if (absl::Status s = config.selection.Validate(); !s.ok()) {
    return Invalid(absl::StrCat("selection: ", s.message()));
  }
  if (config.rank > config.max_rank) {
    return Invalid(absl::StrFormat("rank must be <= max_rank (got %d > %d)",
                                   config.rank, config.max_rank));
  }
  if (config.rank_timeout_ms <= config.heartbeat_interval_ms) {
    return Invalid(absl::StrFormat(
        "rank_timeout_ms must be > heartbeat_interval_ms (got %d <= %d)",
        config.rank_timeout_ms, config.heartbeat_interval_ms));
  }
  return CheckEndpoints(config);
}

absl::StatusOr<DaemonConfig> LoadConfigFromString(
    const std::string& yaml, const std::string& file_name,
    const std::vector<std::string>& flags) {
  DaemonConfig config;
  RETURN_IF_ERROR(
      ApplyYaml(yaml, file_name.empty() ? "<config>" : file_name, config));
  RETURN_IF_ERROR(ApplyFlags(flags, config));
  FillMachineDefaults(config);
  // --help must work even beside a bad value, so the user can look it up.
  if (!config.help) RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

absl::StatusOr<DaemonConfig> LoadConfig(int argc, const char* const* argv) {
  std::vector<std::string> flags;
  std::string file;
  bool have_file = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg != "--config" && !absl::StartsWith(arg, "--config=")) {
      flags.push_back(arg);
      continue;
    }
    if (have_file) return Invalid("--config given more than once");
    if (arg == "--config") {
      if (i + 1 >= argc) return Invalid("--config: missing value");
      file = argv[++i];
    } else {
      file = arg.substr(std::strlen("--config="));
    }
    have_file = true;
  }
  std::string yaml;
  if (have_file) {
    ASSIGN_OR_RETURN(yaml, ReadFile(file));
  }
  return LoadConfigFromString(yaml, file, flags);
}

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
      "  --help\n      Print this help and exit\n";
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
