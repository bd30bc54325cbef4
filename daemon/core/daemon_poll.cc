// The poll cycle of giftd: telemetry → metrics and selector → plan;
// closed sketch windows → refresher → factor slots.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/core/daemon.h"
#include "daemon/log.h"
#include "kernels/quantize.h"
#include "shm/rank_counters.h"

namespace gift::daemon {

void Daemon::PollOnce() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  ReapDead();
  // A member of a multi-node job goes on without local ranks: the leader
  // decides from the followers' telemetry, an owner refreshes their windows.
  if (sessions_.empty() && (!peered_ || layers_.empty())) {
    // The election's gauges also before any rank (GiftJobWithoutLeader).
    if (peered_) UpdatePeerGauges();
    return;
  }
  ReadTelemetry();
  if (!IsFollower()) ApplySelection();
  CollectWindows();
  DisconnectMalformed();
  PublishResults();
  UpdateGauges();
}

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

void Daemon::Malformed(RankSession& s, const char* reason,
                       const std::string& what, bool garbage) {
  metrics_.shm_rejected
      ->Add(Labels({{"rank", absl::StrCat(s.rank())}, {"reason", reason}}))
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

void Daemon::DisconnectMalformed() {
  for (const auto& [id, why] : sessions_.Malformed()) {
    LOG_WARNING("session %s %s", id, why);
    Reap(id, why);
  }
}

void Daemon::TakeLayerSample(RankSession& s, int i, SelectorSample* x,
                             double* err, double* xsq, double* xhx) {
  Layer& l = layers_[i];
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
  const std::string rank = absl::StrCat(s.rank());
  x->steps = std::max(x->steps, d->steps);
  AddSat(&x->n, d->n);
  AddSat(&x->upper, d->upper);
  AddSat(&x->lower, d->lower);
  AddSat(&x->probes, d->probes);
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
  // Every rank audits the same steps with the same figures: the newest
  // (mean, should a poll see several) of any rank is the layer's; the
  // count is the most any rank reported since it registered.
  l.audits = std::max(l.audits, now.audits[0] + now.audits[1]);
  for (int p = 0; p < 2; ++p) {
    if (d->audits[p] <= 0) continue;
    const double n = static_cast<double>(d->audits[p]);
    Layer::Audit& a = l.audit[p];
    a.rel_l2 = d->audit_rel_l2_sum[p] / n;
    a.cosine = d->audit_cosine_sum[p] / n;
    if (d->drift_audits[p] > 0) {
      a.drift = d->audit_drift_sum[p] / static_cast<double>(d->drift_audits[p]);
    }
    l.audit_path = p;
    const metrics::Labels labels =
        Labels({{"layer", l.name}, {"path", p == 1 ? "gift" : "euclid"}});
    metrics_.audit_rel_l2->Add(labels).Set(a.rel_l2);
    metrics_.audit_cosine->Add(labels).Set(a.cosine);
    if (d->drift_audits[p] > 0) metrics_.audit_drift->Add(labels).Set(a.drift);
  }
  *err += d->err_sq;
  *xsq += d->x_sq;
  *xhx += d->xhat_x;
  if (d->steps > 0) {
    double rel, cos;
    RoundTrip(d->err_sq, d->x_sq, d->xhat_x, &rel, &cos);
    const char* path = d->gift_steps > 0 ? "gift" : "euclid";
    metrics_.rel_l2
        ->Add(Labels({{"rank", rank}, {"layer", l.name}, {"path", path}}))
        .Set(rel);
    metrics_.cosine
        ->Add(Labels({{"rank", rank}, {"layer", l.name}, {"path", path}}))
        .Set(cos);
  }
  metrics_.boundary_hits
      ->Add(Labels({{"rank", rank}, {"layer", l.name}, {"bound", "upper"}}))
      .Increment(d->upper);
  metrics_.boundary_hits
      ->Add(Labels({{"rank", rank}, {"layer", l.name}, {"bound", "lower"}}))
      .Increment(d->lower);
  metrics_.quantized_elements->Add(Labels({{"rank", rank}, {"layer", l.name}}))
      .Increment(d->n);
  metrics_.nonfinite_inputs->Add(Labels({{"rank", rank}, {"layer", l.name}}))
      .Increment(d->nonfinite);
  was = now;
}

void Daemon::TakeStepCounters(RankSession& s) {
  const std::string rank = absl::StrCat(s.rank());
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
  metrics_.steps->Add(Labels({{"rank", rank}})).Increment(d->steps);
  metrics_.bytes_sent->Add(Labels({{"rank", rank}, {"path", "euclid"}}))
      .Increment(d->bytes_euclid);
  metrics_.bytes_sent->Add(Labels({{"rank", rank}, {"path", "gift"}}))
      .Increment(d->bytes_gift);
  metrics_.bytes_sent->Add(Labels({{"rank", rank}, {"path", "control"}}))
      .Increment(d->bytes_control);
  metrics_.bytes_sent->Add(Labels({{"rank", rank}, {"path", "audit"}}))
      .Increment(d->bytes_audit);
  metrics_.audit_steps->Add(Labels({{"rank", rank}})).Increment(d->audit_steps);
  metrics_.audit_seconds->Add(Labels({{"rank", rank}}))
      .Increment(d->audit_seconds);
  // Each difference is below 2^62: their sum of four fits a double, and
  // only what was saved counts (the audits' FP32 bytes are sent too).
  const double sent = static_cast<double>(d->bytes_euclid) +
                      static_cast<double>(d->bytes_gift) +
                      static_cast<double>(d->bytes_control) +
                      static_cast<double>(d->bytes_audit);
  metrics_.bytes_saved->Add(Labels({{"rank", rank}}))
      .Increment(
          std::max(0.0, static_cast<double>(d->bytes_fp32_equivalent) - sent));
  metrics_.transform_seconds->Add(Labels({{"rank", rank}}))
      .Increment(d->transform_seconds);
  metrics_.nonfinite_layers->Add(Labels({{"rank", rank}}))
      .Increment(d->nonfinite_layers);
  std::vector<double> counts(shm::kDurationBuckets);
  for (int b = 0; b < shm::kDurationBuckets; ++b) {
    counts[b] = static_cast<double>(d->duration_buckets[b]);
  }
  metrics::ObserveBuckets(
      &metrics_.collective_duration->Add(Labels({{"rank", rank}}),
                                         metrics_.duration_bounds),
      metrics_.duration_bounds, counts, d->collective_seconds);
  metrics_.rank_step->Add(Labels({{"rank", rank}})).Set(t.steps);
  s.last_totals = t;
}

void Daemon::ReadTelemetry() {
  std::vector<SelectorSample> samples(layers_.size());
  std::vector<double> err(layers_.size()), xsq(layers_.size()),
      xhx(layers_.size());
  for (auto& [id, s] : sessions_) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      TakeLayerSample(*s, static_cast<int>(i), &samples[i], &err[i], &xsq[i],
                      &xhx[i]);
    }
    TakeStepCounters(*s);
  }
  // A follower reports its node's samples; the leader adds them to its own
  // and alone feeds the selector.
  const bool follower = IsFollower();
  if (follower) {
    SendTelemetryReport(samples, err, xsq, xhx);
  } else if (peered_) {
    TakeRemoteSamples(&samples, &err, &xsq, &xhx);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    samples[i].factor_version = l.factors.newest_version();
    // The local round trip calibrates the audit rule's probe reference;
    // the slowest rank's step is the selector's clock.
    samples[i].round_trip_err_sq = err[i];
    samples[i].round_trip_x_sq = xsq[i];
    samples[i].step = sessions_.SlowestStep();
    if (!follower) {
      absl::Status st = planner_.selector().Observe(l.name, samples[i]);
      if (!st.ok()) LOG_WARNING("selector: %s", st.ToString());
    }
    if (xsq[i] > 0) RoundTrip(err[i], xsq[i], xhx[i], &l.rel_l2, &l.cosine);
    // The probe's local round trip of both paths, beside the audits.
    if (samples[i].probes > 0) {
      const double n = static_cast<double>(samples[i].probes);
      metrics_.probe_rel_l2
          ->Add(Labels({{"layer", l.name}, {"path", "euclid"}}))
          .Set(samples[i].probe_euclid_sum / n);
      metrics_.probe_rel_l2->Add(Labels({{"layer", l.name}, {"path", "gift"}}))
          .Set(samples[i].probe_gift_sum / n);
    }
  }
}

bool Daemon::ApplySelection(bool publish) {
  Planner::Selection d = planner_.ApplySelection(PlanLayers());
  for (const std::string& why : d.beta_changes) {
    Log(LogLevel::kInfo, "%s", why);
  }
  if (d.changed && publish) NewEpoch(absl::StrJoin(d.moves, ", "));
  return d.changed;
}

void Daemon::TakeWindows(int i, RankSession& s) {
  Layer& l = layers_[i];
  shm::LayerEntry* e = s.entry(i);
  int64_t& consumed = s.consumed[i];  // the daemon's own count
  const int64_t closed = e->window_closed.load(std::memory_order_acquire);
  if (closed == consumed) return;
  // The client begins window w + 2 in w's buffer only once w was consumed:
  // at most two windows are new since the last poll. (consumed is the
  // daemon's, at most 2^62: consumed + 2 cannot overflow; closed − consumed
  // could.)
  if (closed < consumed || closed > consumed + 2 || closed > shm::kMaxStep) {
    Malformed(s, "window",
              absl::StrFormat("layer %s: window %d closed after %d consumed",
                              l.name, closed, consumed));
    return;
  }
  for (const int64_t w : {closed - 1, closed}) {
    if (w <= consumed) continue;
    shm::SketchData data;
    absl::Status st = shm::ReadWindow(*e, s.geometry(i), *s.data(i), s.full(i),
                                      consumed, w, &data);
    // An older window may be gone from its buffer; the newest may not.
    if (absl::IsNotFound(st) && w < closed) continue;
    if (!st.ok()) {
      Malformed(s, "sketch_meta",
                absl::StrCat("layer ", l.name, ": ", st.message()));
      continue;
    }
    st = shm::CheckSketchData(data);
    if (!st.ok()) {
      // Non-finite activations are the training's, not a broken client's:
      // dropped and counted, but no step towards a disconnect.
      Malformed(s, "sketch_data",
                absl::StrCat("layer ", l.name, ": ", st.message()),
                /*garbage=*/false);
      continue;
    }
    l.windows.AddLocal(std::move(data));
  }
  consumed = closed;
  shm::ConsumeWindow(e, closed);
}

void Daemon::CollectWindows() {
  const int live = static_cast<int>(sessions_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    for (auto& [id, s] : sessions_) TakeWindows(static_cast<int>(i), *s);
    // The newest window every live rank contributed to is refreshed from
    // (with peers: sent to the layer's owner, which sums the nodes); older
    // incomplete ones can no longer complete.
    int dropped = 0;
    std::optional<WindowSum> sum = l.windows.TakeLocal(live, &dropped);
    if (sum.has_value()) {
      if (peered_) {
        Contribute(static_cast<int>(i), l, *sum);
      } else {
        SubmitRefresh(l, *sum);
      }
    }
    if (dropped > 0) {
      metrics_.sketch_windows
          ->Add(Labels({{"layer", l.name}, {"result", "incomplete"}}))
          .Increment(dropped);
    }
  }
}

void Daemon::SubmitRefresh(Layer& l, WindowSum& p) {
  const bool full = l.settings.transform() == v1::TRANSFORM_FULL;
  if (refresher_->Busy(l.name)) {
    metrics_.sketch_windows
        ->Add(Labels({{"layer", l.name}, {"result", "busy"}}))
        .Increment();
    return;
  }
  const int64_t omega_version = p.sum.meta.omega_version;
  const std::vector<float>* omega = &l.omega0;
  if (omega_version >= 0) {
    const std::vector<float>* kept = l.factors.OmegaOf(omega_version);
    if (kept == nullptr) {
      // Sketched in a basis of an earlier giftd: unusable here.
      metrics_.sketch_windows
          ->Add(Labels({{"layer", l.name}, {"result", "incomplete"}}))
          .Increment();
      return;
    }
    omega = kept;
  }
  if (p.sum.count <= 0 || (full && p.sum.a.empty())) return;
  RefreshJob job;
  job.layer = l.name;
  job.version = l.factors.TakeVersion();
  job.full = full;
  job.d = l.d_in;
  // The window sketched the first k columns of Ω (shm::SketchColumns); a
  // rank raised since it opened is built at most k wide.
  job.k = p.sum.meta.k;
  job.y = std::move(p.sum.y);
  job.omega = shm::FirstColumns(*omega, l.d_in, l.k_cap, job.k);
  job.r = static_cast<int>(
      std::min<int64_t>({l.r_cap, planner_.RankOf(l.settings), job.k}));
  job.k_next = l.k_cap;
  job.seed = config_.omega_seed + static_cast<uint64_t>(job.version);
  job.a = std::move(p.sum.a);
  job.trace = p.sum.trace;
  job.count = p.sum.count;
  job.beta = l.settings.beta() > 0 ? l.settings.beta()
             : full                ? config_.full_beta
                                   : config_.beta;
  job.end_step = p.sum.meta.end_step;
  absl::Status st = refresher_->Submit(std::move(job));
  if (!st.ok()) {
    LOG_WARNING("refresh of %s not submitted: %s", l.name, st.ToString());
    return;
  }
  metrics_.sketch_windows->Add(Labels({{"layer", l.name}, {"result", "used"}}))
      .Increment();
}

void Daemon::PublishResults() {
  for (RefreshResult& r : refresher_->TakeResults()) {
    Layer* l = nullptr;
    for (Layer& x : layers_) {
      if (x.name == r.layer) l = &x;
    }
    if (l == nullptr) continue;  // the job changed meanwhile
    if (!r.status.ok()) {
      metrics_.refresh_failures->Add(Labels({{"layer", l->name}})).Increment();
      LOG_WARNING("refresh of %s (version %d) failed: %s", l->name, r.version,
                  r.status.ToString());
      continue;
    }
    std::unique_ptr<shm::FactorData> f = FactorOf(*l, r);
    PeerLink* link = this->link();
    // Every other member installs the same bytes (OnFactor).
    std::optional<v1::PublishFactorRequest> out;
    if (link != nullptr) out = FactorMessage(*l, *f, r.seconds);
    absl::StatusOr<bool> installed = InstallFactor(*l, std::move(f), r.seconds);
    if (!installed.ok() || !*installed) continue;
    if (out.has_value()) link->BroadcastFactor(*std::move(out));
    metrics_.refresh_duration
        ->Add(Labels({{"layer", l->name}}), metrics_.refresh_bounds)
        .Observe(r.seconds);
  }
}

std::unique_ptr<shm::FactorData> Daemon::FactorOf(const Layer& l,
                                                  RefreshResult& r) const {
  auto f = std::make_unique<shm::FactorData>();
  f->version = r.version;
  f->kind = r.full ? 1 : 0;
  f->beta = r.beta;
  f->window = r.end_step;
  if (r.full) {
    f->t = std::move(r.dense.t);
    f->t_inv = std::move(r.dense.t_inv);
    f->sigma2 = r.dense.tau;
    // A full factor carries no new basis: the sketches keep the last one.
    const shm::FactorData* newest = l.factors.newest();
    f->omega =
        newest != nullptr && !newest->omega.empty() ? newest->omega : l.omega0;
  } else {
    f->r = r.low_rank.r;
    f->sigma2 = r.low_rank.sigma2;
    f->u = std::move(r.low_rank.u);
    f->c = std::move(r.low_rank.c);
    f->c_inv = std::move(r.low_rank.c_inv);
    f->lambda = std::move(r.low_rank.lambda);
    f->omega = std::move(r.low_rank.omega_next);
    f->trace_mean = r.low_rank.trace_mean;
    f->beta_auto = l.settings.beta_auto();
  }
  return f;
}

absl::StatusOr<bool> Daemon::InstallFactor(Layer& l,
                                           std::unique_ptr<shm::FactorData> f,
                                           double seconds) {
  const int64_t version = f->version;
  absl::StatusOr<bool> installed = l.factors.Install(std::move(f), seconds);
  if (!installed.ok()) {
    metrics_.factors_rejected->Add(Labels({{"layer", l.name}})).Increment();
    LOG_WARNING("factor %s v%d dropped (the layer keeps v%d): %s", l.name,
                version, l.factors.newest_version(),
                installed.status().message());
    return installed.status();
  }
  if (!*installed) return false;
  sessions_.PublishFactor(static_cast<int>(&l - layers_.data()),
                          *l.factors.newest(), l.name);
  ++refreshes_total_;
  metrics_.refreshes->Add(Labels({{"layer", l.name}})).Increment();
  LOG_DEBUG("published %s factor v%d (%.1f ms)", l.name, version,
            seconds * 1e3);
  return true;
}

void Daemon::UpdateGauges() {
  const int64_t step = sessions_.SlowestStep();
  int selected = 0;
  for (const Layer& l : layers_) {
    selected += l.selected;
    metrics_.layer_selected->Add(Labels({{"layer", l.name}})).Set(l.selected);
    metrics_.layer_candidate->Add(Labels({{"layer", l.name}})).Set(l.candidate);
    metrics_.vulnerability->Add(Labels({{"layer", l.name}}))
        .Set(l.score.vulnerability);
    metrics_.gain->Add(Labels({{"layer", l.name}})).Set(l.score.gain);
    metrics_.factor_version->Add(Labels({{"layer", l.name}}))
        .Set(l.factors.newest_version());
    const int64_t factor_step = l.factors.factor_step();
    metrics_.factor_age->Add(Labels({{"layer", l.name}}))
        .Set(factor_step < 0 ? 0 : std::max<int64_t>(0, step - factor_step));
  }
  metrics_.selected_layers->Add(Labels({})).Set(selected);
  metrics_.plan_epoch->Add(Labels({})).Set(planner_.epoch());
  metrics_.refresh_interval->Add(Labels({})).Set(planner_.refresh_interval());
  metrics_.ranks_registered->Add(Labels({})).Set(sessions_.size());
  metrics_.staleness_limit->Add(Labels({})).Set(config_.staleness_limit);
  const absl::Time now = absl::Now();
  for (const auto& [id, s] : sessions_) {
    metrics_.heartbeat_age->Add(Labels({{"rank", absl::StrCat(s->rank())}}))
        .Set(absl::ToDoubleSeconds(now - s->last_seen));
  }
  if (peered_) UpdatePeerGauges();
  if (PeerLink* l = link(); l != nullptr) {
    const PeerLinkStats st = l->stats();
    if (!l->is_leader()) {
      metrics_.peer_connected->Add(Labels({})).Set(st.connected);
      if (st.joins != joins_seen_) {
        joins_seen_ = st.joins;
        // (Re)joined: a partition may have kept a factor this daemon
        // computed as an owner from the others, while its ranks already
        // sketch in that factor's basis; every member installs what is
        // newer than its own (the rest is ignored).
        for (const Layer& layer : layers_) {
          if (layer.factors.newest() == nullptr) continue;
          l->BroadcastFactor(
              FactorMessage(layer, *layer.factors.newest(),
                            layer.factors.last_refresh_seconds()));
        }
      }
    }
    // The link keeps totals; the counters advance by what is new.
    for (const auto& [dir, list] :
         {std::make_pair("sent", &st.bytes_sent),
          std::make_pair("received", &st.bytes_received)}) {
      for (const auto& [kind, bytes] : *list) {
        int64_t& seen = peer_bytes_seen_[std::string(dir) + "/" + kind];
        if (bytes > seen) {
          metrics_.peer_bytes->Add(Labels({{"direction", dir}, {"kind", kind}}))
              .Increment(static_cast<double>(bytes - seen));
          seen = bytes;
        }
      }
    }
  }
}

void Daemon::UpdatePeerGauges() {
  metrics_.peer_term->Add(Labels({})).Set(static_cast<double>(term_.load()));
  metrics_.peer_coordinated->Add(Labels({})).Set(coordinated_ ? 1 : 0);
  PeerLink* l = link();
  metrics_.peer_leader->Add(Labels({}))
      .Set(l != nullptr && l->is_leader() && !IsFollower() ? 1 : 0);
}

}  // namespace gift::daemon
