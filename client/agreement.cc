#include "client/agreement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::client {

absl::StatusOr<std::vector<int64_t>> AgreeOnVersions(
    Transport& comm, const std::vector<std::vector<int64_t>>& held,
    AgreementStats* stats) {
  const size_t n = held.size();
  std::vector<int64_t> v(2 * n);
  for (size_t i = 0; i < n; ++i) {
    int64_t newest = kNoVersion;
    for (int64_t version : held[i]) {
      if (version < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("agreement slot ", i, ": negative version ", version));
      }
      newest = std::max(newest, version);
    }
    v[i] = newest;
    v[n + i] = -newest;
  }
  if (stats != nullptr) stats->rounds = 1;
  if (n == 0) return std::vector<int64_t>();
  RETURN_IF_ERROR(comm.AllReduce(v.data(), v.data(), v.size(), DataType::kInt64,
                                 ReduceOp::kMin));
  std::vector<int64_t> agreed(v.begin(), v.begin() + n);
  // Slots where ranks disagree: does everyone hold the minimum?
  std::vector<size_t> split;
  for (size_t i = 0; i < n; ++i) {
    if (agreed[i] != -v[n + i] && agreed[i] != kNoVersion) split.push_back(i);
  }
  if (split.empty()) return agreed;
  std::vector<int64_t> have(split.size());
  for (size_t k = 0; k < split.size(); ++k) {
    const std::vector<int64_t>& h = held[split[k]];
    have[k] = std::find(h.begin(), h.end(), agreed[split[k]]) != h.end();
  }
  RETURN_IF_ERROR(comm.AllReduce(have.data(), have.data(), have.size(),
                                 DataType::kInt64, ReduceOp::kMin));
  if (stats != nullptr) stats->rounds = 2;
  for (size_t k = 0; k < split.size(); ++k) {
    if (have[k] == 0) agreed[split[k]] = kNoVersion;
  }
  return agreed;
}

}  // namespace gift::client
