// giftd's log: one line per event on stderr,
//   2026-11-30T10:40:01.123Z I register rank 3 of job "llama" (pid 4711)
// with a level letter (D, I, W, E); lines below the configured level are
// dropped. Lines are written with one write(2) each, so concurrent threads
// never interleave within a line.
//
//   SetLogLevel(LogLevel::kInfo);
//   LOG_INFO("reaped rank %d: %s", rank, reason);
//
// Thread safety: thread-safe.
#ifndef GIFT_DAEMON_LOG_H_
#define GIFT_DAEMON_LOG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace gift::daemon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void Log(LogLevel level, const absl::FormatSpec<Args...>& format,
         const Args&... args) {
  if (LogEnabled(level)) LogLine(level, absl::StrFormat(format, args...));
}

}  // namespace gift::daemon

#define LOG_DEBUG(...) \
  ::gift::daemon::Log(::gift::daemon::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) \
  ::gift::daemon::Log(::gift::daemon::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARNING(...) \
  ::gift::daemon::Log(::gift::daemon::LogLevel::kWarning, __VA_ARGS__)
#define LOG_ERROR(...) \
  ::gift::daemon::Log(::gift::daemon::LogLevel::kError, __VA_ARGS__)

#endif  // GIFT_DAEMON_LOG_H_
