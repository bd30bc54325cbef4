// The poll cycle of giftd: telemetry → metrics and selector → plan;
// closed sketch windows → refresher → factor slots.
#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "kernels/quantize.h"

namespace gift::daemon {

void Daemon::PollOnce() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  ReapDead();
  // A member of a multi-node job goes on without local ranks: the leader
  // decides from the followers' telemetry, an owner refreshes their windows.
  if (sessions_.empty() && (!peered_ || layers_.empty())) return;
  ReadTelemetry();
  if (!IsFollower()) ApplySelection();
  CollectWindows();
  PublishResults();
  UpdateGauges();
}

int64_t Daemon::SlowestStep() const {
  int64_t slowest = -1;
  for (const auto& [id, s] : sessions_) {
    const int64_t step = s->header()->step.load(std::memory_order_acquire);
    slowest = slowest < 0 ? step : std::min(slowest, step);
  }
  return std::max<int64_t>(slowest, 0);
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

}  // namespace

void Daemon::ReadTelemetry() {
  std::vector<SelectorSample> samples(layers_.size());
  std::vector<double> err(layers_.size()), xsq(layers_.size()),
      xhx(layers_.size());
  for (auto& [id, s] : sessions_) {
    const std::string rank = absl::StrCat(s->rank());
    s->last_step = std::max(s->last_step, s->header()->step.load());
    for (size_t i = 0; i < layers_.size(); ++i) {
      shm::LayerCounters now;
      if (!shm::ReadTelemetry(*s->entry(i), &now)) continue;
      shm::LayerCounters& was = s->last_counters[i];
      SelectorSample& x = samples[i];
      x.steps = std::max(x.steps, now.steps - was.steps);
      x.n += now.n - was.n;
      x.upper += now.upper - was.upper;
      x.lower += now.lower - was.lower;
      x.probes += now.probes - was.probes;
      x.probe_euclid_sum += now.probe_euclid_sum - was.probe_euclid_sum;
      x.probe_gift_sum += now.probe_gift_sum - was.probe_gift_sum;
      const double de = now.err_sq - was.err_sq, dx = now.x_sq - was.x_sq,
                   dxx = now.xhat_x - was.xhat_x;
      err[i] += de;
      xsq[i] += dx;
      xhx[i] += dxx;
      const Layer& l = layers_[i];
      if (now.steps > was.steps) {
        double rel, cos;
        RoundTrip(de, dx, dxx, &rel, &cos);
        const char* path = now.gift_steps > was.gift_steps ? "gift" : "euclid";
        metrics_.rel_l2->WithLabels(Labels({rank, l.name, path})).Set(rel);
        metrics_.cosine->WithLabels(Labels({rank, l.name, path})).Set(cos);
      }
      metrics_.boundary_hits->WithLabels(Labels({rank, l.name, "upper"}))
          .Increment(now.upper - was.upper);
      metrics_.boundary_hits->WithLabels(Labels({rank, l.name, "lower"}))
          .Increment(now.lower - was.lower);
      metrics_.quantized_elements->WithLabels(Labels({rank, l.name}))
          .Increment(now.n - was.n);
      metrics_.nonfinite_inputs->WithLabels(Labels({rank, l.name}))
          .Increment(now.nonfinite - was.nonfinite);
      was = now;
    }
    shm::StepCounters t;
    if (shm::ReadStepCounters(*s->header(), &t)) {
      shm::StepCounters& w = s->last_totals;
      metrics_.steps->WithLabels(Labels({rank})).Increment(t.steps - w.steps);
      metrics_.bytes_sent->WithLabels(Labels({rank, "euclid"}))
          .Increment(t.bytes_euclid - w.bytes_euclid);
      metrics_.bytes_sent->WithLabels(Labels({rank, "gift"}))
          .Increment(t.bytes_gift - w.bytes_gift);
      metrics_.bytes_sent->WithLabels(Labels({rank, "control"}))
          .Increment(t.bytes_control - w.bytes_control);
      const int64_t sent_now = t.bytes_euclid + t.bytes_gift + t.bytes_control;
      const int64_t sent_was = w.bytes_euclid + w.bytes_gift + w.bytes_control;
      metrics_.bytes_saved->WithLabels(Labels({rank}))
          .Increment(
              std::max<int64_t>(0, (t.bytes_fp32_equivalent - sent_now) -
                                       (w.bytes_fp32_equivalent - sent_was)));
      metrics_.transform_seconds->WithLabels(Labels({rank}))
          .Increment(t.transform_seconds - w.transform_seconds);
      metrics_.nonfinite_layers->WithLabels(Labels({rank}))
          .Increment(t.nonfinite_layers - w.nonfinite_layers);
      std::vector<uint64_t> counts(shm::kDurationBuckets);
      for (int b = 0; b < shm::kDurationBuckets; ++b) {
        counts[b] = t.duration_buckets[b] - w.duration_buckets[b];
      }
      metrics_.collective_duration->WithLabels(Labels({rank}))
          .ObserveBuckets(counts, t.collective_seconds - w.collective_seconds);
      metrics_.rank_step->WithLabels(Labels({rank})).Set(t.steps);
      w = t;
    }
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
    samples[i].factor_version = l.newest ? l.newest->version : -1;
    if (!follower) {
      absl::Status st = selector_.Observe(l.name, samples[i]);
      if (!st.ok()) LOG_WARNING("selector: %s", st.ToString());
    }
    if (xsq[i] > 0) RoundTrip(err[i], xsq[i], xhx[i], &l.rel_l2, &l.cosine);
  }
}

std::map<std::string, SelectorSettings> Daemon::SelectorSettingsByLayer()
    const {
  std::map<std::string, SelectorSettings> out;
  for (const Layer& l : layers_) {
    SelectorSettings s;
    s.pin = l.settings.pin() == v1::PIN_IN    ? PinState::kIn
            : l.settings.pin() == v1::PIN_OUT ? PinState::kOut
                                              : PinState::kAuto;
    s.full = l.settings.transform() == v1::TRANSFORM_FULL;
    s.rank = l.settings.rank() > 0 ? l.settings.rank() : rank_r_;
    out[l.name] = s;
  }
  return out;
}

bool Daemon::ApplySelection(bool publish) {
  SelectionDecision d = selector_.Decide(SelectorSettingsByLayer());
  bool changed = false;
  std::vector<std::string> moves;
  for (Layer& l : layers_) {
    l.score = d.scores[l.name];
    const bool cand = l.score.candidate, sel = l.score.selected;
    if (cand != l.candidate || sel != l.selected) {
      moves.push_back(absl::StrFormat("%s %s", l.name,
                                      sel    ? "selected"
                                      : cand ? "candidate"
                                             : "dropped"));
      changed = true;
    }
    l.candidate = cand;
    l.selected = sel;
  }
  for (const std::string& name : d.early_refresh) {
    for (Layer& l : layers_) {
      if (l.name != name) continue;
      ++l.refresh_seq;
      changed = true;
      moves.push_back(name + " early refresh (gain decayed)");
    }
  }
  if (changed && publish) NewEpoch(absl::StrJoin(moves, ", "));
  return changed;
}

void Daemon::CollectWindows() {
  const int live = static_cast<int>(sessions_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    for (auto& [id, s] : sessions_) {
      shm::LayerEntry* e = s->entry(static_cast<int>(i));
      const int64_t closed = e->window_closed.load(std::memory_order_acquire);
      const int64_t consumed = e->window_consumed.load();
      for (int64_t w = std::max(consumed + 1, closed - 1); w <= closed; ++w) {
        shm::SketchData data;
        if (!shm::ReadWindow(*e, *s->data(static_cast<int>(i)),
                             s->full(static_cast<int>(i)), w, &data)
                 .ok()) {
          continue;
        }
        auto& p = l.pending[{data.meta.end_step, data.meta.omega_version}];
        AddSketch(p, std::move(data));
        ++p.contributors;
      }
      if (closed > consumed) shm::ConsumeWindow(e, closed);
    }
    // The newest window every live rank contributed to is refreshed from
    // (with peers: sent to the layer's owner, which sums the nodes); older
    // incomplete ones can no longer complete.
    for (auto it = l.pending.rbegin(); it != l.pending.rend(); ++it) {
      if (it->second.contributors < live) continue;
      const auto key = it->first;
      if (peered_) {
        Contribute(static_cast<int>(i), l, it->second);
      } else {
        SubmitRefresh(l, it->second);
      }
      for (auto jt = l.pending.begin(); jt != l.pending.end();) {
        if (jt->first.first <= key.first) {
          const bool used = jt->first == key;
          if (!used) {
            metrics_.sketch_windows->WithLabels(Labels({l.name, "incomplete"}))
                .Increment();
          }
          jt = l.pending.erase(jt);
        } else {
          ++jt;
        }
      }
      break;
    }
  }
}

void Daemon::AddSketch(Layer::Pending& p, shm::SketchData data) {
  if (p.contributors == 0) {
    p.sum = std::move(data);
    return;
  }
  auto add = [](std::vector<float>& to, const std::vector<float>& v) {
    if (to.size() != v.size()) return;
    for (size_t j = 0; j < v.size(); ++j) to[j] += v[j];
  };
  add(p.sum.y, data.y);
  add(p.sum.a, data.a);
  p.sum.trace += data.trace;
  p.sum.count += data.count;
}

void Daemon::SubmitRefresh(Layer& l, Layer::Pending& p) {
  const bool full = l.settings.transform() == v1::TRANSFORM_FULL;
  if (refresher_->Busy(l.name)) {
    metrics_.sketch_windows->WithLabels(Labels({l.name, "busy"})).Increment();
    return;
  }
  const int64_t omega_version = p.sum.meta.omega_version;
  const std::vector<float>* omega = &l.omega0;
  if (omega_version >= 0) {
    auto it = l.omega_by_version.find(omega_version);
    if (it == l.omega_by_version.end()) {
      // Sketched in a basis of an earlier giftd: unusable here.
      metrics_.sketch_windows->WithLabels(Labels({l.name, "incomplete"}))
          .Increment();
      return;
    }
    omega = &it->second;
  }
  if (p.sum.count <= 0 || (full && p.sum.a.empty())) return;
  RefreshJob job;
  job.layer = l.name;
  job.version = l.next_version++;
  job.full = full;
  job.d = l.d_in;
  job.k = l.k_cap;
  job.y = std::move(p.sum.y);
  job.omega = *omega;
  job.r = std::min<int>(l.r_cap,
                        l.settings.rank() > 0 ? l.settings.rank() : rank_r_);
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
  metrics_.sketch_windows->WithLabels(Labels({l.name, "used"})).Increment();
}

void Daemon::PublishResults() {
  for (RefreshResult& r : refresher_->TakeResults()) {
    Layer* l = nullptr;
    for (Layer& x : layers_) {
      if (x.name == r.layer) l = &x;
    }
    if (l == nullptr) continue;  // the job changed meanwhile
    if (!r.status.ok()) {
      metrics_.refresh_failures->WithLabels(Labels({l->name})).Increment();
      LOG_WARNING("refresh of %s (version %d) failed: %s", l->name, r.version,
                  r.status.ToString());
      continue;
    }
    std::unique_ptr<shm::FactorData> f = FactorOf(*l, r);
    PeerLink* link = this->link();
    // Every other member installs the same bytes (OnFactor).
    std::optional<v1::PublishFactorRequest> out;
    if (link != nullptr) out = FactorMessage(*l, *f, r.seconds);
    if (!InstallFactor(*l, std::move(f), r.seconds)) continue;
    if (out.has_value()) link->BroadcastFactor(*std::move(out));
    metrics_.refresh_duration->WithLabels(Labels({l->name})).Observe(r.seconds);
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
    f->omega = l.newest != nullptr && !l.newest->omega.empty() ? l.newest->omega
                                                               : l.omega0;
  } else {
    f->r = r.low_rank.r;
    f->sigma2 = r.low_rank.sigma2;
    f->u = std::move(r.low_rank.u);
    f->c = std::move(r.low_rank.c);
    f->c_inv = std::move(r.low_rank.c_inv);
    f->lambda = std::move(r.low_rank.lambda);
    f->omega = std::move(r.low_rank.omega_next);
  }
  return f;
}

bool Daemon::InstallFactor(Layer& l, std::unique_ptr<shm::FactorData> f,
                           double seconds) {
  if (l.newest != nullptr && f->version <= l.newest->version) return false;
  l.omega_by_version[f->version] = f->omega;
  while (l.omega_by_version.size() > 4) {
    l.omega_by_version.erase(l.omega_by_version.begin());
  }
  const int i = static_cast<int>(&l - layers_.data());
  for (auto& [id, s] : sessions_) {
    absl::Status st =
        shm::PublishFactor(s->entry(i), s->data(i), s->full(i), *f);
    if (!st.ok()) {
      LOG_WARNING("publishing %s v%d to rank %d: %s", l.name, f->version,
                  s->rank(), st.ToString());
    }
  }
  // Whoever owns the layer later continues above every installed version.
  l.next_version = std::max(l.next_version, f->version + 1);
  l.factor_step = f->window;
  l.last_refresh_seconds = seconds;
  ++l.refreshes;
  ++refreshes_total_;
  metrics_.refreshes->WithLabels(Labels({l.name})).Increment();
  LOG_DEBUG("published %s factor v%d (%.1f ms)", l.name, f->version,
            seconds * 1e3);
  l.newest = std::move(f);
  return true;
}

void Daemon::UpdateGauges() {
  const int64_t step = SlowestStep();
  int selected = 0;
  for (const Layer& l : layers_) {
    selected += l.selected;
    metrics_.layer_selected->WithLabels(Labels({l.name})).Set(l.selected);
    metrics_.layer_candidate->WithLabels(Labels({l.name})).Set(l.candidate);
    metrics_.vulnerability->WithLabels(Labels({l.name}))
        .Set(l.score.vulnerability);
    metrics_.gain->WithLabels(Labels({l.name})).Set(l.score.gain);
    metrics_.factor_version->WithLabels(Labels({l.name}))
        .Set(l.newest ? l.newest->version : -1);
    metrics_.factor_age->WithLabels(Labels({l.name}))
        .Set(l.factor_step < 0 ? 0
                               : std::max<int64_t>(0, step - l.factor_step));
  }
  metrics_.selected_layers->WithLabels(Labels({})).Set(selected);
  metrics_.plan_epoch->WithLabels(Labels({})).Set(plan_epoch_);
  metrics_.refresh_interval->WithLabels(Labels({})).Set(refresh_interval_);
  metrics_.ranks_registered->WithLabels(Labels({})).Set(sessions_.size());
  metrics_.staleness_limit->WithLabels(Labels({})).Set(config_.staleness_limit);
  const absl::Time now = absl::Now();
  for (const auto& [id, s] : sessions_) {
    metrics_.heartbeat_age->WithLabels(Labels({absl::StrCat(s->rank())}))
        .Set(absl::ToDoubleSeconds(now - s->last_seen));
  }
  if (PeerLink* l = link(); l != nullptr) {
    const PeerLinkStats st = l->stats();
    if (!l->is_leader()) {
      metrics_.peer_connected->WithLabels(Labels({})).Set(st.connected);
      if (st.joins != joins_seen_) {
        joins_seen_ = st.joins;
        // (Re)joined: a partition may have kept a factor this daemon
        // computed as an owner from the others, while its ranks already
        // sketch in that factor's basis; every member installs what is
        // newer than its own (the rest is ignored).
        for (const Layer& layer : layers_) {
          if (layer.newest == nullptr) continue;
          l->BroadcastFactor(
              FactorMessage(layer, *layer.newest, layer.last_refresh_seconds));
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
          metrics_.peer_bytes->WithLabels(Labels({dir, kind}))
              .Increment(static_cast<double>(bytes - seen));
          seen = bytes;
        }
      }
    }
  }
}

}  // namespace gift::daemon
