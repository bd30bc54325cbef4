// The node's half of the factor pipeline: windows from the local ranks,
// refreshes, installation into the ranks' slots.
#include "daemon/core/factor_pipeline.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log.h"

namespace gift::daemon {

void FactorPipeline::CountWindows(const JobLayer& l, const char* result,
                                  int n) {
  p_.metrics->sketch_windows
      ->Add(p_.layout->Labels({{"layer", l.name}, {"result", result}}))
      .Increment(n);
}

void FactorPipeline::TakeWindows(int i, RankSession& s) {
  JobLayer& l = p_.layout->layers()[i];
  shm::LayerEntry* e = s.entry(i);
  int64_t& consumed = s.consumed[i];  // the daemon's own count
  const int64_t closed = e->window_closed.load(std::memory_order_acquire);
  if (closed == consumed) return;
  // The client begins window w + 2 in w's buffer only once w was consumed:
  // at most two windows are new since the last poll. (consumed is the
  // daemon's, at most 2^62: consumed + 2 cannot overflow; closed − consumed
  // could.)
  if (closed < consumed || closed > consumed + 2 || closed > shm::kMaxStep) {
    p_.telemetry->Malformed(
        s, "window",
        absl::StrFormat("layer %s: window %d closed after %d consumed", l.name,
                        closed, consumed));
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
      p_.telemetry->Malformed(
          s, "sketch_meta", absl::StrCat("layer ", l.name, ": ", st.message()));
      continue;
    }
    st = shm::CheckSketchData(data);
    if (!st.ok()) {
      // Non-finite activations are the training's, not a broken client's:
      // dropped and counted, but no step towards a disconnect.
      p_.telemetry->Malformed(
          s, "sketch_data", absl::StrCat("layer ", l.name, ": ", st.message()),
          /*garbage=*/false);
      continue;
    }
    l.windows.AddLocal(std::move(data));
  }
  consumed = closed;
  shm::ConsumeWindow(e, closed);
}

void FactorPipeline::Collect() {
  const int live = static_cast<int>(p_.sessions->size());
  std::vector<JobLayer>& layers = p_.layout->layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    JobLayer& l = layers[i];
    for (auto& [id, s] : *p_.sessions) TakeWindows(static_cast<int>(i), *s);
    // The newest window every live rank contributed to is refreshed from
    // (with peers: sent to the layer's owner, which sums the nodes); older
    // incomplete ones can no longer complete.
    int dropped = 0;
    std::optional<WindowSum> sum = l.windows.TakeLocal(live, &dropped);
    if (sum.has_value()) {
      if (p_.peers->peered()) {
        Contribute(static_cast<int>(i), l, *sum);
      } else {
        SubmitRefresh(l, *sum);
      }
    }
    if (dropped > 0) CountWindows(l, "incomplete", dropped);
  }
}

void FactorPipeline::SubmitRefresh(JobLayer& l, WindowSum& p) {
  const DaemonConfig& c = *p_.config;
  const bool full = l.settings.transform() == v1::TRANSFORM_FULL;
  if (refresher_->Busy(l.name)) {
    CountWindows(l, "busy");
    return;
  }
  const int64_t omega_version = p.sum.meta.omega_version;
  const std::vector<float>* omega = &l.omega0;
  if (omega_version >= 0) {
    const std::vector<float>* kept = l.factors.OmegaOf(omega_version);
    if (kept == nullptr) {
      // Sketched in a basis of an earlier giftd: unusable here.
      CountWindows(l, "incomplete");
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
  const int rank = p_.planner->RankOf(l.settings);
  job.r = static_cast<int>(std::min<int64_t>({l.r_cap, rank, job.k}));
  // The next basis is as wide as the next windows sketch (r + p); it is
  // kept k_cap wide with Ω₀'s columns after it (FactorOf).
  job.k_next =
      std::max(job.r, shm::SketchColumns(l.k_cap, c.sketch_oversample, rank));
  job.seed = c.omega_seed + static_cast<uint64_t>(job.version);
  job.a = std::move(p.sum.a);
  job.trace = p.sum.trace;
  job.count = p.sum.count;
  job.beta = l.settings.beta() > 0 ? l.settings.beta()
             : full                ? c.full_beta
                                   : c.beta;
  job.end_step = p.sum.meta.end_step;
  absl::Status st = refresher_->Submit(std::move(job));
  if (!st.ok()) {
    LOG_WARNING("refresh of %s not submitted: %s", l.name, st.ToString());
    return;
  }
  CountWindows(l, "used");
}

void FactorPipeline::PublishResults() {
  for (RefreshResult& r : refresher_->TakeResults()) {
    JobLayer* l = nullptr;
    for (JobLayer& x : p_.layout->layers()) {
      if (x.name == r.layer) l = &x;
    }
    if (l == nullptr) continue;  // the job changed meanwhile
    if (!r.status.ok()) {
      p_.metrics->refresh_failures->Add(p_.layout->Labels({{"layer", l->name}}))
          .Increment();
      LOG_WARNING("refresh of %s (version %d) failed: %s", l->name, r.version,
                  r.status.ToString());
      continue;
    }
    std::unique_ptr<shm::FactorData> f = FactorOf(*l, r);
    PeerLink* link = p_.peers->link();
    // Every other member installs the same bytes (AcceptFactor).
    std::optional<v1::PublishFactorRequest> out;
    if (link != nullptr) out = FactorMessage(*l, *f, r.seconds);
    absl::StatusOr<bool> installed = InstallFactor(*l, std::move(f), r.seconds);
    if (!installed.ok() || !*installed) continue;
    if (out.has_value()) link->BroadcastFactor(*std::move(out));
    p_.metrics->refresh_duration
        ->Add(p_.layout->Labels({{"layer", l->name}}),
              p_.metrics->refresh_bounds)
        .Observe(r.seconds);
  }
}

std::unique_ptr<shm::FactorData> FactorPipeline::FactorOf(
    const JobLayer& l, RefreshResult& r) const {
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
    const int64_t k = static_cast<int64_t>(r.low_rank.omega_next.size()) /
                      std::max<int64_t>(1, l.d_in);
    f->omega = k == l.k_cap
                   ? std::move(r.low_rank.omega_next)
                   : shm::ColumnsThenRest(r.low_rank.omega_next, l.omega0,
                                          l.d_in, l.k_cap, k);
    f->trace_mean = r.low_rank.trace_mean;
    f->beta_auto = l.settings.beta_auto();
  }
  return f;
}

absl::StatusOr<bool> FactorPipeline::InstallFactor(
    JobLayer& l, std::unique_ptr<shm::FactorData> f, double seconds) {
  const int64_t version = f->version;
  absl::StatusOr<bool> installed = l.factors.Install(std::move(f), seconds);
  if (!installed.ok()) {
    p_.metrics->factors_rejected->Add(p_.layout->Labels({{"layer", l.name}}))
        .Increment();
    LOG_WARNING("factor %s v%d dropped (the layer keeps v%d): %s", l.name,
                version, l.factors.newest_version(),
                installed.status().message());
    return installed.status();
  }
  if (!*installed) return false;
  l.sketch.NoteFactor(version, l.factors.subspace_kept());
  p_.sessions->PublishFactor(p_.layout->IndexOf(l), *l.factors.newest(),
                             l.name);
  ++refreshes_total_;
  p_.metrics->refreshes->Add(p_.layout->Labels({{"layer", l.name}}))
      .Increment();
  LOG_DEBUG("published %s factor v%d (%.1f ms)", l.name, version,
            seconds * 1e3);
  return true;
}

}  // namespace gift::daemon
