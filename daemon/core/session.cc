#include "daemon/core/session.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::daemon {

absl::StatusOr<std::unique_ptr<RankSession>> RankSession::Create(
    const SessionSpec& spec) {
  std::unique_ptr<RankSession> s(new RankSession(spec));
  const auto n = static_cast<uint32_t>(spec.layers.size());
  ASSIGN_OR_RETURN(
      s->control_,
      shm::CreateRegion(shm::RegionKind::kPosix, spec.name_prefix + "-ctl",
                        shm::ControlBlockBytes(n), 0));
  shm::InitControlBlock(s->control_->data(), spec.daemon_instance,
                        spec.session_id, spec.rank, spec.world_size,
                        spec.layers);
  for (uint32_t i = 0; i < n; ++i) {
    const shm::LayerGeometry g = shm::GeometryOf(spec.layers[i]);
    s->geometry_.push_back(g);
    const auto layout =
        shm::LayerRegionLayout::Compute(g.d_in, g.r_cap, g.k_cap);
    ASSIGN_OR_RETURN(std::unique_ptr<shm::Region> r,
                     shm::CreateRegion(spec.data_kind,
                                       absl::StrCat(spec.name_prefix, "-L", i),
                                       layout.bytes, spec.device));
    std::memcpy(&shm::Entry(s->control_->data(), i)->region, &r->desc(),
                sizeof(shm::RegionDesc));
    s->data_.push_back(std::move(r));
    s->full_.emplace_back();
  }
  s->last_counters.assign(n, shm::LayerCounters{});
  s->consumed.assign(n, -1);
  return s;
}

absl::Status RankSession::EnsureFullRegion(int i) {
  if (full_[i] != nullptr) return absl::OkStatus();
  shm::LayerEntry* e = entry(i);
  const auto layout = shm::FullRegionLayout::Compute(geometry_[i].d_in);
  ASSIGN_OR_RETURN(
      full_[i], shm::CreateRegion(spec_.data_kind,
                                  absl::StrCat(spec_.name_prefix, "-F", i, "-g",
                                               ++full_generation_),
                                  layout.bytes, spec_.device));
  shm::RegionDesc desc = full_[i]->desc();
  desc.generation = full_generation_;
  std::memcpy(&e->full_region, &desc, sizeof(desc));
  return absl::OkStatus();
}

}  // namespace gift::daemon
