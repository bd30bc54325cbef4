// libFuzzer target: giftd's configuration loader (daemon/config.h) on any
// YAML text and flags. Input: the YAML text, then optionally a NUL byte and
// flags, one per line (at most 16), as giftd's command line would give them.
// What it checks beyond "no crash, no sanitizer report, no exception":
//  * a config LoadConfigFromString accepts passes ValidateConfig;
//  * --print-config reads back unchanged: FormatConfig(c), loaded again,
//    formats to the same text (config.h promises this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/config.h"

namespace {

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_config: invariant violated: %s\n%s\n", what,
               detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gift::daemon;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml(input.substr(0, nul));
  std::vector<std::string> flags;
  if (nul != absl::string_view::npos) {
    for (absl::string_view f : absl::StrSplit(input.substr(nul + 1), '\n')) {
      if (flags.size() == 16) break;
      flags.emplace_back(f);
    }
  }
  absl::StatusOr<DaemonConfig> c =
      LoadConfigFromString(yaml, "fuzz.yaml", flags);
  if (!c.ok() || c->help || c->help_markdown) return 0;
  if (absl::Status s = ValidateConfig(*c); !s.ok()) {
    Fail("LoadConfigFromString accepted a config ValidateConfig refuses",
         s.ToString());
  }
  const std::string printed = FormatConfig(*c);
  absl::StatusOr<DaemonConfig> again =
      LoadConfigFromString(printed, "print-config.yaml", {});
  if (!again.ok()) {
    Fail("--print-config output does not load",
         again.status().ToString() + "\n" + printed);
  }
  if (FormatConfig(*again) != printed) {
    Fail("--print-config output does not read back unchanged", printed);
  }
  return 0;
}
