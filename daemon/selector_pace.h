// The plan pace of the layer selector (selector.h, step 7): after the
// warm-up, the moves the policy makes for its own reasons (a layer entering
// or leaving the candidates or the GIFT path, an early refresh) take effect
// at most once per `plan_interval_steps`, all pending ones together; until
// then the layers keep their state and their reason says so. Urgent moves
// (pins and settings, audit removals, a gain below −min_gain, a resumed
// layer's first) open the gate at once, and pending moves ride along.
// Internal to gift_selector; runs after the stages (selector_stages.h).
//
//   internal::ApplyPlanPace(policy, clock, /*forced=*/false,
//                           &last_paced_step, rows, &decision);
//
// Thread safety: a pure function of its arguments.
#ifndef GIFT_DAEMON_SELECTOR_PACE_H_
#define GIFT_DAEMON_SELECTOR_PACE_H_

#include <cstdint>
#include <vector>

#include "daemon/selector.h"
#include "daemon/selector_stages.h"

namespace gift::daemon::internal {

// Lets the rows' moves through, or holds them (restoring each moved row's
// previous candidate/selected state, marking it held and saying until which
// step), and lists the early refreshes in `d` when the gate is open.
// `clock`: the selector's clock; `forced`: SetPolicy, Resume or a settings
// change asks for every move at once; `*last_paced_step`: the step of the
// last plan change after the warm-up (-1: none), updated when pending moves
// go through. Sets d->next_change_step when it holds a move.
void ApplyPlanPace(const SelectorPolicy& p, int64_t clock, bool forced,
                   int64_t* last_paced_step, std::vector<Row>& rows,
                   SelectionDecision* d);

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_SELECTOR_PACE_H_
