#include "shm/rank_counters.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shm/protocol.h"

namespace gift::shm {
namespace {

absl::Status Bad(const char* field, double was, double now) {
  return absl::DataLossError(
      absl::StrCat("telemetry counter ", field, " is ", now, " after ", was));
}

// An integer counter: in [0, kMaxStep] and not below `was` (itself in
// range), so the difference cannot overflow.
absl::Status Count(const char* field, int64_t was, int64_t now, int64_t* d) {
  if (now < was || now > kMaxStep) return Bad(field, was, now);
  *d = now - was;
  return absl::OkStatus();
}

// A sum of non-negative terms: finite and not below `was`.
absl::Status Sum(const char* field, double was, double now, double* d) {
  if (!std::isfinite(now) || now < was || !std::isfinite(now - was)) {
    return Bad(field, was, now);
  }
  *d = now - was;
  return absl::OkStatus();
}

// A sum of terms of either sign: finite, and so is the difference.
absl::Status AnySum(const char* field, double was, double now, double* d) {
  if (!std::isfinite(now) || !std::isfinite(now - was)) {
    return Bad(field, was, now);
  }
  *d = now - was;
  return absl::OkStatus();
}

absl::Status NotAbove(const char* part, int64_t v, const char* whole,
                      int64_t of) {
  if (v <= of) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("telemetry: ", part, " grew by ", v,
                                          ", more than ", whole, " (", of,
                                          ")"));
}

}  // namespace

absl::StatusOr<LayerCounters> CountersSince(const LayerCounters& was,
                                            const LayerCounters& now) {
  LayerCounters d{};
  RETURN_IF_ERROR(Count("steps", was.steps, now.steps, &d.steps));
  RETURN_IF_ERROR(
      Count("gift_steps", was.gift_steps, now.gift_steps, &d.gift_steps));
  RETURN_IF_ERROR(Count("n", was.n, now.n, &d.n));
  RETURN_IF_ERROR(Count("upper", was.upper, now.upper, &d.upper));
  RETURN_IF_ERROR(Count("lower", was.lower, now.lower, &d.lower));
  RETURN_IF_ERROR(
      Count("nonfinite", was.nonfinite, now.nonfinite, &d.nonfinite));
  RETURN_IF_ERROR(Count("probes", was.probes, now.probes, &d.probes));
  RETURN_IF_ERROR(
      Count("bytes_sent", was.bytes_sent, now.bytes_sent, &d.bytes_sent));
  RETURN_IF_ERROR(Sum("err_sq", was.err_sq, now.err_sq, &d.err_sq));
  RETURN_IF_ERROR(Sum("x_sq", was.x_sq, now.x_sq, &d.x_sq));
  RETURN_IF_ERROR(
      Sum("rel_l2_sum", was.rel_l2_sum, now.rel_l2_sum, &d.rel_l2_sum));
  RETURN_IF_ERROR(Sum("probe_euclid_sum", was.probe_euclid_sum,
                      now.probe_euclid_sum, &d.probe_euclid_sum));
  RETURN_IF_ERROR(Sum("probe_gift_sum", was.probe_gift_sum, now.probe_gift_sum,
                      &d.probe_gift_sum));
  // x̂·x and the cosine may be negative on the GIFT path.
  RETURN_IF_ERROR(AnySum("xhat_x", was.xhat_x, now.xhat_x, &d.xhat_x));
  RETURN_IF_ERROR(
      AnySum("cosine_sum", was.cosine_sum, now.cosine_sum, &d.cosine_sum));
  // Each quantized element hits at most one end of the range (upper + lower
  // <= n, without the sum); probes and GIFT steps are steps.
  RETURN_IF_ERROR(NotAbove("upper", d.upper, "n", d.n));
  RETURN_IF_ERROR(NotAbove("lower", d.lower, "n - upper", d.n - d.upper));
  RETURN_IF_ERROR(NotAbove("gift_steps", d.gift_steps, "steps", d.steps));
  RETURN_IF_ERROR(NotAbove("probes", d.probes, "steps", d.steps));
  for (int p = 0; p < 2; ++p) {
    RETURN_IF_ERROR(
        Count("audits", was.audits[p], now.audits[p], &d.audits[p]));
    RETURN_IF_ERROR(Count("drift_audits", was.drift_audits[p],
                          now.drift_audits[p], &d.drift_audits[p]));
    RETURN_IF_ERROR(Sum("audit_rel_l2_sum", was.audit_rel_l2_sum[p],
                        now.audit_rel_l2_sum[p], &d.audit_rel_l2_sum[p]));
    RETURN_IF_ERROR(Sum("audit_drift_sum", was.audit_drift_sum[p],
                        now.audit_drift_sum[p], &d.audit_drift_sum[p]));
    RETURN_IF_ERROR(AnySum("audit_cosine_sum", was.audit_cosine_sum[p],
                           now.audit_cosine_sum[p], &d.audit_cosine_sum[p]));
    RETURN_IF_ERROR(
        NotAbove("drift_audits", d.drift_audits[p], "audits", d.audits[p]));
  }
  RETURN_IF_ERROR(
      NotAbove("audits", d.audits[0] + d.audits[1], "steps", d.steps));
  RETURN_IF_ERROR(
      Count("beta_probes", was.beta_probes, now.beta_probes, &d.beta_probes));
  RETURN_IF_ERROR(NotAbove("beta_probes", d.beta_probes, "probes", d.probes));
  for (int b = 0; b < kBetaGrid; ++b) {
    RETURN_IF_ERROR(Sum("probe_beta_sum", was.probe_beta_sum[b],
                        now.probe_beta_sum[b], &d.probe_beta_sum[b]));
  }
  d.factor_version = now.factor_version;
  if (now.probe_version < -1) {
    return absl::DataLossError(
        absl::StrCat("probe_version is ", now.probe_version, " (-1: none)"));
  }
  d.probe_version =
      d.probes > 0 && was.probes > 0 && was.probe_version != now.probe_version
          ? kMixedProbeVersion
          : now.probe_version;
  // One per probe of probe_version, restarting with a new version.
  const int64_t since = was.probe_version == now.probe_version
                            ? now.version_probes - was.version_probes
                            : now.version_probes;
  if (now.version_probes < 0 || now.version_probes > now.probes ||
      (now.version_probes > 0) != (now.probes > 0 && now.probe_version >= 0) ||
      since < 0 || since > d.probes) {
    return absl::DataLossError(
        absl::StrCat("version_probes is ", now.version_probes, " (was ",
                     was.version_probes, "; probe_version ", now.probe_version,
                     ", ", d.probes, " new probes of ", now.probes, ")"));
  }
  d.version_probes = now.version_probes;
  return d;
}

absl::StatusOr<StepCounters> CountersSince(const StepCounters& was,
                                           const StepCounters& now) {
  StepCounters d{};
  RETURN_IF_ERROR(Count("steps", was.steps, now.steps, &d.steps));
  RETURN_IF_ERROR(Count("bytes_euclid", was.bytes_euclid, now.bytes_euclid,
                        &d.bytes_euclid));
  RETURN_IF_ERROR(
      Count("bytes_gift", was.bytes_gift, now.bytes_gift, &d.bytes_gift));
  RETURN_IF_ERROR(Count("bytes_control", was.bytes_control, now.bytes_control,
                        &d.bytes_control));
  RETURN_IF_ERROR(Count("bytes_fp32_equivalent", was.bytes_fp32_equivalent,
                        now.bytes_fp32_equivalent, &d.bytes_fp32_equivalent));
  RETURN_IF_ERROR(Count("nonfinite_layers", was.nonfinite_layers,
                        now.nonfinite_layers, &d.nonfinite_layers));
  RETURN_IF_ERROR(Sum("collective_seconds", was.collective_seconds,
                      now.collective_seconds, &d.collective_seconds));
  RETURN_IF_ERROR(Sum("transform_seconds", was.transform_seconds,
                      now.transform_seconds, &d.transform_seconds));
  RETURN_IF_ERROR(
      Count("audit_steps", was.audit_steps, now.audit_steps, &d.audit_steps));
  RETURN_IF_ERROR(
      Count("bytes_audit", was.bytes_audit, now.bytes_audit, &d.bytes_audit));
  RETURN_IF_ERROR(Sum("audit_seconds", was.audit_seconds, now.audit_seconds,
                      &d.audit_seconds));
  RETURN_IF_ERROR(NotAbove("audit_steps", d.audit_steps, "steps", d.steps));
  int64_t observed = 0;  // Σ of the bucket differences, each < 2^62
  for (int b = 0; b < kDurationBuckets; ++b) {
    RETURN_IF_ERROR(Count("duration_buckets", was.duration_buckets[b],
                          now.duration_buckets[b], &d.duration_buckets[b]));
    if (__builtin_add_overflow(observed, d.duration_buckets[b], &observed)) {
      return Bad("duration_buckets", was.duration_buckets[b],
                 now.duration_buckets[b]);
    }
  }
  // One duration per step.
  RETURN_IF_ERROR(
      NotAbove("duration_buckets (all)", observed, "steps", d.steps));
  return d;
}

}  // namespace gift::shm
