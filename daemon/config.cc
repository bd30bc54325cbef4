// giftd's configuration: reading the YAML file and the flags through the
// option table (config_options.h), and the checks that span several options.
// The table itself, and the texts printed from it, are in config_options.cc.
#include "daemon/config.h"

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/types/optional.h"
#include "common/file.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "daemon/config_options.h"
#include "daemon/coord/etcd_client.h"
// GCC 12 reports false dangling-pointer warnings inside yaml-cpp 0.7.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include "yaml-cpp/yaml.h"
#pragma GCC diagnostic pop

namespace gift::daemon {
namespace {

using internal::FindOption;
using internal::Option;
using internal::Options;

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

// ---- where each option was set, for the errors of the checks

// Option name -> where its value was last set: "giftd.yaml:12" or the flag
// as typed ("--refresh-interval").
using Sources = std::map<std::string, std::string>;

// The checks run after every value is in (a cross-field check needs them
// all), so each failing check names the options it is about in a payload
// of its status; LoadConfigFromString turns the first of them that the file
// or a flag set into the message's prefix. ValidateConfig drops the payload.
constexpr char kKeysPayload[] = "gift.daemon.config/keys";

// INVALID_ARGUMENT `msg` about `keys`, the offending option first.
absl::Status Invalid(const std::string& msg,
                     std::vector<std::string> keys = {}) {
  absl::Status s = absl::InvalidArgumentError(msg);
  if (!keys.empty()) {
    s.SetPayload(kKeysPayload, absl::Cord(absl::StrJoin(keys, ",")));
  }
  return s;
}

// `s` about `keys` unless it already names its options.
absl::Status About(absl::Status s, std::vector<std::string> keys) {
  if (s.ok() || s.GetPayload(kKeysPayload).has_value()) return s;
  return Invalid(std::string(s.message()), std::move(keys));
}

// `s` prefixed with where the first of its options that has a source was
// set; unchanged (without the payload) when none has.
absl::Status Locate(const absl::Status& s, const Sources& sources) {
  absl::optional<absl::Cord> keys = s.GetPayload(kKeysPayload);
  const std::string message(s.message());
  if (keys.has_value()) {
    for (absl::string_view key : absl::StrSplit(std::string(*keys), ',')) {
      auto it = sources.find(std::string(key));
      if (it != sources.end()) return Invalid(it->second + ": " + message);
    }
  }
  return absl::Status(s.code(), message);
}

// ---- YAML

std::string Line(const std::string& file, const YAML::Mark& mark) {
  return absl::StrFormat("%s:%d", file, mark.line + 1);
}

absl::Status At(const std::string& file, const YAML::Mark& mark,
                const std::string& msg) {
  return absl::InvalidArgumentError(Line(file, mark) + ": " + msg);
}

absl::Status ApplyYamlMap(const YAML::Node& map, const std::string& prefix,
                          const std::string& file, Sources& sources,
                          DaemonConfig& c) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies (Node is a handle): `it->first` lives in a temporary proxy that
    // dies at the end of the statement.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) return At(file, key.Mark(), "keys must be names");
    std::string name = prefix + key.Scalar();
    if (prefix.empty() && name == "selection") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) {
        return At(file, key.Mark(), "selection: expected a map");
      }
      RETURN_IF_ERROR(ApplyYamlMap(value, "selection.", file, sources, c));
      continue;
    }
    const Option* option = FindOption(name);
    if (option == nullptr) {
      return At(file, key.Mark(), absl::StrCat("unknown key '", name, "'"));
    }
    if (!sources.emplace(option->name, Line(file, key.Mark())).second) {
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
                       Sources& sources, DaemonConfig& c) {
  try {
    YAML::Node root = YAML::Load(yaml);
    if (root.IsNull()) return absl::OkStatus();  // empty or comments only
    if (!root.IsMap()) {
      return At(file, root.Mark(), "expected a map of options");
    }
    return ApplyYamlMap(root, "", file, sources, c);
  } catch (const YAML::Exception& e) {
    return At(file, e.mark, e.msg);
  }
}

// ---- flags

bool IsFlag(const std::string& arg, const char* name) {
  return arg == absl::StrCat("--", name) ||
         arg == absl::StrCat("--", absl::StrReplaceAll(name, {{"-", "_"}}));
}

absl::Status ApplyFlags(const std::vector<std::string>& flags, Sources& sources,
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
    if (IsFlag(arg, "help-markdown")) {
      c.help_markdown = true;
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
    sources[option->name] = flag;  // overrides the file's line
  }
  return absl::OkStatus();
}

// The bound of the config file giftd reads: a full --print-config is about
// 6 KB.
constexpr int64_t kMaxConfigBytes = 1 << 20;

// ---- cross-field checks

// host:port, IPv6 hosts in brackets, numeric port (0 = any free port).
absl::Status CheckAddress(const std::string& name, const std::string& addr) {
  absl::StatusOr<net::SplitAddress> split = net::SplitHostPort(addr);
  if (!split.ok() || split->host.empty()) {
    return Invalid(
        absl::StrFormat(
            "%s must be host:port, IPv6 hosts in brackets (got '%s')", name,
            addr),
        {name});
  }
  if (!net::ParsePort(split->port).ok()) {
    return Invalid(
        absl::StrFormat("%s: port must be a number in 0..65535 (got '%s')",
                        name, split->port),
        {name});
  }
  return absl::OkStatus();
}

absl::Status CheckPaths(const DaemonConfig& c) {
  if (c.node.empty()) return Invalid("node must not be empty", {"node"});
  // sockaddr_un::sun_path holds 108 bytes with the terminating NUL.
  if (!absl::StartsWith(c.agent_socket, "/") || c.agent_socket.size() > 107) {
    return Invalid(
        absl::StrFormat(
            "agent_socket must be an absolute path of at most 107 bytes (got "
            "'%s')",
            c.agent_socket),
        {"agent_socket"});
  }
  // Segment names append to the prefix; keep well inside NAME_MAX (255).
  if (c.shm_prefix.size() < 2 || c.shm_prefix[0] != '/' ||
      c.shm_prefix.find('/', 1) != std::string::npos ||
      c.shm_prefix.size() > 128) {
    // The default prefix is made from the node name.
    return Invalid(
        absl::StrFormat(
            "shm_prefix must be '/' and 1..127 characters without '/' (got "
            "'%s')",
            c.shm_prefix),
        {"shm_prefix", "node"});
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return Invalid("tls_cert_file and tls_key_file must be set together",
                   {"tls_cert_file", "tls_key_file"});
  }
  return absl::OkStatus();
}

// The job token must be there at start, not at the first peer call; giftd
// reads it again when it builds the link (PeerLinkOptions::token).
absl::Status CheckTokenFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadSecretFile(path, "job_token_file");
  if (!token.ok()) return About(token.status(), {"job_token_file"});
  // Stripped like giftd strips it when it reads the token.
  if (absl::StripAsciiWhitespace(*token).empty()) {
    return Invalid(absl::StrFormat("job_token_file '%s' is empty", path),
                   {"job_token_file"});
  }
  return absl::OkStatus();
}

// The coordinator's URI and files; with it the leader is elected, so
// leader_address must be empty and peer_address set.
absl::Status CheckCoordinator(const DaemonConfig& c) {
  const bool any_file =
      !c.coordinator_user.empty() || !c.coordinator_password_file.empty() ||
      !c.coordinator_ca_file.empty() || !c.coordinator_cert_file.empty() ||
      !c.coordinator_key_file.empty();
  if (c.coordinator.empty()) {
    if (!any_file) return absl::OkStatus();
    return Invalid("coordinator_* options need coordinator",
                   {"coordinator", "coordinator_user"});
  }
  if (absl::Status s = coord::ParseCoordinator(c.coordinator).status();
      !s.ok()) {
    return Invalid(std::string(s.message()), {"coordinator"});
  }
  if (c.peer_address.empty()) {
    return Invalid(
        "coordinator needs peer_address (the daemons of a job "
        "elect their leader among themselves)",
        {"coordinator", "peer_address"});
  }
  if (!c.leader_address.empty()) {
    return Invalid(
        absl::StrFormat("leader_address '%s' and coordinator together: with "
                        "a coordinator the leader is elected",
                        c.leader_address),
        {"leader_address", "coordinator"});
  }
  if (c.coordinator_user.empty() != c.coordinator_password_file.empty()) {
    return Invalid(
        "coordinator_user and coordinator_password_file must be set together",
        {"coordinator_user", "coordinator_password_file"});
  }
  if (c.coordinator_cert_file.empty() != c.coordinator_key_file.empty()) {
    return Invalid(
        "coordinator_cert_file and coordinator_key_file must be set together",
        {"coordinator_cert_file", "coordinator_key_file"});
  }
  return absl::OkStatus();
}

absl::Status CheckPeerTls(const DaemonConfig& c) {
  if (c.peer_tls_cert_file.empty() != c.peer_tls_key_file.empty()) {
    return Invalid(
        "peer_tls_cert_file and peer_tls_key_file must be set together",
        {"peer_tls_cert_file", "peer_tls_key_file"});
  }
  if (!c.peer_tls_cert_file.empty() && c.peer_tls_ca_file.empty()) {
    return Invalid("peer_tls_ca_file is required with peer TLS",
                   {"peer_tls_cert_file", "peer_tls_key_file"});
  }
  return absl::OkStatus();
}

bool IsWildcard(const std::string& addr) {
  absl::StatusOr<net::SplitAddress> split = net::SplitHostPort(addr);
  return split.ok() && net::IsWildcardHost(split->host);
}

absl::Status CheckPeer(const DaemonConfig& c) {
  if (c.peer_timeout_ms <= c.poll_interval_ms) {
    return Invalid(
        absl::StrFormat(
            "peer_timeout_ms must be > poll_interval_ms (got %d <= %d)",
            c.peer_timeout_ms, c.poll_interval_ms),
        {"peer_timeout_ms", "poll_interval_ms"});
  }
  RETURN_IF_ERROR(CheckPeerTls(c));
  RETURN_IF_ERROR(CheckCoordinator(c));
  if (c.peer_address.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckAddress("peer_address", c.peer_address));
  const bool elected = !c.coordinator.empty();
  const std::pair<const char*, const std::string*> required[] = {
      {"job_id", &c.job_id},
      {elected ? "" : "leader_address", &c.leader_address},
      {"job_token_file", &c.job_token_file}};
  for (const auto& [name, value] : required) {
    if (*name != '\0' && value->empty()) {
      return Invalid(absl::StrFormat("%s is required with peer_address", name),
                     {name, "peer_address"});
    }
  }
  if (!elected) {
    RETURN_IF_ERROR(CheckAddress("leader_address", c.leader_address));
  }
  if (!c.peer_advertise_address.empty()) {
    RETURN_IF_ERROR(
        CheckAddress("peer_advertise_address", c.peer_advertise_address));
  } else if (IsWildcard(c.peer_address)) {
    return Invalid(
        absl::StrFormat("peer_advertise_address is required when "
                        "peer_address is a wildcard address (got '%s')",
                        c.peer_address),
        {"peer_address"});
  }
  return CheckTokenFile(c.job_token_file);
}

absl::Status CheckEndpoints(const DaemonConfig& c) {
  RETURN_IF_ERROR(CheckAddress("control_address", c.control_address));
  if (!c.metrics_address.empty()) {
    RETURN_IF_ERROR(CheckAddress("metrics_address", c.metrics_address));
  }
  if (!net::IsLoopbackAddress(c.control_address) &&
      c.control_token_file.empty()) {
    return Invalid(absl::StrFormat("control_token_file is required when "
                                   "control_address is not loopback (got '%s')",
                                   c.control_address),
                   {"control_address", "control_token_file"});
  }
  RETURN_IF_ERROR(CheckPaths(c));
  return CheckPeer(c);
}

}  // namespace

std::string internal::YamlQuoted(const std::string& s) {
  YAML::Emitter out;
  out << YAML::DoubleQuoted << s;
  return out.c_str();
}

namespace {

// SelectorPolicy::Validate names the field: "selection.top_k must be ...".
std::vector<std::string> SelectionKey(absl::string_view message) {
  const std::string name(message.substr(0, message.find(' ')));
  if (FindOption(name) == nullptr) return {};
  return {name};
}

// ValidateConfig with the options of each error in its payload.
absl::Status ValidateKeyed(const DaemonConfig& config) {
  for (const Option& option : Options()) {
    if (option.check) {
      RETURN_IF_ERROR(About(option.check(config), {option.name}));
    }
  }
  if (absl::Status s = config.selection.Validate(); !s.ok()) {
    return Invalid(absl::StrCat("selection: ", s.message()),
                   SelectionKey(s.message()));
  }
  if (config.rank > config.max_rank) {
    return Invalid(absl::StrFormat("rank must be <= max_rank (got %d > %d)",
                                   config.rank, config.max_rank),
                   {"rank", "max_rank"});
  }
  if (config.rank_timeout_ms <= config.heartbeat_interval_ms) {
    return Invalid(
        absl::StrFormat(
            "rank_timeout_ms must be > heartbeat_interval_ms (got %d <= %d)",
            config.rank_timeout_ms, config.heartbeat_interval_ms),
        {"rank_timeout_ms", "heartbeat_interval_ms"});
  }
  return CheckEndpoints(config);
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const char* option) {
  return ReadFile(path, kMaxTokenFileBytes, option);
}

absl::Status ValidateConfig(const DaemonConfig& config) {
  return Locate(ValidateKeyed(config), Sources());
}

absl::StatusOr<DaemonConfig> LoadConfigFromString(
    const std::string& yaml, const std::string& file_name,
    const std::vector<std::string>& flags) {
  DaemonConfig config;
  Sources sources;
  RETURN_IF_ERROR(ApplyYaml(yaml, file_name.empty() ? "<config>" : file_name,
                            sources, config));
  RETURN_IF_ERROR(ApplyFlags(flags, sources, config));
  FillMachineDefaults(config);
  // --help must work even beside a bad value, so the user can look it up.
  if (!config.help && !config.help_markdown) {
    if (absl::Status s = ValidateKeyed(config); !s.ok()) {
      return Locate(s, sources);
    }
  }
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
    ASSIGN_OR_RETURN(yaml, ReadFile(file, kMaxConfigBytes, "config file"));
  }
  return LoadConfigFromString(yaml, file, flags);
}

}  // namespace gift::daemon
