#include "daemon/metrics/process_collector.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"

namespace gift::metrics {
namespace {

// The whole file, or "" when it cannot be read (the parsers then fail).
std::string ReadAll(const char* path) {
  absl::StatusOr<std::string> bytes = ReadRegularFile(path, 1 << 20);
  return bytes.ok() ? *std::move(bytes) : std::string();
}

// Open descriptors of this process (the directory's own is not counted).
double OpenFds() {
  std::error_code ec;
  double n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n > 0 ? n - 1 : 0;
}

double MaxFds() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
    return -1;
  }
  return static_cast<double>(r.rlim_cur);
}

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(const std::string& text,
                                       double ticks_per_second,
                                       double page_bytes) {
  const size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return absl::InvalidArgumentError("/proc stat: no command name");
  }
  // Field 3 (state) is the first after the name; we need 14, 15, 22-24.
  std::vector<std::string> f =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipWhitespace());
  auto field = [&](int n, double* out) {
    const int i = n - 3;
    return i < static_cast<int>(f.size()) &&
           absl::SimpleAtod(absl::StripAsciiWhitespace(f[i]), out);
  };
  double utime, stime, start, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start) ||
      !field(23, &vsize) || !field(24, &rss)) {
    return absl::InvalidArgumentError("/proc stat: missing fields");
  }
  ProcStat s;
  s.cpu_seconds = (utime + stime) / ticks_per_second;
  s.start_since_boot_s = start / ticks_per_second;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * page_bytes;
  return s;
}

absl::StatusOr<double> ParseBootTime(const std::string& proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    double t;
    if (absl::ConsumePrefix(&line, "btime ") &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line), &t)) {
      return t;
    }
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<ProcStat> s =
      ParseProcStat(ReadAll("/proc/self/stat"), ticks, page);
  absl::StatusOr<double> boot = ParseBootTime(ReadAll("/proc/stat"));
  absl::MutexLock lock(&mu_);
  if (!s.ok() || !boot.ok()) return last_;
  using prometheus::MetricType;
  auto family = [](const char* name, const char* help, MetricType type,
                   double value) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    f.metric.resize(1);
    if (type == MetricType::Counter) {
      f.metric[0].counter.value = value;
    } else {
      f.metric[0].gauge.value = value;
    }
    return f;
  };
  last_ = {
      family("process_cpu_seconds_total",
             "Total user and system CPU time spent in seconds.",
             MetricType::Counter, s->cpu_seconds),
      family("process_resident_memory_bytes", "Resident memory size in bytes.",
             MetricType::Gauge, s->resident_bytes),
      family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
             MetricType::Gauge, s->virtual_bytes),
      family("process_open_fds", "Number of open file descriptors.",
             MetricType::Gauge, OpenFds()),
      family("process_max_fds", "Maximum number of open file descriptors.",
             MetricType::Gauge, MaxFds()),
      family("process_start_time_seconds",
             "Start time of the process since unix epoch in seconds.",
             MetricType::Gauge, *boot + s->start_since_boot_s),
  };
  return last_;
}

}  // namespace gift::metrics
