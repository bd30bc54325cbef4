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

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// above U+10FFFF).
bool ValidUtf8(absl::string_view s) {
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
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

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
  absl::StatusOr<DaemonConfig> c = LoadConfigFromString(yaml, "fuzz.yaml",
                                                        flags);
  if (!c.ok() || c->help || c->help_markdown) return 0;
  if (absl::Status s = ValidateConfig(*c); !s.ok()) {
    Fail("LoadConfigFromString accepted a config ValidateConfig refuses",
         s.ToString());
  }
  // KNOWN BUG (reported, daemon/config.cc internal::YamlQuoted): a string
  // value with bytes that are not UTF-8 is accepted, but --print-config
  // emits them raw and yaml-cpp reads them back as U+FFFD, so the printed
  // config differs or no longer loads (fuzz/regressions/config/
  // invalid_utf8_print_config). Until it is fixed the round trip is checked
  // on UTF-8 input only; delete this guard with the fix.
  if (!ValidUtf8(input)) return 0;
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
