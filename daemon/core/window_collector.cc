#include "daemon/core/window_collector.h"

#include <cstdint>

namespace gift::daemon {

bool AddSketch(WindowSum& p, shm::SketchData data) {
  if (p.contributors == 0) {
    p.sum = std::move(data);
    return true;
  }
  int64_t count;
  if (p.sum.meta.k != data.meta.k || p.sum.y.size() != data.y.size() ||
      p.sum.a.size() != data.a.size() ||
      __builtin_add_overflow(p.sum.count, data.count, &count)) {
    return false;
  }
  for (size_t j = 0; j < data.y.size(); ++j) p.sum.y[j] += data.y[j];
  for (size_t j = 0; j < data.a.size(); ++j) p.sum.a[j] += data.a[j];
  p.sum.trace += data.trace;
  p.sum.count = count;
  return true;
}

bool WindowCollector::AddLocal(shm::SketchData data) {
  WindowSum& p = pending_[{data.meta.end_step, data.meta.omega_version}];
  if (!AddSketch(p, std::move(data))) return false;
  ++p.contributors;
  return true;
}

std::optional<WindowSum> WindowCollector::TakeLocal(int live, int* dropped) {
  std::optional<WindowSum> out;
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    if (it->second.contributors < live) continue;
    const Key key = it->first;
    out = std::move(it->second);
    for (auto jt = pending_.begin(); jt != pending_.end();) {
      if (jt->first.first <= key.first) {
        if (jt->first != key) ++*dropped;
        jt = pending_.erase(jt);
      } else {
        ++jt;
      }
    }
    break;
  }
  // Ranks whose windows never line up must not pile sums up.
  while (pending_.size() > kMaxPendingWindows) {
    ++*dropped;
    pending_.erase(pending_.begin());
  }
  return out;
}

void WindowCollector::NameLagging(int64_t end_step, Owned& out) {
  const auto first = owned_.lower_bound({end_step, INT64_MIN});
  auto newest = first;
  for (auto it = first; it != owned_.end() && it->first.first == end_step;
       ++it) {
    newest = it;
  }
  out.basis = newest->first.second;
  for (auto it = first; it != newest; ++it) {
    WindowSum& stale = it->second;
    for (; stale.lagging_named < stale.sources.size(); ++stale.lagging_named) {
      out.lagging.emplace_back(stale.sources[stale.lagging_named],
                               it->first.second);
    }
  }
}

WindowCollector::Owned WindowCollector::AddOwned(const std::string& node,
                                                 int contributors,
                                                 shm::SketchData data,
                                                 int world_size, int* dropped) {
  const Key key{data.meta.end_step, data.meta.omega_version};
  Owned out;
  WindowSum& o = owned_[key];
  if (!AddSketch(o, std::move(data))) {
    out.result = Owned::kMismatch;
    return out;
  }
  o.contributors += contributors;
  o.sources.push_back(node);
  NameLagging(key.first, out);
  if (world_size > 0 && o.contributors >= world_size) {
    if (o.contributors == world_size) {
      out.result = Owned::kComplete;
      out.sum = std::move(o);
    } else {
      out.result = Owned::kTooMany;
      out.contributors = o.contributors;
      out.sources = o.sources;
      ++*dropped;
    }
    for (auto it = owned_.begin();
         it != owned_.end() && it->first.first <= key.first;) {
      if (it->first != key) ++*dropped;
      it = owned_.erase(it);
    }
    return out;
  }
  while (owned_.size() > kOwnedWindows) {
    ++*dropped;
    owned_.erase(owned_.begin());
  }
  return out;
}

}  // namespace gift::daemon
