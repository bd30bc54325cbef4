// The plan pace of the layer selector (selector_pace.h).
#include "daemon/selector_pace.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gift::daemon::internal {
namespace {

// A move of `r` the plan pace may not hold: the operator's (pins and
// settings), the audit's, a resumed layer's first, and leaving the GIFT
// path on a gain below −min_gain (whitening measurably hurts: as much worse
// as the guard asks it to be better; a gain just below 0 is noise).
bool Urgent(const SelectorPolicy& p, const Row& r) {
  if (r.settings.pin != PinState::kAuto || r.settings_changed) return true;
  if (r.audit_removed) return true;
  if (r.resumed && !r.has_telemetry) return true;
  return r.was_selected && !r.score.selected && r.score.gain < -p.min_gain;
}

bool Moved(const Row& r) {
  return r.score.candidate != r.was_candidate ||
         r.score.selected != r.was_selected;
}

// The plan pace keeps a layer where it was; its reason says until when and
// what comes then.
void HoldMove(Row& r, int64_t next) {
  const char* was = r.was_selected    ? "selected"
                    : r.was_candidate ? "candidate, not selected"
                                      : "not a candidate";
  const bool say_bar =
      r.barred && r.was_candidate && !r.was_selected &&
      r.score.reason.find("barred by the audit") == std::string::npos;
  r.score.reason = absl::StrCat(was, " until the next plan change (step ", next,
                                "; plan pace); then ", r.score.reason);
  if (say_bar) absl::StrAppend(&r.score.reason, "; ", BarReason(r));
  r.score.candidate = r.was_candidate;
  r.score.selected = r.was_selected;
  // The version goes with the held move; a held leave goes back to the
  // newest version judged to gain, not the one on trial.
  r.accepted =
      r.was_selected && r.was_proven >= 0 ? r.was_proven : r.was_accepted;
  r.proven = r.was_proven;
  r.score.held = true;
}

}  // namespace

void ApplyPlanPace(const SelectorPolicy& p, int64_t clock, bool forced,
                   int64_t* last_paced_step, std::vector<Row>& rows,
                   SelectionDecision* d) {
  bool urgent = false, pending = false;
  for (const Row& r : rows) {
    if (!Moved(r)) continue;
    (Urgent(p, r) ? urgent : pending) = true;
  }
  std::vector<Row*> refresh = EarlyRefresh(p, rows);
  pending = pending || !refresh.empty();
  const bool open = forced || urgent || p.plan_interval_steps == 0 ||
                    clock < p.warmup_steps || *last_paced_step < 0 ||
                    clock - *last_paced_step >= p.plan_interval_steps;
  if (open) {
    if (pending) *last_paced_step = clock;
    for (Row* r : refresh) {
      r->early_refresh_version = r->factor_version;
      d->early_refresh.push_back(r->layer->name);
      absl::StrAppend(&r->score.reason, "; early refresh: gain ",
                      Num(RefreshGain(r->score)), " < half the best ",
                      Num(r->best_gain), " of factor v", r->factor_version);
    }
  } else if (pending) {
    const int64_t next = *last_paced_step + p.plan_interval_steps;
    d->next_change_step = next;
    for (Row& r : rows) {
      if (Moved(r)) HoldMove(r, next);
    }
    for (Row* r : refresh) {
      r->score.held = true;
      absl::StrAppend(&r->score.reason,
                      "; early refresh held until the next plan change");
    }
  }
}

}  // namespace gift::daemon::internal
