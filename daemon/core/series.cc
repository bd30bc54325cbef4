#include "daemon/core/series.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/wire_format.h"

namespace gift::daemon {
namespace {

constexpr const char* kPaths[2] = {"euclid", "gift"};

PathPair ByPath(metrics::Family<metrics::Gauge>* family,
                const JobLayout& layout, const std::string& layer) {
  PathPair out;
  for (int p = 0; p < 2; ++p) {
    out[p] = LazyGauge(family,
                       layout.Labels({{"layer", layer}, {"path", kPaths[p]}}));
  }
  return out;
}

}  // namespace

void SeriesCache::Check() {
  if (layout_->generation() != generation_) {
    generation_ = layout_->generation();
    ranks_.clear();
    layers_.clear();
    polls_ = {};
  }
}

metrics::Counter& SeriesCache::Polls(bool quiet) {
  Check();
  metrics::Counter*& c = polls_[quiet ? 1 : 0];
  if (c == nullptr) {
    c = &m_->polls->Add(layout_->Labels({{"kind", quiet ? "quiet" : "full"}}));
  }
  return *c;
}

RankSeries& SeriesCache::Rank(int rank) {
  Check();
  const JobLayout& layout = *layout_;
  auto [it, added] = ranks_.try_emplace(rank);
  RankSeries& s = it->second;
  const std::string r = absl::StrCat(rank);
  if (added) {
    const metrics::Labels by_rank = layout.Labels({{"rank", r}});
    s.steps = &m_->steps->Add(by_rank);
    const char* paths[4] = {"euclid", "gift", "control", "audit"};
    for (int p = 0; p < 4; ++p) {
      s.bytes_sent[p] = &m_->bytes_sent->Add(
          layout.Labels({{"rank", r}, {"path", paths[p]}}));
    }
    s.audit_steps = &m_->audit_steps->Add(by_rank);
    s.audit_seconds = &m_->audit_seconds->Add(by_rank);
    s.bytes_saved = &m_->bytes_saved->Add(by_rank);
    s.transform_seconds = &m_->transform_seconds->Add(by_rank);
    s.nonfinite_layers = &m_->nonfinite_layers->Add(by_rank);
    s.collective_duration =
        &m_->collective_duration->Add(by_rank, m_->duration_bounds);
    s.rank_step = &m_->rank_step->Add(by_rank);
    s.heartbeat_age = &m_->heartbeat_age->Add(by_rank);
  }
  // Layers are only appended within one layout generation (Adopt).
  const std::vector<JobLayer>& layers = layout.layers();
  for (size_t i = s.layers.size(); i < layers.size(); ++i) {
    const std::string& name = layers[i].name;
    RankLayerSeries l;
    for (int p = 0; p < 2; ++p) {
      const metrics::Labels labels =
          layout.Labels({{"rank", r}, {"layer", name}, {"path", kPaths[p]}});
      l.rel_l2[p] = LazyGauge(m_->rel_l2, labels);
      l.cosine[p] = LazyGauge(m_->cosine, labels);
    }
    l.upper = &m_->boundary_hits->Add(
        layout.Labels({{"rank", r}, {"layer", name}, {"bound", "upper"}}));
    l.lower = &m_->boundary_hits->Add(
        layout.Labels({{"rank", r}, {"layer", name}, {"bound", "lower"}}));
    const metrics::Labels by_layer =
        layout.Labels({{"rank", r}, {"layer", name}});
    l.quantized = &m_->quantized_elements->Add(by_layer);
    l.nonfinite = &m_->nonfinite_inputs->Add(by_layer);
    l.bytes = &m_->layer_bytes_sent->Add(by_layer);
    s.layers.push_back(std::move(l));
  }
  return s;
}

LayerSeries& SeriesCache::Layer(int i) {
  Check();
  const JobLayout& layout = *layout_;
  const std::vector<JobLayer>& layers = layout.layers();
  for (size_t j = layers_.size(); j < layers.size(); ++j) {
    const std::string& name = layers[j].name;
    const metrics::Labels labels = layout.Labels({{"layer", name}});
    LayerSeries l;
    l.selected = &m_->layer_selected->Add(labels);
    l.candidate = &m_->layer_candidate->Add(labels);
    l.vulnerability = &m_->vulnerability->Add(labels);
    l.gain = &m_->gain->Add(labels);
    l.factor_version = &m_->factor_version->Add(labels);
    l.factor_age = &m_->factor_age->Add(labels);
    l.audit_rel_l2 = ByPath(m_->audit_rel_l2, layout, name);
    l.audit_cosine = ByPath(m_->audit_cosine, layout, name);
    l.audit_drift = ByPath(m_->audit_drift, layout, name);
    l.probe_rel_l2 = ByPath(m_->probe_rel_l2, layout, name);
    layers_.push_back(std::move(l));
  }
  return layers_[i];
}

void SeriesCache::SetFormat(int i, int code) {
  LayerSeries& l = Layer(i);
  if (code == l.format_code) return;
  const JobLayout& layout = *layout_;
  const std::string& name = layout.layers()[i].name;
  for (int c = 0; c <= kernels::WireFormat::kMxfp4Code; ++c) {
    // The first time: every other format's series (a layer of the same
    // name in an earlier layout of this job may have left one).
    if (c == code || (l.format_code >= 0 && c != l.format_code)) continue;
    metrics::RemoveSeries(
        m_->layer_format,
        layout.Labels({{"layer", name},
                       {"format", kernels::WireFormatName(
                                      kernels::WireFormat::FromCode(c))}}));
  }
  if (code >= 0) {
    m_->layer_format
        ->Add(layout.Labels(
            {{"layer", name},
             {"format",
              kernels::WireFormatName(kernels::WireFormat::FromCode(code))}}))
        .Set(1);
  }
  l.format_code = code;
}

}  // namespace gift::daemon
