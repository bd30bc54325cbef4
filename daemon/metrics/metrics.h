// giftd's metrics are prometheus-cpp's (core + pull, Debian's
// prometheus-cpp-dev): prometheus::Registry, Family<Counter|Gauge|Histogram>
// and the civetweb Exposer (metrics/http_exposer.h). This header names the
// types giftd uses and adds what the library lacks: the text of a registry
// (tests, the fuzzer) and dropping a series by its labels.
//
// One module (daemon/metrics/daemon_metrics.h) creates every family; components
// hold the returned family handles (stable references; a metric name is never
// looked up on a hot path) and pick a series by its labels:
//
//   metrics::Registry registry;
//   auto& steps = prometheus::BuildCounter()
//                     .Name("gift_steps_total").Help("Steps seen.")
//                     .Register(registry);
//   steps.Add({{"rank", "0"}}).Increment();
//   std::string text = metrics::Serialize(registry);
//
// Help text must be one line without backslashes: prometheus-cpp 1.0.1 does
// not escape HELP (label values it does escape).
//
// Thread safety: prometheus-cpp's families and metrics are thread-safe; so
// are these functions.
#ifndef GIFT_DAEMON_METRICS_METRICS_H_
#define GIFT_DAEMON_METRICS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <string>
#include <vector>

namespace gift::metrics {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;
using prometheus::Registry;
template <typename T>
using Family = prometheus::Family<T>;

// The text exposition format 0.0.4 of everything `collectable` holds: what
// GET /metrics returns for it.
std::string Serialize(const prometheus::Collectable& collectable);

// Drops the series with these labels (e.g. a reaped rank's); no-op if
// absent. References to it dangle afterwards: only the owner of the label
// set may remove it.
template <typename T>
void RemoveSeries(Family<T>* family, const Labels& labels) {
  if (family->Has(labels)) family->Remove(&family->Add(labels));
}
// Histograms have no default constructor; the bounds are only used to build
// the (discarded) lookup object.
void RemoveSeries(Family<Histogram>* family, const Labels& labels);

// Adds observations already bucketed elsewhere (e.g. by a rank, read from
// shared memory): counts[i] per bucket (not cumulative, +Inf last) and
// their sum. Ignored unless counts has one entry per bound of `bounds` plus
// one (prometheus-cpp would throw).
void ObserveBuckets(Histogram* histogram, const std::vector<double>& bounds,
                    const std::vector<double>& counts, double sum);

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_METRICS_H_
