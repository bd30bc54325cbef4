// giftd's log: one line per event on stderr,
//   2026-11-30T10:40:01.123Z I register rank 3 of job "llama" (pid 4711)
// with a level letter (D, I, W, E); lines below the configured level are
// dropped. Lines are written with one write(2) each, so concurrent threads
// never interleave within a line.
//
//   SetLogLevel(LogLevel::kInfo);
//   LOG_INFO("reaped rank %d: %s", rank, reason);
//
// Strings that come from a rank or an operator (layer names, ids, keys) go
// into errors and lines through Clip, so that a megabyte name neither floods
// the log nor overflows a gRPC status; a source that may repeat itself every
// poll (a rank writing garbage) goes through a LogLimiter.
//
//   LOG_WARNING("unknown layer '%s'", Clip(name));
//   int64_t held_back;
//   if (limiter.Allow(&held_back)) LOG_WARNING("... (%d more)", held_back);
//
// Thread safety: the functions are thread-safe; a LogLimiter is not (its
// owner's lock guards it).
#ifndef GIFT_DAEMON_LOG_H_
#define GIFT_DAEMON_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::daemon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

// Bytes of a string Clip keeps.
inline constexpr size_t kClipBytes = 64;
// `s` for a message: its first kClipBytes bytes with non-printable ones
// escaped (C-style), then "…(N bytes)" when it was longer.
std::string Clip(absl::string_view s);

// Lets one line through per `every` and counts the ones it held back.
class LogLimiter {
 public:
  explicit LogLimiter(absl::Duration every) : every_(every) {}
  // True when a line may go out now; *held_back is then the number of lines
  // held back since the last one.
  bool Allow(int64_t* held_back);

 private:
  absl::Duration every_;
  absl::Time next_ = absl::InfinitePast();
  int64_t held_back_ = 0;
};

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
