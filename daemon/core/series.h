// The Prometheus series giftd sets every poll, looked up once (DESIGN §6).
// A series is picked by its label set (a std::map of strings hashed per
// lookup); per poll that was 14 lookups per rank and layer and 10 per layer,
// about 40% of giftd's CPU with 4 ranks training. SeriesCache builds each
// label set once per job layout and keeps the series' handles: per rank
// (step counters, and per layer its round trip, hits, elements and bytes)
// and per layer (plan state, audits, probes, format).
//
//   SeriesCache cache(&metrics, &layout);
//   cache.Rank(3).layers[i].upper->Increment(hits);
//   cache.Layer(i).gain->Set(g);
//   cache.ForgetRank(3);  // before a leaving rank's gauges are removed
//
// Handles are references into prometheus-cpp's families, valid until the
// series is removed: only ForgetRank's caller (Registrar::DropSession)
// removes series a RankSeries holds, and gift_layer_format's series are
// added and removed here only. A new job layout (JobLayout::generation)
// drops every cached handle, so a series is never set under another job's
// labels.
//
// Thread safety: not thread-safe; the daemon's mutex guards it, like the
// layout.
#ifndef GIFT_DAEMON_CORE_SERIES_H_
#define GIFT_DAEMON_CORE_SERIES_H_

#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "daemon/core/job_layout.h"
#include "daemon/metrics/daemon_metrics.h"

namespace gift::daemon {

// A gauge added to its family on first use (a series that exists only
// once it has a value: a path's round trip, an audit, a probe).
class LazyGauge {
 public:
  LazyGauge() = default;
  LazyGauge(metrics::Family<metrics::Gauge>* family, metrics::Labels labels)
      : family_(family), labels_(std::move(labels)) {}
  metrics::Gauge& operator*() {
    if (gauge_ == nullptr) gauge_ = &family_->Add(labels_);
    return *gauge_;
  }
  metrics::Gauge* operator->() { return &**this; }

 private:
  metrics::Family<metrics::Gauge>* family_ = nullptr;
  metrics::Labels labels_;
  metrics::Gauge* gauge_ = nullptr;
};

// Index 0 Euclidean path, 1 GIFT path.
using PathPair = std::array<LazyGauge, 2>;

// One rank's series of one layer ({job_id, node, rank, layer[, ...]}).
struct RankLayerSeries {
  PathPair rel_l2, cosine;
  metrics::Counter* upper = nullptr;  // boundary hits
  metrics::Counter* lower = nullptr;
  metrics::Counter* quantized = nullptr;
  metrics::Counter* nonfinite = nullptr;
  metrics::Counter* bytes = nullptr;
};

// One rank's series ({job_id, node, rank[, path]}).
struct RankSeries {
  metrics::Counter* steps = nullptr;
  // bytes_sent by path: euclid, gift, control, audit.
  std::array<metrics::Counter*, 4> bytes_sent{};
  metrics::Counter* audit_steps = nullptr;
  metrics::Counter* audit_seconds = nullptr;
  metrics::Counter* bytes_saved = nullptr;
  metrics::Counter* transform_seconds = nullptr;
  metrics::Counter* nonfinite_layers = nullptr;
  metrics::Histogram* collective_duration = nullptr;
  metrics::Gauge* rank_step = nullptr;
  metrics::Gauge* heartbeat_age = nullptr;
  std::vector<RankLayerSeries> layers;  // the layout's order
};

// One layer's series ({job_id, node, layer[, path]}).
struct LayerSeries {
  metrics::Gauge* selected = nullptr;
  metrics::Gauge* candidate = nullptr;
  metrics::Gauge* vulnerability = nullptr;
  metrics::Gauge* gain = nullptr;
  metrics::Gauge* factor_version = nullptr;
  metrics::Gauge* factor_age = nullptr;
  PathPair audit_rel_l2, audit_cosine, audit_drift, probe_rel_l2;
  // The format whose gift_layer_format series is set (-1: none yet).
  int format_code = -1;
};

class SeriesCache {
 public:
  // Both must outlive the cache.
  SeriesCache(DaemonMetrics* metrics, const JobLayout* layout)
      : m_(metrics), layout_(layout) {}

  // Rank `rank`'s series for the layout's layers (built on first use).
  RankSeries& Rank(int rank);
  // Layer i's series. REQUIRES: 0 <= i < layout size.
  LayerSeries& Layer(int i);
  // Sets gift_layer_format{format} of layer i to 1 and removes the series
  // of the format it had (once per change). `code`: WireFormat::code(), or
  // -1 for none (only removes).
  void SetFormat(int i, int code);
  // gift_daemon_polls_total{kind = quiet|full}.
  metrics::Counter& Polls(bool quiet);
  // Drops rank `rank`'s handles: call before removing any of its series.
  void ForgetRank(int rank) { ranks_.erase(rank); }

 private:
  // Drops everything when the layout is another job's or was re-adopted.
  void Check();

  DaemonMetrics* m_;
  const JobLayout* layout_;
  uint64_t generation_ = 0;
  std::map<int, RankSeries> ranks_;
  std::vector<LayerSeries> layers_;
  std::array<metrics::Counter*, 2> polls_{};  // [quiet]
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_SERIES_H_
