#include "tests/daemon/rank_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::testing_daemon {

absl::StatusOr<RealData> LoadRealData(const std::string& dir) {
  RealData d;
  const char* snaps[] = {"step100", "step290"};
  for (int b = 0; b < 2; ++b) {
    ASSIGN_OR_RETURN(d.fc2_run[b], tools::ReadNpy(absl::StrCat(
                                       dir, "/run/", kFc2[b], ".grad.npy")));
    ASSIGN_OR_RETURN(d.fc1_acts[b],
                     tools::ReadNpy(absl::StrCat(dir, "/snap/step290.", kFc1[b],
                                                 ".acts.npy")));
    for (int s = 0; s < 2; ++s) {
      const std::string p = absl::StrCat(dir, "/snap/", snaps[s], ".");
      ASSIGN_OR_RETURN(d.fc1_snap[s][b],
                       tools::ReadNpy(p + kFc1[b] + ".grad.npy"));
      ASSIGN_OR_RETURN(d.fc2_acts[s][b],
                       tools::ReadNpy(p + kFc2[b] + ".acts.npy"));
    }
  }
  return d;
}

client::EpochPlan RealDataPlan(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& extra) {
  std::vector<client::BucketLayer> l;
  int64_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    l.push_back({.name = std::move(name), .shape = shape, .offset = off});
    off += l.back().size();
  };
  for (int b = 0; b < 2; ++b) {
    add(kFc1[b], {256, kFc1In});
    add(kFc2[b], {64, kFc2In});
  }
  for (const auto& [name, shape] : extra) add(name, shape);
  return *client::EpochPlan::Create(1, off, std::move(l));
}

bool FillRealLayer(const RealData& data, const client::BucketLayer& l, int rank,
                   int64_t step, float* dst) {
  const int w = rank % 4;
  const tools::NpyArray* src = nullptr;
  int64_t index = 0;  // [.., worker] slice number
  for (int b = 0; b < 2; ++b) {
    if (l.name == kFc2[b]) {
      src = &data.fc2_run[b];
      index = (step % 10) * 4 + w;
    } else if (l.name == kFc1[b]) {
      src = &data.fc1_snap[step % 2][b];
      index = w;
    }
  }
  if (src == nullptr) return false;
  std::copy_n(src->data.data() + index * l.size(), l.size(), dst);
  return true;
}

}  // namespace gift::testing_daemon
