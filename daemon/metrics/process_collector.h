// The standard Prometheus process metrics of the running process (the names
// every client library exports, so stock dashboards and alerts work):
//
//   process_cpu_seconds_total       counter  user + system CPU time
//   process_resident_memory_bytes   gauge    resident set size
//   process_virtual_memory_bytes    gauge    virtual memory size
//   process_open_fds                gauge    open file descriptors
//   process_max_fds                 gauge    RLIMIT_NOFILE (soft)
//   process_start_time_seconds      gauge    start time, Unix seconds
//
// read from /proc/self (Linux). The registry has no scrape-time callbacks,
// so a collector thread refreshes the values every `period`; a scrape sees
// values at most one period old.
//
//   metrics::Registry registry;
//   metrics::ProcessCollector process(&registry);  // refreshes every 1 s
//
// Thread safety: Update() may be called from any thread (the families are
// thread-safe); the collector thread stops in the destructor.
#ifndef GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_
#define GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/metrics/registry.h"

namespace gift::metrics {

// What /proc/<pid>/stat holds that the collector exports.
struct ProcStat {
  double cpu_seconds = 0;         // utime + stime
  double start_since_boot_s = 0;  // starttime
  double virtual_bytes = 0;       // vsize
  double resident_bytes = 0;      // rss pages * page size
};

// Parses the text of /proc/<pid>/stat (fields after the parenthesised
// command name, which may itself hold spaces and parentheses).
// INVALID_ARGUMENT when fields are missing or not numbers.
absl::StatusOr<ProcStat> ParseProcStat(const std::string& text,
                                       double ticks_per_second,
                                       double page_bytes);

// The "btime" line of /proc/stat: boot time in Unix seconds.
absl::StatusOr<double> ParseBootTime(const std::string& proc_stat);

class ProcessCollector {
 public:
  // Creates the six families in `registry` and starts refreshing them every
  // `period` (first refresh before returning). Zero period: no thread, the
  // caller calls Update(). REQUIRES: registry outlives the collector; no
  // other family of these names in it.
  explicit ProcessCollector(Registry* registry,
                            absl::Duration period = absl::Seconds(1));
  ~ProcessCollector();
  ProcessCollector(const ProcessCollector&) = delete;
  ProcessCollector& operator=(const ProcessCollector&) = delete;

  // Reads /proc/self once and sets every value. An error (no /proc) leaves
  // the previous values.
  absl::Status Update();

 private:
  void Loop(absl::Duration period);

  Counter& cpu_;
  Gauge& resident_;
  Gauge& virtual_;
  Gauge& open_fds_;
  Gauge& max_fds_;
  Gauge& start_time_;
  absl::Mutex mu_;
  double last_cpu_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_
