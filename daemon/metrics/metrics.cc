#include "daemon/metrics/metrics.h"

#include <prometheus/text_serializer.h>

namespace gift::metrics {

std::string Serialize(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

void RemoveSeries(Family<Histogram>* family, const Labels& labels) {
  if (family->Has(labels)) {
    family->Remove(&family->Add(labels, Histogram::BucketBoundaries{}));
  }
}

void ObserveBuckets(Histogram* histogram, const std::vector<double>& bounds,
                    const std::vector<double>& counts, double sum) {
  if (counts.size() != bounds.size() + 1) return;
  histogram->ObserveMultiple(counts, sum);
}

}  // namespace gift::metrics
