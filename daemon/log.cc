#include "daemon/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gift::daemon {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      "log_level must be debug, info, warning or error (got '" + name + "')");
}

std::string Clip(absl::string_view s) {
  if (s.size() <= kClipBytes) return absl::CHexEscape(s);
  return absl::StrCat(absl::CHexEscape(s.substr(0, kClipBytes)), "\u2026(",
                      s.size(), " bytes)");
}

bool LogLimiter::Allow(int64_t* held_back) {
  const absl::Time now = absl::Now();
  if (now < next_) {
    ++held_back_;
    return false;
  }
  next_ = now + every_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void LogLine(LogLevel level, const std::string& message) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  std::string line = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                      absl::UTCTimeZone());
  line += ' ';
  line += kLetters[static_cast<int>(level)];
  line += ' ';
  for (char c : message) line += (c == '\n' ? ' ' : c);
  line += '\n';
  // One write per line: lines from several threads never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace gift::daemon
