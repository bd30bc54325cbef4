#include "daemon/core/sketch_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace gift::daemon {

int SketchStride(int option, int k) {
  k = std::max(1, k);
  return option >= 1 ? std::min(option, k) : std::max(1, k / kAutoSketchSteps);
}

int MaxSketchPeriod(int option, int64_t staleness_limit, int k) {
  if (option >= 1) return option;
  // P windows between refreshes age a factor by P·K steps plus the time its
  // successor takes to arrive: leave max(K, staleness_limit / 4) for that.
  k = std::max(1, k);
  const int64_t margin = std::max<int64_t>(k, staleness_limit / 4);
  const int64_t windows = (staleness_limit - margin) / k;
  return static_cast<int>(std::clamp<int64_t>(windows, 1, 1 << 20));
}

namespace {

std::string Every(int32_t period) {
  if (period <= 1) return "every window";
  const int tens = period % 100, ones = period % 10;
  const char* suffix = tens >= 11 && tens <= 13 ? "th"
                       : ones == 1              ? "st"
                       : ones == 2              ? "nd"
                       : ones == 3              ? "rd"
                                                : "th";
  return absl::StrFormat("every %d%s window", period, suffix);
}

}  // namespace

std::string SketchSchedule::reason() const {
  if (!candidate_) return "not a candidate: not sketched";
  return why_ + ": sketched " + Every(period_);
}

void SketchSchedule::Follow(bool candidate, int32_t period) {
  period_ = period >= 1 ? period : 1;
  candidate_ = candidate;
  on_path_ = false;
  why_ = "the leader's plan";
}

bool SketchSchedule::Decide(bool candidate, bool on_gift_path,
                            int64_t refresh_seq, int max_period) {
  const int32_t before = period_;
  const bool early_refresh = refresh_seq != refresh_seq_;
  refresh_seq_ = refresh_seq;
  const bool was_on_path = on_path_;
  candidate_ = candidate;
  on_path_ = candidate && on_gift_path;
  if (!candidate) {
    period_ = 1;
    return period_ != before;
  }
  if (!on_gift_path) {
    period_ = 1;
    why_ = "candidate: its factors are probed before the GIFT path takes one";
  } else if (early_refresh) {
    period_ = 1;
    judged_version_ = kept_version_;
    why_ = "GIFT path, refresh asked (early refresh, new settings)";
  } else if (kept_version_ > judged_version_) {
    judged_version_ = kept_version_;
    if (kept_ >= kSteadySubspace) {
      ++period_;
      why_ = absl::StrFormat(
          "GIFT path, factor subspace steady (v%d keeps %.4f of its energy in "
          "the previous factor's basis, >= %.2f)",
          kept_version_, kept_, kSteadySubspace);
    } else if (kept_ >= kMovedSubspace) {
      why_ = absl::StrFormat(
          "GIFT path, factor subspace holding (v%d keeps %.4f of its energy "
          "in the previous factor's basis, in [%.2f, %.2f))",
          kept_version_, kept_, kMovedSubspace, kSteadySubspace);
    } else {
      period_ = 1;
      why_ = std::isnan(kept_)
                 ? absl::StrFormat(
                       "GIFT path, v%d cannot be compared with the factor "
                       "before it (a full transform, or none before)",
                       kept_version_)
                 : absl::StrFormat(
                       "GIFT path, factor subspace moved (v%d keeps %.4f of "
                       "its energy in the previous factor's basis, < %.2f)",
                       kept_version_, kept_, kMovedSubspace);
    }
  } else if (!was_on_path) {
    why_ = "GIFT path, waiting for its next factor";
  }
  period_ = std::clamp<int32_t>(period_, 1, std::max(1, max_period));
  return period_ != before;
}

}  // namespace gift::daemon
