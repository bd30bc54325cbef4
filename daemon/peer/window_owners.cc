#include "daemon/peer/window_owners.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace gift::daemon {

bool Sketched(const v1::PeerLayerPlan& l) {
  return l.candidate() || l.selected();
}

std::vector<std::string> OwnersOf(const v1::PeerPlan& plan) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(plan.layers_size()));
  for (const v1::PeerLayerPlan& l : plan.layers()) out.push_back(l.owner());
  return out;
}

void WindowOwners::Adopt(const v1::PeerPlan& plan) {
  if (plan.layers_size() == 0) return;
  owner_.clear();
  for (const v1::PeerLayerPlan& l : plan.layers()) {
    if (!l.owner().empty()) owner_[l.name()] = l.owner();
  }
  if (plan.members_size() == 0) return;
  last_members_.clear();
  for (const v1::Member& m : plan.members()) last_members_.push_back(m.node());
}

void WindowOwners::Assign(v1::PeerPlan& plan) {
  const int n = plan.members_size();
  if (n == 0) return;
  std::vector<std::string> nodes;
  std::map<std::string, int> member_of;
  for (int j = 0; j < n; ++j) {
    nodes.push_back(plan.members(j).node());
    member_of.emplace(nodes.back(), j);
  }
  // The sketched layers each member keeps, and those that need an owner.
  std::vector<std::vector<int>> owned(static_cast<size_t>(n));
  std::vector<int> unowned;
  for (int i = 0; i < plan.layers_size(); ++i) {
    v1::PeerLayerPlan& l = *plan.mutable_layers(i);
    if (!Sketched(l)) {
      l.clear_owner();
      continue;
    }
    auto kept = owner_.find(l.name());
    auto m =
        kept == owner_.end() ? member_of.end() : member_of.find(kept->second);
    if (m == member_of.end()) {
      unowned.push_back(i);
    } else {
      owned[static_cast<size_t>(m->second)].push_back(i);
    }
  }
  auto load = [&owned](int j) { return owned[static_cast<size_t>(j)].size(); };
  if (nodes != last_members_) {
    // New members (typically the followers joining at the start, after the
    // leader took every layer): even out, moving as few layers as possible.
    while (true) {
      int lo = 0, hi = 0;
      for (int j = 1; j < n; ++j) {
        if (load(j) < load(lo)) lo = j;
        if (load(j) > load(hi)) hi = j;
      }
      if (load(hi) <= load(lo) + 1) break;
      owned[static_cast<size_t>(lo)].push_back(
          owned[static_cast<size_t>(hi)].back());
      owned[static_cast<size_t>(hi)].pop_back();
    }
    last_members_ = nodes;
  }
  for (int i : unowned) {
    // The member with the fewest, ties broken from i % n on (the old
    // default owner when loads are equal).
    int best = i % n;
    for (int s = 1; s < n; ++s) {
      const int j = (i + s) % n;
      if (load(j) < load(best)) best = j;
    }
    owned[static_cast<size_t>(best)].push_back(i);
  }
  owner_.clear();
  for (int j = 0; j < n; ++j) {
    for (int i : owned[static_cast<size_t>(j)]) {
      v1::PeerLayerPlan& l = *plan.mutable_layers(i);
      l.set_owner(nodes[static_cast<size_t>(j)]);
      owner_[l.name()] = nodes[static_cast<size_t>(j)];
    }
  }
}

}  // namespace gift::daemon
