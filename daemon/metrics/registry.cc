#include "daemon/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <type_traits>
#include <utility>
#include <variant>

#include "daemon/metrics/text_format.h"

namespace gift::metrics {
namespace {

// Misuse of the registry is a programming error caught at start-up; abort
// loudly rather than export a series that Prometheus would reject.
[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gift metrics: fatal: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// std::atomic<double>::fetch_add is C++20 but not lock-free everywhere;
// a CAS loop is, and contention here is low.
void AtomicAdd(std::atomic<double>* a, double v) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

void CheckBounds(const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      Die("histogram bucket bound " + FormatValue(bounds[i]) +
          " is not finite (+Inf is implicit)");
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      Die("histogram bucket bounds not strictly increasing at " +
          FormatValue(bounds[i]));
    }
  }
}

void CheckNames(const std::string& name, const std::vector<std::string>& labels,
                MetricType type) {
  if (!IsValidMetricName(name)) Die("invalid metric name \"" + name + "\"");
  constexpr std::string_view kTotal = "_total";
  if (type == MetricType::kCounter &&
      (name.size() <= kTotal.size() ||
       name.compare(name.size() - kTotal.size(), kTotal.size(), kTotal) != 0)) {
    Die("counter \"" + name + "\" must end in _total");
  }
  std::set<std::string> seen;
  for (const std::string& label : labels) {
    if (!IsValidLabelName(label)) {
      Die("metric \"" + name + "\": invalid label name \"" + label + "\"");
    }
    if (type == MetricType::kHistogram && label == "le") {
      Die("histogram \"" + name + "\": label name \"le\" is reserved");
    }
    if (!seen.insert(label).second) {
      Die("metric \"" + name + "\": duplicate label name \"" + label + "\"");
    }
  }
}

template <typename T>
constexpr std::string_view TypeName() {
  if constexpr (std::is_same_v<T, Counter>) return "counter";
  if constexpr (std::is_same_v<T, Gauge>) return "gauge";
  return "histogram";
}

}  // namespace

void Counter::Increment(double v) {
  if (!(v >= 0)) return;  // also drops NaN: a counter never goes down
  AtomicAdd(&value_, v);
}
double Counter::Value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::Set(double v) { value_.store(v, std::memory_order_relaxed); }
void Gauge::Add(double v) { AtomicAdd(&value_, v); }
double Gauge::Value() const { return value_.load(std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  CheckBounds(bounds_);
}

void Histogram::Observe(double v) {
  // Bucket i holds bounds_[i-1] < v <= bounds_[i]; NaN goes to +Inf only
  // (as the Go client does).
  size_t i = std::isnan(v)
                 ? bounds_.size()
                 : std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                       bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::ObserveBuckets(const std::vector<uint64_t>& counts,
                               double sum) {
  if (counts.size() != bounds_.size() + 1) return;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < counts.size(); ++i) {
    counts_[i] += counts[i];
    count_ += counts[i];
  }
  sum_ += sum;
}

void Histogram::Snapshot(std::vector<uint64_t>* cumulative, double* sum,
                         uint64_t* count) const {
  absl::MutexLock lock(&mu_);
  cumulative->resize(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    (*cumulative)[i] = running;
  }
  *sum = sum_;
  *count = count_;
}

template <typename T>
Family<T>::Family(std::string name, std::string help,
                  std::vector<std::string> labels, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)) {}

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != labels_.size()) {
    Die("metric \"" + name_ + "\": " + std::to_string(values.size()) +
        " label values for " + std::to_string(labels_.size()) + " labels");
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[values];
  if (child == nullptr) {
    if constexpr (std::is_same_v<T, Histogram>) {
      child = std::make_unique<Histogram>(bounds_);
    } else {
      child = std::make_unique<T>();
    }
  }
  return *child;
}

template <typename T>
void Family<T>::Remove(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  children_.erase(values);
}

template <typename T>
void Family<T>::AppendTo(std::string* out) const {
  AppendHeader(out, name_, help_, TypeName<T>());
  absl::MutexLock lock(&mu_);
  if constexpr (std::is_same_v<T, Histogram>) {
    std::vector<std::string> les;
    for (double b : bounds_) les.push_back(FormatValue(b));
    les.push_back("+Inf");
    const std::string bucket = name_ + "_bucket";
    std::vector<uint64_t> cumulative;
    double sum;
    uint64_t count;
    for (const auto& [values, child] : children_) {
      child->Snapshot(&cumulative, &sum, &count);
      for (size_t i = 0; i < les.size(); ++i) {
        AppendSample(out, bucket, labels_, values, FormatValue(cumulative[i]),
                     les[i]);
      }
      AppendSample(out, name_ + "_sum", labels_, values, FormatValue(sum));
      AppendSample(out, name_ + "_count", labels_, values, FormatValue(count));
    }
  } else {
    for (const auto& [values, child] : children_) {
      AppendSample(out, name_, labels_, values, FormatValue(child->Value()));
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct Registry::Entry {
  std::vector<std::string> series;  // every sample name the family emits
  std::variant<std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>,
               std::unique_ptr<Family<Histogram>>>
      family;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Family<Counter>& Registry::AddCounter(const std::string& name,
                                      const std::string& help,
                                      const std::vector<std::string>& labels) {
  CheckNames(name, labels, MetricType::kCounter);
  auto* family = new Family<Counter>(name, help, labels, {});
  Insert(std::make_unique<Entry>(
      Entry{{name}, std::unique_ptr<Family<Counter>>(family)}));
  return *family;
}

Family<Gauge>& Registry::AddGauge(const std::string& name,
                                  const std::string& help,
                                  const std::vector<std::string>& labels) {
  CheckNames(name, labels, MetricType::kGauge);
  auto* family = new Family<Gauge>(name, help, labels, {});
  Insert(std::make_unique<Entry>(
      Entry{{name}, std::unique_ptr<Family<Gauge>>(family)}));
  return *family;
}

Family<Histogram>& Registry::AddHistogram(
    const std::string& name, const std::string& help,
    const std::vector<std::string>& labels, std::vector<double> bounds) {
  CheckNames(name, labels, MetricType::kHistogram);
  CheckBounds(bounds);
  auto* family = new Family<Histogram>(name, help, labels, std::move(bounds));
  std::vector<std::string> series = {name, name + "_bucket", name + "_sum",
                                     name + "_count"};
  Insert(std::make_unique<Entry>(
      Entry{std::move(series), std::unique_ptr<Family<Histogram>>(family)}));
  return *family;
}

void Registry::Insert(std::unique_ptr<Entry> entry) {
  absl::MutexLock lock(&mu_);
  for (const auto& existing : families_) {
    for (const std::string& s : entry->series) {
      if (std::find(existing->series.begin(), existing->series.end(), s) !=
          existing->series.end()) {
        Die("duplicate metric name \"" + s + "\"");
      }
    }
  }
  families_.push_back(std::move(entry));
}

std::string Registry::Serialize() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& entry : families_) {
    std::visit([&out](const auto& family) { family->AppendTo(&out); },
               entry->family);
  }
  return out;
}

}  // namespace gift::metrics
