#include "daemon/core/gauges.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/series.h"
#include "kernels/wire_format.h"
#include "proto/wire_format_proto.h"

namespace gift::daemon {

void Gauges::UpdateLayers() {
  const std::vector<JobLayer>& layers = p_.layout->layers();
  const int64_t step = p_.sessions->SlowestStep();
  for (size_t i = 0; i < layers.size(); ++i) {
    const JobLayer& l = layers[i];
    const int index = static_cast<int>(i);
    const absl::StatusOr<kernels::WireFormat> format =
        FromProto(l.settings.format());
    p_.series->SetFormat(index, format.ok() ? format->code() : -1);
    LayerSeries& series = p_.series->Layer(index);
    series.selected->Set(l.selected);
    series.candidate->Set(l.candidate);
    series.vulnerability->Set(l.score.vulnerability);
    series.gain->Set(l.score.gain);
    series.factor_version->Set(l.factors.newest_version());
    const int64_t factor_step = l.factors.factor_step();
    series.factor_age->Set(
        factor_step < 0 ? 0 : std::max<int64_t>(0, step - factor_step));
  }
}

void Gauges::Update() {
  const JobLayout& layout = *p_.layout;
  DaemonMetrics& m = *p_.metrics;
  UpdateLayers();
  const metrics::Labels labels = layout.Labels({});
  m.selected_layers->Add(labels).Set(layout.SelectedCount());
  m.plan_epoch->Add(labels).Set(p_.planner->epoch());
  m.refresh_interval->Add(labels).Set(p_.planner->refresh_interval());
  m.ranks_registered->Add(labels).Set(p_.sessions->size());
  m.staleness_limit->Add(labels).Set(p_.config->staleness_limit);
  const absl::Time now = absl::Now();
  for (const auto& [id, s] : *p_.sessions) {
    p_.series->Rank(s->rank()).heartbeat_age->Set(
        absl::ToDoubleSeconds(now - s->last_seen));
  }
  if (p_.peers->peered()) UpdatePeer();
  if (PeerLink* l = p_.peers->link(); l != nullptr) UpdateLink(l);
}

void Gauges::UpdateLink(PeerLink* l) {
  const JobLayout& layout = *p_.layout;
  DaemonMetrics& m = *p_.metrics;
  const PeerLinkStats st = l->stats();
  if (!l->is_leader()) {
    m.peer_connected->Add(layout.Labels({})).Set(st.connected);
    if (st.joins != joins_seen_) {
      joins_seen_ = st.joins;
      // (Re)joined: a partition may have kept a factor this daemon
      // computed as an owner from the others, while its ranks already
      // sketch in that factor's basis; every member installs what is
      // newer than its own (the rest is ignored).
      p_.factors->BroadcastNewest(l);
    }
  }
  // The link keeps totals; the counters advance by what is new.
  for (const auto& [dir, list] :
       {std::make_pair("sent", &st.bytes_sent),
        std::make_pair("received", &st.bytes_received)}) {
    for (const auto& [kind, bytes] : *list) {
      int64_t& seen = peer_bytes_seen_[std::string(dir) + "/" + kind];
      if (bytes > seen) {
        m.peer_bytes->Add(layout.Labels({{"direction", dir}, {"kind", kind}}))
            .Increment(static_cast<double>(bytes - seen));
        seen = bytes;
      }
    }
  }
}

void Gauges::UpdatePeer() {
  const metrics::Labels labels = p_.layout->Labels({});
  DaemonMetrics& m = *p_.metrics;
  m.peer_term->Add(labels).Set(static_cast<double>(p_.peers->term()));
  m.peer_coordinated->Add(labels).Set(p_.peers->coordinated() ? 1 : 0);
  PeerLink* l = p_.peers->link();
  m.peer_leader->Add(labels).Set(
      l != nullptr && l->is_leader() && !p_.peers->IsFollower() ? 1 : 0);
}

void Gauges::ResetLinkCounts() {
  peer_bytes_seen_.clear();  // the new link counts from 0
  joins_seen_ = 0;
}

}  // namespace gift::daemon
