// Per-step agreement on the plan epoch and the factor versions (DESIGN §4).
//
// Every rank describes, per slot (slot 0: bucket plan epochs, then one slot
// per layer: factor versions), the versions it holds locally. The job takes,
// per slot, the minimum over ranks of each rank's newest version: the
// slowest rank's view, so a slow or dead daemon only delays a switch. A
// version is used only if every rank holds it; otherwise the slot gets
// kNoVersion on every rank (a layer then goes down the Euclidean path for
// this step, everywhere). Nothing depends on timing: every rank computes the
// same answer from the same reductions.
//
// Cost: one MIN-allreduce of 2·slots int64 (newest and −newest, giving the
// minimum and the maximum). Only when the ranks disagree on some slot (the
// short window around a switch), a second MIN-allreduce of "holds the
// minimum" bits settles it.
//
//   std::vector<std::vector<int64_t>> held = {{3, 4}, {7}, {}};
//   ASSIGN_OR_RETURN(std::vector<int64_t> agreed,
//                    AgreeOnVersions(*comm, held));
//   // agreed[0] is the epoch to use, agreed[i] a version or kNoVersion.
//
// Thread safety: a collective; see Transport.
#ifndef GIFT_CLIENT_AGREEMENT_H_
#define GIFT_CLIENT_AGREEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/transport.h"

namespace gift::client {

inline constexpr int64_t kNoVersion = -1;

struct AgreementStats {
  // Allreduce rounds used by the last call: 1 or 2.
  int rounds = 0;
};

// Collective. REQUIRES: every rank passes the same number of slots; versions
// >= 0. INVALID_ARGUMENT for a negative version (checked before anything is
// sent, so all ranks must be consistent for it not to hang the others: the
// caller validates its inputs).
absl::StatusOr<std::vector<int64_t>> AgreeOnVersions(
    Transport& comm, const std::vector<std::vector<int64_t>>& held,
    AgreementStats* stats = nullptr);

}  // namespace gift::client

#endif  // GIFT_CLIENT_AGREEMENT_H_
