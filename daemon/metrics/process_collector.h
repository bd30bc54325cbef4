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
// read from /proc/self (Linux) when scraped: a prometheus-cpp Collectable,
// registered with the exposer beside the registry (prometheus-cpp has no
// process collector of its own).
//
//   auto process = std::make_shared<metrics::ProcessCollector>();
//   exposer->RegisterCollectable(process);
//
// Thread safety: Collect() may be called from any thread.
#ifndef GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_
#define GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

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

class ProcessCollector : public prometheus::Collectable {
 public:
  // The six families with this process' values now. When /proc cannot be
  // read, the values of the last good read (none before the first).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  mutable std::vector<prometheus::MetricFamily> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_PROCESS_COLLECTOR_H_
