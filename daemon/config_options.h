// The one table of giftd's options behind config.h: each option's name, help,
// parser, printer and own range check. config.cc reads YAML and flags through
// it and runs the checks; config_options.cc prints it (--print-config, --help,
// the README table). Every use is a loop over the table, so an option cannot
// be parseable but undocumented, or printed but not readable back. Internal
// to gift_daemon_config.
//
//   const internal::Option* o = internal::FindOption("refresh-interval");
//   if (o != nullptr) RETURN_IF_ERROR(o->set("100", config));
//
// Thread safety: the table is built once, on first use, and is immutable.
#ifndef GIFT_DAEMON_CONFIG_OPTIONS_H_
#define GIFT_DAEMON_CONFIG_OPTIONS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config.h"

namespace gift::daemon::internal {

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

// Every option, in --help order, with group and default_text filled in.
const std::vector<Option>& Options();

// The option named `name`, '-' accepted for '_' so flags read naturally
// (--refresh-interval); nullptr when there is none.
const Option* FindOption(std::string name);

// "--" + the name with '-' for '_': selection.top_k -> --selection.top-k.
std::string FlagName(const std::string& name);

// `s` double-quoted as YAML, so that "" and special characters read back
// unchanged. In config.cc, beside the YAML reader.
std::string YamlQuoted(const std::string& s);

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_CONFIG_OPTIONS_H_
