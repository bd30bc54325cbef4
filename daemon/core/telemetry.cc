#include "daemon/core/telemetry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/core/series.h"
#include "daemon/log.h"
#include "kernels/quantize.h"
#include "shm/rank_counters.h"

namespace gift::daemon {
namespace {

// RelL2 and cosine of a round trip from its error sums (the kernels'
// definitions).
void RoundTrip(double err_sq, double x_sq, double xhat_x, double* rel_l2,
               double* cosine) {
  kernels::QuantizeStats q;
  q.err_sq = err_sq;
  q.x_sq = x_sq;
  q.xhat_x = xhat_x;
  *rel_l2 = q.RelL2();
  *cosine = q.Cosine();
}

// `to` += v, saturating: the sums over a node's ranks of accepted
// differences (each below 2^62) stay meaningful for the selector.
void AddSat(int64_t* to, int64_t v) {
  if (__builtin_add_overflow(*to, v, to)) {
    *to = std::numeric_limits<int64_t>::max();
  }
}

}  // namespace

void AddSample(const v1::LayerSample& s, SelectorSample* to, double* err_sq,
               double* x_sq, double* xhat_x) {
  to->steps = std::max(to->steps, s.steps());
  to->n += s.n();
  to->upper += s.upper();
  to->lower += s.lower();
  // A follower's probes without a version judge none.
  to->probe_version = MergeProbeVersion(
      to->probes, to->probe_version, s.probes(),
      s.has_probe_version() && s.probe_version() >= 0 ? s.probe_version()
                                                      : kMixedProbeVersion);
  to->probes += s.probes();
  // The nodes' ranks probe the same steps.
  if (s.probes() > 0) {
    to->version_probes =
        std::max(to->version_probes, std::max<int64_t>(s.version_probes(), 0));
  }
  to->probe_euclid_sum += s.probe_euclid_sum();
  to->probe_gift_sum += s.probe_gift_sum();
  *err_sq += s.err_sq();
  *x_sq += s.x_sq();
  *xhat_x += s.xhat_x();
  to->audits_gift += s.audits_gift();
  to->audit_gift_rel_l2_sum += s.audit_gift_rel_l2_sum();
  to->audits_euclid += s.audits_euclid();
  to->audit_euclid_rel_l2_sum += s.audit_euclid_rel_l2_sum();
  // β grid sums: only the grid's length (a follower's are checked by the
  // selector like a rank's).
  if (s.probe_beta_sum_size() == kBetaGrid) {
    to->beta_probes += s.beta_probes();
    for (int b = 0; b < kBetaGrid; ++b) {
      to->probe_beta_sum[b] += s.probe_beta_sum(b);
    }
  }
}

void MergeSample(const v1::LayerSample& s, v1::LayerSample* to) {
  to->set_name(s.name());
  to->set_steps(std::max(to->steps(), s.steps()));
  to->set_n(to->n() + s.n());
  to->set_upper(to->upper() + s.upper());
  to->set_lower(to->lower() + s.lower());
  if (s.probes() > 0) {
    to->set_probe_version(MergeProbeVersion(
        to->probes(), to->probe_version(), s.probes(),
        s.has_probe_version() ? s.probe_version() : kMixedProbeVersion));
  }
  to->set_probes(to->probes() + s.probes());
  to->set_version_probes(std::max(to->version_probes(), s.version_probes()));
  to->set_probe_euclid_sum(to->probe_euclid_sum() + s.probe_euclid_sum());
  to->set_probe_gift_sum(to->probe_gift_sum() + s.probe_gift_sum());
  to->set_err_sq(to->err_sq() + s.err_sq());
  to->set_x_sq(to->x_sq() + s.x_sq());
  to->set_xhat_x(to->xhat_x() + s.xhat_x());
  to->set_audits_gift(to->audits_gift() + s.audits_gift());
  to->set_audit_gift_rel_l2_sum(to->audit_gift_rel_l2_sum() +
                                s.audit_gift_rel_l2_sum());
  to->set_audits_euclid(to->audits_euclid() + s.audits_euclid());
  to->set_audit_euclid_rel_l2_sum(to->audit_euclid_rel_l2_sum() +
                                  s.audit_euclid_rel_l2_sum());
  to->set_beta_probes(to->beta_probes() + s.beta_probes());
  for (int b = 0; b < s.probe_beta_sum_size(); ++b) {
    while (to->probe_beta_sum_size() <= b) to->add_probe_beta_sum(0);
    to->set_probe_beta_sum(b, to->probe_beta_sum(b) + s.probe_beta_sum(b));
  }
}

absl::Status CheckReport(const v1::ReportTelemetryRequest& r) {
  for (const v1::LayerSample& s : r.layers()) {
    if (s.steps() < 0 || s.n() < 0 || s.upper() < 0 || s.lower() < 0 ||
        s.probes() < 0 || s.audits_gift() < 0 || s.audits_euclid() < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("negative counts for layer %s", s.name()));
    }
    for (double v : {s.audit_gift_rel_l2_sum(), s.audit_euclid_rel_l2_sum()}) {
      if (!std::isfinite(v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "audit sums of layer %s must be finite and >= 0", s.name()));
      }
    }
  }
  return absl::OkStatus();
}

void Telemetry::Malformed(RankSession& s, const char* reason,
                          const std::string& what, bool garbage) {
  p_.metrics->shm_rejected
      ->Add(p_.layout->Labels(
          {{"rank", absl::StrCat(s.rank())}, {"reason", reason}}))
      .Increment();
  if (garbage && !s.malformed_now) {
    s.malformed_now = true;
    s.malformed_why = what;
  }
  int64_t held_back = 0;
  if (s.malformed_log.Allow(&held_back)) {
    LOG_WARNING(
        "rank %d (session %s): dropped what it wrote into shared memory: %s "
        "(%d more dropped since the last such line)",
        s.rank(), s.id(), what, held_back);
  }
}

void Telemetry::DisconnectMalformed(
    absl::FunctionRef<void(const std::string& id, const std::string& why)>
        reap) {
  for (const auto& [id, why] : p_.sessions->Malformed()) {
    LOG_WARNING("session %s %s", id, why);
    reap(id, why);
  }
}

void Telemetry::TakeAudits(JobLayer& l, const shm::LayerCounters& now,
                           const shm::LayerCounters& d) {
  // Every rank audits the same steps with the same figures: the newest
  // (mean, should a poll see several) of any rank is the layer's; the
  // count is the most any rank reported since it registered.
  l.audits = std::max(l.audits, now.audits[0] + now.audits[1]);
  for (int p = 0; p < 2; ++p) {
    if (d.audits[p] <= 0) continue;
    const double n = static_cast<double>(d.audits[p]);
    JobLayer::Audit& a = l.audit[p];
    a.rel_l2 = d.audit_rel_l2_sum[p] / n;
    a.cosine = d.audit_cosine_sum[p] / n;
    if (d.drift_audits[p] > 0) {
      a.drift = d.audit_drift_sum[p] / static_cast<double>(d.drift_audits[p]);
    }
    l.audit_path = p;
    LayerSeries& series = p_.series->Layer(p_.layout->IndexOf(l));
    series.audit_rel_l2[p]->Set(a.rel_l2);
    series.audit_cosine[p]->Set(a.cosine);
    if (d.drift_audits[p] > 0) series.audit_drift[p]->Set(a.drift);
  }
}

void Telemetry::TakeLayerSample(RankSession& s, int i, SelectorSample* x,
                                double* err, double* xsq, double* xhx) {
  JobLayer& l = p_.layout->layers()[i];
  shm::LayerCounters now;
  // A working client holds the seqlock for a few stores: odd on every try
  // is a stuck or broken one, and would cost every poll all the tries.
  if (!shm::ReadTelemetry(*s.entry(i), &now)) {
    Malformed(
        s, "layer_counters",
        absl::StrCat("layer ", l.name, ": telemetry locked on every try"));
    return;
  }
  shm::LayerCounters& was = s.last_counters[i];
  absl::StatusOr<shm::LayerCounters> d = shm::CountersSince(was, now);
  if (!d.ok()) {
    Malformed(s, "layer_counters",
              absl::StrCat("layer ", l.name, ": ", d.status().message()));
    return;
  }
  x->steps = std::max(x->steps, d->steps);
  AddSat(&x->n, d->n);
  AddSat(&x->upper, d->upper);
  AddSat(&x->lower, d->lower);
  x->probe_version = MergeProbeVersion(
      x->probes, x->probe_version, d->probes,
      d->probe_version < 0 ? kMixedProbeVersion : d->probe_version);
  AddSat(&x->probes, d->probes);
  if (d->probes > 0) {
    x->version_probes = std::max(x->version_probes, d->version_probes);
  }
  x->probe_euclid_sum += d->probe_euclid_sum;
  x->probe_gift_sum += d->probe_gift_sum;
  AddSat(&x->beta_probes, d->beta_probes);
  for (int b = 0; b < kBetaGrid; ++b) {
    x->probe_beta_sum[b] += d->probe_beta_sum[b];
  }
  AddSat(&x->audits_euclid, d->audits[0]);
  AddSat(&x->audits_gift, d->audits[1]);
  x->audit_euclid_rel_l2_sum += d->audit_rel_l2_sum[0];
  x->audit_gift_rel_l2_sum += d->audit_rel_l2_sum[1];
  TakeAudits(l, now, *d);
  *err += d->err_sq;
  *xsq += d->x_sq;
  *xhx += d->xhat_x;
  RankLayerSeries& series = p_.series->Rank(s.rank()).layers[i];
  if (d->steps > 0) {
    double rel, cos;
    RoundTrip(d->err_sq, d->x_sq, d->xhat_x, &rel, &cos);
    const int path = d->gift_steps > 0 ? 1 : 0;
    series.rel_l2[path]->Set(rel);
    series.cosine[path]->Set(cos);
  }
  series.upper->Increment(d->upper);
  series.lower->Increment(d->lower);
  series.quantized->Increment(d->n);
  series.nonfinite->Increment(d->nonfinite);
  series.bytes->Increment(d->bytes_sent);
  AddSat(&l.bytes_sent, d->bytes_sent);
  was = now;
}

void Telemetry::TakeStepCounters(RankSession& s) {
  const int64_t step = s.header()->step.load(std::memory_order_acquire);
  if (step < 0 || step > shm::kMaxStep) {
    Malformed(s, "step", absl::StrCat("step ", step));
  } else {
    s.last_step = std::max(s.last_step, step);
  }
  shm::StepCounters t;
  if (!shm::ReadStepCounters(*s.header(), &t)) {
    Malformed(s, "step_counters", "step counters locked on every try");
    return;
  }
  absl::StatusOr<shm::StepCounters> d = shm::CountersSince(s.last_totals, t);
  if (!d.ok()) {
    Malformed(s, "step_counters", std::string(d.status().message()));
    return;
  }
  RankSeries& series = p_.series->Rank(s.rank());
  series.steps->Increment(d->steps);
  series.bytes_sent[0]->Increment(d->bytes_euclid);
  series.bytes_sent[1]->Increment(d->bytes_gift);
  series.bytes_sent[2]->Increment(d->bytes_control);
  series.bytes_sent[3]->Increment(d->bytes_audit);
  series.audit_steps->Increment(d->audit_steps);
  series.audit_seconds->Increment(d->audit_seconds);
  // Each difference is below 2^62: their sum of four fits a double, and
  // only what was saved counts (the audits' FP32 bytes are sent too).
  const double sent = static_cast<double>(d->bytes_euclid) +
                      static_cast<double>(d->bytes_gift) +
                      static_cast<double>(d->bytes_control) +
                      static_cast<double>(d->bytes_audit);
  series.bytes_saved->Increment(
      std::max(0.0, static_cast<double>(d->bytes_fp32_equivalent) - sent));
  series.transform_seconds->Increment(d->transform_seconds);
  series.nonfinite_layers->Increment(d->nonfinite_layers);
  std::vector<double> counts(shm::kDurationBuckets);
  for (int b = 0; b < shm::kDurationBuckets; ++b) {
    counts[b] = static_cast<double>(d->duration_buckets[b]);
  }
  metrics::ObserveBuckets(series.collective_duration,
                          p_.metrics->duration_bounds, counts,
                          d->collective_seconds);
  series.rank_step->Set(t.steps);
  s.last_totals = t;
}

void Telemetry::Read() {
  std::vector<JobLayer>& layers = p_.layout->layers();
  std::vector<SelectorSample> samples(layers.size());
  std::vector<double> err(layers.size()), xsq(layers.size()),
      xhx(layers.size());
  for (auto& [id, s] : *p_.sessions) {
    for (size_t i = 0; i < layers.size(); ++i) {
      TakeLayerSample(*s, static_cast<int>(i), &samples[i], &err[i], &xsq[i],
                      &xhx[i]);
    }
    TakeStepCounters(*s);
  }
  // A follower reports its node's samples; the leader adds them to its own
  // and alone feeds the selector.
  const bool follower = p_.peers->IsFollower();
  if (follower) {
    SendReport(samples, err, xsq, xhx);
  } else if (p_.peers->peered()) {
    TakeRemoteSamples(&samples, &err, &xsq, &xhx);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    JobLayer& l = layers[i];
    samples[i].factor_version = l.factors.newest_version();
    // The local round trip calibrates the audit rule's probe reference;
    // the slowest rank's step is the selector's clock.
    samples[i].round_trip_err_sq = err[i];
    samples[i].round_trip_x_sq = xsq[i];
    samples[i].step = p_.sessions->SlowestStep();
    if (!follower) {
      absl::Status st = p_.planner->selector().Observe(l.name, samples[i]);
      if (!st.ok()) LOG_WARNING("selector: %s", st.ToString());
    }
    if (xsq[i] > 0) RoundTrip(err[i], xsq[i], xhx[i], &l.rel_l2, &l.cosine);
    // The probe's local round trip of both paths, beside the audits.
    if (samples[i].probes > 0) {
      const double n = static_cast<double>(samples[i].probes);
      LayerSeries& series = p_.series->Layer(static_cast<int>(i));
      series.probe_rel_l2[0]->Set(samples[i].probe_euclid_sum / n);
      series.probe_rel_l2[1]->Set(samples[i].probe_gift_sum / n);
    }
  }
}

void Telemetry::SendReport(const std::vector<SelectorSample>& samples,
                           const std::vector<double>& err,
                           const std::vector<double>& xsq,
                           const std::vector<double>& xhx) {
  v1::ReportTelemetryRequest r;
  r.set_job_id(p_.config->job_id);
  r.mutable_self()->set_node(p_.config->node);
  r.mutable_self()->set_instance(*p_.instance);
  r.set_plan_epoch(p_.planner->HeldEpoch());
  r.set_local_ranks(static_cast<int>(p_.sessions->size()));
  r.set_slowest_step(p_.sessions->SlowestStep());
  const std::vector<JobLayer>& layers = p_.layout->layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    const SelectorSample& s = samples[i];
    if (s.steps == 0 && s.n == 0 && s.probes == 0) continue;
    v1::LayerSample* x = r.add_layers();
    x->set_name(layers[i].name);
    x->set_steps(s.steps);
    x->set_n(s.n);
    x->set_upper(s.upper);
    x->set_lower(s.lower);
    x->set_probes(s.probes);
    if (s.probes > 0) x->set_probe_version(s.probe_version);
    x->set_version_probes(s.version_probes);
    x->set_probe_euclid_sum(s.probe_euclid_sum);
    x->set_probe_gift_sum(s.probe_gift_sum);
    x->set_err_sq(err[i]);
    x->set_x_sq(xsq[i]);
    x->set_xhat_x(xhx[i]);
    x->set_audits_gift(s.audits_gift);
    x->set_audit_gift_rel_l2_sum(s.audit_gift_rel_l2_sum);
    x->set_audits_euclid(s.audits_euclid);
    x->set_audit_euclid_rel_l2_sum(s.audit_euclid_rel_l2_sum);
    if (s.beta_probes > 0) {
      x->set_beta_probes(s.beta_probes);
      *x->mutable_probe_beta_sum() = {s.probe_beta_sum.begin(),
                                      s.probe_beta_sum.end()};
    }
  }
  p_.peers->link()->SendTelemetry(std::move(r));  // also its liveness
}

absl::Status Telemetry::AcceptReport(const v1::ReportTelemetryRequest& r) {
  RETURN_IF_ERROR(CheckReport(r));
  for (const v1::LayerSample& s : r.layers()) {
    if (!p_.planner->selector().HasLayer(s.name())) continue;  // not adopted
    MergeSample(s, &remote_samples_[s.name()]);
  }
  return absl::OkStatus();
}

void Telemetry::TakeRemoteSamples(std::vector<SelectorSample>* samples,
                                  std::vector<double>* err,
                                  std::vector<double>* xsq,
                                  std::vector<double>* xhx) {
  const std::vector<JobLayer>& layers = p_.layout->layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    auto it = remote_samples_.find(layers[i].name);
    if (it == remote_samples_.end()) continue;
    AddSample(it->second, &(*samples)[i], &(*err)[i], &(*xsq)[i], &(*xhx)[i]);
  }
  remote_samples_.clear();
}

}  // namespace gift::daemon
