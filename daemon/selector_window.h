// The layer selector's memory of one layer (selector.h): the window of the
// last `window_steps` steps of telemetry with its running sums (from which
// vulnerability, gain and the probes' RelL2 are read), the window of the
// last `audit_window` audits, the probe reference's calibration, and what
// the last Decide left (hysteresis memory, the audit rule's bar). Internal
// to gift_selector: LayerSelector owns one LayerState per layer.
//
//   internal::LayerState st;
//   RETURN_IF_ERROR(internal::ValidateSample("fc1", sample));
//   st.window.Add(sample, policy.window_steps);
//   st.AddAudits(sample, policy.audit_window);
//   double v = st.window.Vulnerability();
//
// Thread safety: not thread-safe (LayerSelector serialises its calls).
#ifndef GIFT_DAEMON_SELECTOR_WINDOW_H_
#define GIFT_DAEMON_SELECTOR_WINDOW_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "daemon/selector.h"

namespace gift::daemon::internal {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The mean of `v`; NaN when empty.
double Mean(const std::deque<double>& v);

// INVALID_ARGUMENT, naming `layer`, for a sample with a negative count, more
// boundary hits than elements, more grid probes than probes, or a sum that
// is negative, not finite, or non-zero without its count.
absl::Status ValidateSample(const std::string& layer, const SelectorSample& s);

// The samples covering the last `window_steps` steps, with running sums.
// Samples are whole observations (about 100 ms each), so the window may hold
// a few steps more than asked: the oldest sample is dropped only while the
// rest still covers the window.
struct SampleWindow {
  std::deque<SelectorSample> samples;
  SelectorSample sum;  // Σ over `samples` (factor_version unused)
  // The probe version of the newest sample with probes that left the window
  // and the most probes of it any dropped sample counted (version_probes):
  // the version's probe steps in the window are counted above it.
  int64_t dropped_version = kMixedProbeVersion;
  int64_t dropped_version_probes = 0;

  void Add(const SelectorSample& s, int window_steps);
  void Trim(int window_steps);
  void Accumulate(const SelectorSample& s, int sign);
  double Vulnerability() const;
  // 1 − Σ gift / Σ euclid over the window's probes; NaN without probes.
  double Gain() const;
  // The same over the probes of samples whose probe_version is `version`;
  // `probe_steps` gets the version's probe steps in the window (the most any
  // sample counted, SelectorSample::version_probes, less those counted by
  // the samples that left it; all of them when the count is below those: it
  // restarted, as a rank's does when it attaches again), and `lowest` (when
  // given) the lowest gain of one such sample and `latest` that of the newest
  // (NaN without one). A sample is one observation of the ranks, in practice
  // one probe step.
  double VersionGain(int64_t version, int64_t* probe_steps,
                     double* lowest = nullptr, double* latest = nullptr) const;
  // Mean Euclidean round-trip RelL2 of the probes (NaN without probes).
  double ProbeEuclid() const;
  // The same of the GIFT path, and of each β of the grid.
  double ProbeGift() const;
  // Probe steps in the window that tried the β grid (beta_probes): a
  // version's first sample and a sample of mixed versions count one step,
  // a later sample the steps its version_probes adds to the version's most
  // so far, so a step whose reports reach the selector in two samples
  // counts once.
  int64_t BetaProbeSteps() const;
  double ProbeBeta(int b) const;
};

// The last `audit_window` audits of a layer, oldest first. Reports of one
// audit step (its ranks may be polled on either side of a step) merge into
// one entry.
struct AuditWindow {
  struct Entry {
    bool gift = false;
    int64_t count = 0;  // summed over the ranks
    double sum = 0;
    int64_t step = 0;         // the layer's steps seen at the first report
    double local = kNaN;      // local Euclidean round-trip RelL2 beside it
    bool calibrated = false;  // its ratio is in LayerState::calibration
  };
  std::deque<Entry> entries;

  // The entry `e` went into: a new one, or the newest of its path when that
  // began within kAuditMergeSteps steps.
  Entry& Add(const Entry& e, int window, bool* fresh);
  void Trim(int window);
  // Mean RelL2 of the path's audits (NaN without one) and their number.
  double Mean(bool gift, int* n) const;
};

struct LayerState {
  SampleWindow window;
  AuditWindow audits;
  // Audited / local round-trip Euclidean RelL2 of its last audit_window
  // Euclidean audits that had a local figure.
  std::deque<double> calibration;
  int64_t steps_seen = 0;
  int64_t factor_version = -1;
  double best_gain = kNaN;        // since factor_version was published
  int64_t accepted_version = -1;  // at the last Decide (selected only)
  int64_t proven_version = -1;  // newest judged to gain on the path (selected)
  int64_t early_refresh_version = -1;  // version already listed
  bool candidate = false;              // at the last Decide (hysteresis memory)
  bool selected = false;
  bool resumed = false;            // Resume() until a gain is measured
  bool resumed_from_plan = false;  // by a plan takeover, not a checkpoint
  SelectorSettings settings;       // at the last Decide
  // The audit rule.
  int64_t audit_removals = 0;
  bool barred = false;          // off the GIFT path until the bar lifts
  int64_t barred_version = -1;  // factor version at the removal
  int64_t euclid_audits_since_removal = 0;
  bool reentry = false;   // bar lifted, not selected since: enter higher
  std::string audit_why;  // the conviction of the last removal

  // Adds a validated sample: the step window, the best gain of the factor
  // version, the steps seen, and the audits.
  void Add(const SelectorSample& s, const SelectorPolicy& policy);
  // Cuts the windows to a new policy's lengths.
  void Trim(const SelectorPolicy& policy);

  // The sample's audits into the audit window; a Euclidean one with a local
  // figure also into the calibration.
  void AddAudits(const SelectorSample& s, int audit_window);
  void TrimCalibration(int audit_window);
};

}  // namespace gift::daemon::internal

#endif  // GIFT_DAEMON_SELECTOR_WINDOW_H_
