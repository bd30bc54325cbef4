// A small Prometheus metrics registry (prometheus-cpp is not in Debian 12):
// counter, gauge and histogram families with labels, and the text
// exposition format 0.0.4 (metrics/text_format.h). The HTTP side lives in
// metrics/http_exposer.h and never touches these types beyond Serialize().
//
// One module (daemon/daemon_metrics.h) creates every family; components hold
// the returned handles (stable pointers; never looked up by name on a hot
// path).
//
//   Registry registry;
//   auto& steps = registry.AddCounter("gift_steps_total", "Steps seen.",
//                                     {"rank"});
//   steps.WithLabels({"0"}).Increment();
//   auto& lat = registry.AddHistogram("gift_refresh_duration_seconds",
//                                     "Refresh time.", {"layer"},
//                                     {0.001, 0.01, 0.1, 1});
//   lat.WithLabels({"fc2"}).Observe(0.02);
//   std::string text = registry.Serialize();
//
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* and not start with "__"; counters end in _total;
// histograms may not use the label "le"; label names within a family are
// distinct; no two families emit the same series name (a histogram "x" also
// takes x_bucket, x_sum and x_count). Violations are programming errors: Add*
// aborts with a message (families are created once at start-up, so a bad name
// never reaches production).
//
// Thread safety: everything is thread-safe. Counter/Gauge updates are
// lock-free atomics; WithLabels and Serialize take the family's mutex.
#ifndef GIFT_DAEMON_METRICS_REGISTRY_H_
#define GIFT_DAEMON_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace gift::metrics {

class Counter {
 public:
  // REQUIRES: v >= 0 (negative increments are ignored).
  void Increment(double v = 1);
  double Value() const;

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v);
  void Add(double v);
  double Value() const;

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // REQUIRES: bounds strictly increasing, finite (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Adds observations already bucketed elsewhere (e.g. by a rank, read
  // from shared memory): counts[i] per bucket (not cumulative, +Inf last;
  // REQUIRES: bounds + 1 entries, else ignored) and their sum.
  void ObserveBuckets(const std::vector<uint64_t>& counts, double sum);
  // Cumulative counts per bound (+Inf last), sum and count, consistent.
  void Snapshot(std::vector<uint64_t>* cumulative, double* sum,
                uint64_t* count) const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket + Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric family: a name, help, label names, and one child per label
// value tuple.
template <typename T>
class Family {
 public:
  // The child with these label values (created on first use). REQUIRES:
  // values.size() == label names size (aborts otherwise).
  T& WithLabels(const std::vector<std::string>& values);
  // Drops a child (e.g. a reaped rank); no-op if absent. References
  // returned by WithLabels for these values dangle afterwards: only the
  // owner of the label tuple may remove it.
  void Remove(const std::vector<std::string>& values);

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::vector<double> bounds);
  // Appends this family's HELP/TYPE lines and samples (text format 0.0.4).
  void AppendTo(std::string* out) const;

  const std::string name_, help_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;  // histograms only
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              const std::vector<std::string>& labels);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          const std::vector<std::string>& labels);
  Family<Histogram>& AddHistogram(const std::string& name,
                                  const std::string& help,
                                  const std::vector<std::string>& labels,
                                  std::vector<double> bounds);

  // Text exposition format 0.0.4: families in creation order, # HELP and
  // # TYPE lines, children sorted by label values, escaped label values and
  // help, histograms as _bucket{le=...}/_sum/_count.
  std::string Serialize() const;

 private:
  struct Entry;
  // Adds a family; aborts when one of its series names is already taken.
  void Insert(std::unique_ptr<Entry> entry);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_REGISTRY_H_
