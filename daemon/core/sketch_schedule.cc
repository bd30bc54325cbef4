#include "daemon/core/sketch_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

double SubspaceKept(const shm::FactorData& old_factor,
                    const shm::FactorData& new_factor) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const int64_t ro = old_factor.r, rn = new_factor.r;
  if (old_factor.kind != 0 || new_factor.kind != 0 || ro < 1 || rn < 1 ||
      new_factor.lambda.size() < static_cast<size_t>(rn)) {
    return kNaN;
  }
  const int64_t d = static_cast<int64_t>(new_factor.u.size()) / rn;
  if (d < 1 || new_factor.u.size() != static_cast<size_t>(d * rn) ||
      old_factor.u.size() != static_cast<size_t>(d * ro)) {
    return kNaN;
  }
  // M = U_oldᵀ U_new (ro × rn), accumulated row by row of the d_in rows.
  std::vector<double> m(static_cast<size_t>(ro * rn), 0.0);
  for (int64_t x = 0; x < d; ++x) {
    const float* uo = old_factor.u.data() + x * ro;
    const float* un = new_factor.u.data() + x * rn;
    for (int64_t j = 0; j < ro; ++j) {
      const double a = uo[j];
      double* row = m.data() + j * rn;
      for (int64_t i = 0; i < rn; ++i) row[i] += a * un[i];
    }
  }
  double kept = 0, total = 0;
  for (int64_t i = 0; i < rn; ++i) {
    const double lambda = std::max(0.0, double{new_factor.lambda[i]});
    double norm2 = 0;
    for (int64_t j = 0; j < ro; ++j) norm2 += m[j * rn + i] * m[j * rn + i];
    kept += lambda * std::min(1.0, norm2);
    total += lambda;
  }
  return total > 0 && std::isfinite(kept) ? kept / total : kNaN;
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

void SketchSchedule::Follow(bool candidate, int32_t period) {
  period_ = period >= 1 ? period : 1;
  reason_ = candidate ? "the leader's plan: sketched " + Every(period_)
                      : "not a candidate: not sketched";
}

bool SketchSchedule::Decide(bool candidate, bool on_gift_path,
                            int64_t refresh_seq, int max_period) {
  const int32_t before = period_;
  const bool early_refresh = refresh_seq != refresh_seq_;
  refresh_seq_ = refresh_seq;
  std::string why;
  if (!candidate) {
    period_ = 1;
    reason_ = "not a candidate: not sketched";
    return period_ != before;
  }
  if (!on_gift_path) {
    period_ = 1;
    why = "candidate: its factors are probed before the GIFT path takes one";
  } else if (early_refresh) {
    period_ = 1;
    judged_version_ = kept_version_;
    why = "GIFT path, refresh asked (early refresh, new settings)";
  } else if (kept_version_ > judged_version_) {
    judged_version_ = kept_version_;
    if (kept_ >= kSteadySubspace) {
      ++period_;
      why = absl::StrFormat(
          "GIFT path, factor subspace steady (v%d keeps %.4f of its energy in "
          "the previous factor's basis, >= %.2f)",
          kept_version_, kept_, kSteadySubspace);
    } else {
      period_ = 1;
      why = std::isnan(kept_)
                ? absl::StrFormat(
                      "GIFT path, v%d cannot be compared with the factor "
                      "before it (a full transform, or none before)",
                      kept_version_)
                : absl::StrFormat(
                      "GIFT path, factor subspace moved (v%d keeps %.4f of "
                      "its energy in the previous factor's basis, < %.2f)",
                      kept_version_, kept_, kSteadySubspace);
    }
  } else if (reason_.rfind("GIFT path", 0) != 0) {
    why = "GIFT path, waiting for its next factor";
  }
  period_ = std::clamp<int32_t>(period_, 1, std::max(1, max_period));
  if (!why.empty()) reason_ = why;
  // The period part of the reason follows every change (max_period too).
  const size_t cut = reason_.find(": sketched ");
  if (cut != std::string::npos) reason_.resize(cut);
  reason_ += ": sketched " + Every(period_);
  return period_ != before;
}

}  // namespace gift::daemon
