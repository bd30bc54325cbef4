// Window statistics of the layer selector (selector_window.h).
#include "daemon/selector_window.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gift::daemon::internal {

double Mean(const std::deque<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? kNaN : sum / static_cast<double>(v.size());
}

namespace {

// The counts and the probe sums (the first half of ValidateSample).
absl::Status ValidateProbes(const std::string& layer, const SelectorSample& s) {
  if (s.steps < 0 || s.n < 0 || s.upper < 0 || s.lower < 0 || s.probes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: negative count for layer ", layer, " (steps ",
                     s.steps, ", n ", s.n, ", upper ", s.upper, ", lower ",
                     s.lower, ", probes ", s.probes, ")"));
  }
  if (s.version_probes < 0 || (s.probes == 0 && s.version_probes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports ", s.version_probes,
                     " probe steps of its version in ", s.probes, " probes"));
  }
  if (s.probe_version < kMixedProbeVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports probe version ",
                     s.probe_version, " (-1: none, -2: mixed)"));
  }
  if (s.step < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selector: layer ", layer, " reports step ", s.step, " (-1: unknown)"));
  }
  if (s.upper + s.lower > s.n) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports ", s.upper + s.lower,
                     " boundary hits in ", s.n, " elements"));
  }
  if (!(s.probe_euclid_sum >= 0) || !(s.probe_gift_sum >= 0) ||
      std::isinf(s.probe_euclid_sum) || std::isinf(s.probe_gift_sum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selector: probe sums of layer ", layer, " must be finite and >= 0"));
  }
  if (s.beta_probes < 0 || s.beta_probes > s.probes) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: layer ", layer, " reports ", s.beta_probes,
                     " beta-grid probes in ", s.probes, " probes"));
  }
  for (double sum : s.probe_beta_sum) {
    if (!(sum >= 0) || std::isinf(sum) || (s.beta_probes == 0 && sum != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("selector: beta-grid probe sums of layer ", layer,
                       " must be finite, >= 0 and 0 without grid probes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSample(const std::string& layer, const SelectorSample& s) {
  if (absl::Status st = ValidateProbes(layer, s); !st.ok()) return st;
  for (const auto& [count, sum] :
       {std::pair{s.audits_gift, s.audit_gift_rel_l2_sum},
        std::pair{s.audits_euclid, s.audit_euclid_rel_l2_sum}}) {
    if (count < 0 || !(sum >= 0) || std::isinf(sum) ||
        (count == 0 && sum != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "selector: audits of layer ", layer,
          " must have a count >= 0 and a finite sum >= 0, 0 without audits "
          "(got ",
          count, " audits, sum ", sum, ")"));
    }
  }
  if (!(s.round_trip_err_sq >= 0) || !(s.round_trip_x_sq >= 0) ||
      std::isinf(s.round_trip_err_sq) || std::isinf(s.round_trip_x_sq)) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector: round-trip sums of layer ", layer,
                     " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

void SampleWindow::Add(const SelectorSample& s, int window_steps) {
  samples.push_back(s);
  Accumulate(s, +1);
  Trim(window_steps);
}

void SampleWindow::Trim(int window_steps) {
  while (samples.size() > 1 &&
         sum.steps - samples.front().steps >= window_steps) {
    const SelectorSample& s = samples.front();
    if (s.probes > 0 && s.probe_version >= 0) {
      dropped_version_probes =
          s.probe_version == dropped_version
              ? std::max(dropped_version_probes, s.version_probes)
              : s.version_probes;
      dropped_version = s.probe_version;
    }
    Accumulate(s, -1);
    samples.pop_front();
  }
}

void SampleWindow::Accumulate(const SelectorSample& s, int sign) {
  sum.steps += sign * s.steps;
  sum.n += sign * s.n;
  sum.upper += sign * s.upper;
  sum.lower += sign * s.lower;
  sum.probes += sign * s.probes;
  sum.probe_euclid_sum += sign * s.probe_euclid_sum;
  sum.probe_gift_sum += sign * s.probe_gift_sum;
  sum.beta_probes += sign * s.beta_probes;
  for (int b = 0; b < kBetaGrid; ++b) {
    sum.probe_beta_sum[b] += sign * s.probe_beta_sum[b];
  }
}

double SampleWindow::Vulnerability() const {
  return sum.n > 0 ? static_cast<double>(sum.upper + sum.lower) / sum.n : 0;
}

double SampleWindow::Gain() const {
  if (sum.probes <= 0 || !(sum.probe_euclid_sum > 0)) return kNaN;
  return 1.0 - sum.probe_gift_sum / sum.probe_euclid_sum;
}

double SampleWindow::VersionGain(int64_t version, int64_t* probe_steps,
                                 double* lowest, double* latest) const {
  double euclid = 0, gift = 0;
  int64_t counted = 0;  // the most probe steps of `version` any sample counted
  int64_t probes = 0;
  if (lowest != nullptr) *lowest = kNaN;
  if (latest != nullptr) *latest = kNaN;
  for (const SelectorSample& s : samples) {
    if (s.probes <= 0 || s.probe_version != version) continue;
    probes += s.probes;
    counted = std::max(counted, s.version_probes);
    euclid += s.probe_euclid_sum;
    gift += s.probe_gift_sum;
    if (s.probe_euclid_sum > 0) {
      const double g = 1.0 - s.probe_gift_sum / s.probe_euclid_sum;
      if (lowest != nullptr && !(*lowest <= g)) *lowest = g;
      if (latest != nullptr) *latest = g;
    }
  }
  const int64_t before =
      version == dropped_version ? dropped_version_probes : 0;
  *probe_steps = counted >= before ? counted - before : counted;
  if (probes <= 0 || !(euclid > 0)) return kNaN;
  return 1.0 - gift / euclid;
}

double SampleWindow::ProbeEuclid() const {
  return sum.probes > 0 ? sum.probe_euclid_sum / sum.probes : kNaN;
}

double SampleWindow::ProbeGift() const {
  return sum.probes > 0 ? sum.probe_gift_sum / sum.probes : kNaN;
}

int64_t SampleWindow::BetaProbeSteps() const {
  // Per probe version, the most probe steps a sample of it counted so far
  // (for dropped_version, the dropped samples' most).
  std::vector<std::pair<int64_t, int64_t>> seen;  // {version, count}
  if (dropped_version >= 0) {
    seen.emplace_back(dropped_version, dropped_version_probes);
  }
  int64_t n = 0;
  for (const SelectorSample& s : samples) {
    if (s.probes <= 0) continue;
    if (s.probe_version < 0) {  // no single version known: one step
      n += s.beta_probes > 0;
      continue;
    }
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& v) {
      return v.first == s.probe_version;
    });
    if (it == seen.end()) {
      // The version's first sample here: one step (its count may hold
      // steps a rank probed it ahead of the others, which came as mixed
      // samples or as another version's).
      n += s.beta_probes > 0;
      seen.emplace_back(s.probe_version, s.version_probes);
      continue;
    }
    // The steps above the version's count so far: none for the rest of a
    // step's reports (ranks polled on either side of it, a rank one probe
    // behind), none after a count restarted until it passes the old one.
    if (s.beta_probes > 0 && s.version_probes > it->second) {
      // At most one step per grid probe (β auto turned on within the
      // version: its earlier probe steps had none).
      n += std::min(s.beta_probes, s.version_probes - it->second);
    }
    it->second = std::max(it->second, s.version_probes);
  }
  return n;
}

double SampleWindow::ProbeBeta(int b) const {
  return sum.beta_probes > 0 ? sum.probe_beta_sum[b] / sum.beta_probes : kNaN;
}

AuditWindow::Entry& AuditWindow::Add(const Entry& e, int window, bool* fresh) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->gift != e.gift) continue;
    if (e.step - it->step <= kAuditMergeSteps) {
      it->count += e.count;
      it->sum += e.sum;
      if (std::isnan(it->local)) it->local = e.local;
      *fresh = false;
      return *it;
    }
    break;
  }
  entries.push_back(e);
  *fresh = true;
  Trim(window);
  return entries.back();
}

void AuditWindow::Trim(int window) {
  while (entries.size() > static_cast<size_t>(window)) entries.pop_front();
}

double AuditWindow::Mean(bool gift, int* n) const {
  int64_t count = 0;
  double sum = 0;
  *n = 0;
  for (const Entry& e : entries) {
    if (e.gift != gift) continue;
    ++*n;
    count += e.count;
    sum += e.sum;
  }
  return count > 0 ? sum / count : kNaN;
}

void LayerState::Add(const SelectorSample& s, const SelectorPolicy& policy) {
  if (s.factor_version > factor_version) {
    factor_version = s.factor_version;
    best_gain = kNaN;  // best is tracked per factor version
  }
  window.Add(s, policy.window_steps);
  int64_t probes = 0;
  const double gain = window.VersionGain(factor_version, &probes);
  if (!std::isnan(gain) && !(gain <= best_gain)) best_gain = gain;
  if (__builtin_add_overflow(steps_seen, s.steps, &steps_seen)) {
    steps_seen = std::numeric_limits<int64_t>::max();
  }
  AddAudits(s, policy.audit_window);
}

void LayerState::AddAudits(const SelectorSample& s, int w) {
  if (s.audits_euclid > 0) {
    // The local Euclidean figure beside the audit: the path's own round
    // trip in this sample, else the probes' over the window.
    const double local =
        s.round_trip_x_sq > 0
            ? std::sqrt(s.round_trip_err_sq / s.round_trip_x_sq)
            : window.ProbeEuclid();
    bool fresh = false;
    AuditWindow::Entry& e =
        audits.Add({false, s.audits_euclid, s.audit_euclid_rel_l2_sum,
                    steps_seen, local > 0 ? local : kNaN},
                   w, &fresh);
    if (fresh && barred) ++euclid_audits_since_removal;
    if (e.local > 0) {
      const double ratio = e.sum / e.count / e.local;
      if (e.calibrated) {
        calibration.back() = ratio;
      } else {
        e.calibrated = true;
        calibration.push_back(ratio);
        TrimCalibration(w);
      }
    }
  }
  if (s.audits_gift > 0) {
    bool fresh = false;
    audits.Add({true, s.audits_gift, s.audit_gift_rel_l2_sum, steps_seen}, w,
               &fresh);
  }
}

void LayerState::Trim(const SelectorPolicy& policy) {
  window.Trim(policy.window_steps);
  audits.Trim(policy.audit_window);
  TrimCalibration(policy.audit_window);
}

void LayerState::TrimCalibration(int audit_window) {
  while (calibration.size() > static_cast<size_t>(audit_window)) {
    calibration.pop_front();
  }
}

}  // namespace gift::daemon::internal
