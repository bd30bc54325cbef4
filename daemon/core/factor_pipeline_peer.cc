// The multi-node half of the factor pipeline (DESIGN §4): each node sums its
// local ranks' window of a layer and sends it to the layer's owner; the
// owner adds the nodes' sums until they cover the job's world size,
// refreshes and broadcasts the factor, which every member installs with
// InstallFactor (the owner its own result, the others in AcceptFactor): the
// same bytes in every rank's slot on every node.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/log.h"

namespace gift::daemon {
namespace {

absl::Status CheckLen(size_t got, int64_t want, const char* what) {
  if (static_cast<int64_t>(got) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s has %d values, expected %d", what, got, want));
}

}  // namespace

v1::PublishFactorRequest FactorToMessage(const std::string& job_id,
                                         const std::string& node, int64_t term,
                                         const JobLayer& l,
                                         const shm::FactorData& f,
                                         double seconds) {
  v1::PublishFactorRequest m;
  m.set_job_id(job_id);
  m.set_owner(node);
  m.set_term(term);
  v1::PeerFactor* x = m.mutable_factor();
  x->set_layer(l.name);
  x->set_version(f.version);
  x->set_kind(f.kind);
  x->set_r(f.r);
  x->set_sigma2(f.sigma2);
  x->set_beta(f.beta);
  x->set_window(f.window);
  x->set_trace_mean(f.trace_mean);
  x->set_beta_auto(f.beta_auto);
  *x->mutable_u() = {f.u.begin(), f.u.end()};
  *x->mutable_c() = {f.c.begin(), f.c.end()};
  *x->mutable_c_inv() = {f.c_inv.begin(), f.c_inv.end()};
  *x->mutable_lambda() = {f.lambda.begin(), f.lambda.end()};
  // Ω's columns after the first omega_cols are Ω₀'s (FactorOf), and its
  // first omega_u_cols U's (FinishLowRank), which every member holds or
  // receives here: only the columns between travel.
  const int64_t k = shm::ColumnsBeforeRest(f.omega, l.omega0, l.d_in, l.k_cap);
  const int64_t from_u =
      std::min(k, shm::LeadingColumnsEqual(f.omega, l.d_in, l.k_cap, f.u, f.r));
  x->set_omega_cols(static_cast<int32_t>(k));
  x->set_omega_u_cols(static_cast<int32_t>(from_u));
  const std::vector<float> sent =
      shm::ColumnRange(f.omega, l.d_in, l.k_cap, from_u, k);
  *x->mutable_omega() = {sent.begin(), sent.end()};
  *x->mutable_t() = {f.t.begin(), f.t.end()};
  *x->mutable_t_inv() = {f.t_inv.begin(), f.t_inv.end()};
  x->set_seconds(seconds);
  return m;
}

absl::StatusOr<std::unique_ptr<shm::FactorData>> FactorFromMessage(
    const JobLayer& l, const v1::PublishFactorRequest& r) {
  const v1::PeerFactor& x = r.factor();
  // The same checks as a rank's slot applies, before anything is kept.
  const int32_t min_r = x.kind() == 0 ? 1 : 0;
  if (x.version() < 1 || (x.kind() != 0 && x.kind() != 1) || x.r() < min_r ||
      x.r() > l.r_cap) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "factor of %s from %s: version %d, kind %d, r %d (r_cap %d)", l.name,
        Clip(r.owner()), x.version(), x.kind(), x.r(), l.r_cap));
  }
  RETURN_IF_ERROR(CheckLen(x.u_size(), l.d_in * x.r(), "U"));
  RETURN_IF_ERROR(CheckLen(x.c_size(), x.r(), "c"));
  RETURN_IF_ERROR(CheckLen(x.c_inv_size(), x.r(), "c_inv"));
  RETURN_IF_ERROR(CheckLen(x.lambda_size(), x.r(), "lambda"));
  if (x.omega_cols() < 0 || x.omega_cols() > l.k_cap) {
    return absl::InvalidArgumentError(
        absl::StrFormat("factor of %s from %s: omega_cols %d (0..k_cap %d)",
                        l.name, Clip(r.owner()), x.omega_cols(), l.k_cap));
  }
  if (x.omega_u_cols() < 0 || x.omega_u_cols() > x.omega_cols() ||
      x.omega_u_cols() > x.r()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "factor of %s from %s: omega_u_cols %d (0..min(omega_cols %d, r %d))",
        l.name, Clip(r.owner()), x.omega_u_cols(), x.omega_cols(), x.r()));
  }
  RETURN_IF_ERROR(CheckLen(
      x.omega_size(), l.d_in * (x.omega_cols() - x.omega_u_cols()), "omega"));
  if (x.kind() == 1) {
    RETURN_IF_ERROR(CheckLen(x.t_size(), l.d_in * l.d_in, "T"));
    RETURN_IF_ERROR(CheckLen(x.t_inv_size(), l.d_in * l.d_in, "T_inv"));
  }
  auto f = std::make_unique<shm::FactorData>();
  f->version = x.version();
  f->kind = x.kind();
  f->r = x.r();
  f->sigma2 = x.sigma2();
  f->beta = x.beta();
  f->window = x.window();
  f->trace_mean = x.trace_mean();
  f->beta_auto = x.beta_auto();
  f->u.assign(x.u().begin(), x.u().end());
  f->c.assign(x.c().begin(), x.c().end());
  f->c_inv.assign(x.c_inv().begin(), x.c_inv().end());
  f->lambda.assign(x.lambda().begin(), x.lambda().end());
  f->omega.assign(x.omega().begin(), x.omega().end());
  if (x.omega_u_cols() > 0) {
    f->omega = shm::SideBySide(
        shm::FirstColumns(f->u, l.d_in, f->r, x.omega_u_cols()),
        x.omega_u_cols(), f->omega, x.omega_cols() - x.omega_u_cols(), l.d_in);
  }
  if (x.omega_cols() < l.k_cap) {
    f->omega = shm::ColumnsThenRest(f->omega, l.omega0, l.d_in, l.k_cap,
                                    x.omega_cols());
  }
  if (f->omega.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "factor of %s from %s: no Ω₀ of %d x %d to complete its %d columns "
        "of omega",
        l.name, Clip(r.owner()), l.d_in, l.k_cap, x.omega_cols()));
  }
  f->t.assign(x.t().begin(), x.t().end());
  f->t_inv.assign(x.t_inv().begin(), x.t_inv().end());
  return f;
}

// ---- windows ----------------------------------------------------------------

void FactorPipeline::Contribute(int i, JobLayer& l, WindowSum& p) {
  const DaemonConfig& c = *p_.config;
  PeerLink* link = p_.peers->link();
  const v1::Member owner = link->OwnerOf(i);
  if (link->IsSelf(owner)) {
    AddOwned(l, c.node, p.contributors, std::move(p.sum));
    return;
  }
  v1::PushSketchRequest m;
  m.set_job_id(c.job_id);
  m.set_layer(l.name);
  m.set_end_step(p.sum.meta.end_step);
  m.set_omega_version(p.sum.meta.omega_version);
  m.set_contributors(p.contributors);
  m.set_k(p.sum.meta.k);
  *m.mutable_y() = {p.sum.y.begin(), p.sum.y.end()};
  m.set_trace(p.sum.trace);
  m.set_count(p.sum.count);
  m.set_full(p.sum.meta.full != 0);
  *m.mutable_a() = {p.sum.a.begin(), p.sum.a.end()};
  m.set_node(c.node);
  link->SendSketch(owner, std::move(m));
}

void FactorPipeline::AddOwned(JobLayer& l, const std::string& node,
                              int contributors, shm::SketchData data) {
  const int64_t end_step = data.meta.end_step;
  const int world_size = p_.layout->world_size();
  int dropped = 0;
  WindowCollector::Owned o = l.windows.AddOwned(
      node, contributors, std::move(data), world_size, &dropped);
  switch (o.result) {
    case WindowCollector::Owned::kMismatch:
      LOG_WARNING("%s window %d from %s does not add up; dropped", l.name,
                  end_step, Clip(node));
      break;
    case WindowCollector::Owned::kComplete:
      SubmitRefresh(l, *o.sum);
      break;
    case WindowCollector::Owned::kTooMany:
      LOG_WARNING("%s window %d: %d contributors for world size %d (from %s)",
                  l.name, end_step, o.contributors, world_size,
                  absl::StrJoin(o.sources, ", "));
      break;
    case WindowCollector::Owned::kWaiting:
      break;
  }
  if (dropped > 0) CountWindows(l, "incomplete", dropped);
  if (!o.lagging.empty()) ResendFactor(l, o.lagging, o.basis);
}

void FactorPipeline::ResendFactor(
    JobLayer& l, const std::vector<std::pair<std::string, int64_t>>& lagging,
    int64_t basis) {
  const shm::FactorData* f = l.factors.newest();
  // Without the factor of the newer basis (a restarted owner) there is
  // nothing to send: that window is lost, later ones line up again.
  if (f == nullptr || f->version < basis) return;
  PeerLink* link = p_.peers->link();
  const std::vector<v1::Member> members = link->members();
  for (const auto& [node, old_basis] : lagging) {
    // (A structured binding cannot be captured before C++20.)
    const std::string& name = node;
    auto m =
        std::find_if(members.begin(), members.end(),
                     [&](const v1::Member& x) { return x.node() == name; });
    if (m == members.end() || link->IsSelf(*m)) continue;
    auto& [version, times] = l.resent[node];
    if (version != f->version) {
      version = f->version;
      times = 0;
    }
    ++times;
    // A window that opened while the broadcast was on its way lags once;
    // a lost broadcast lags until the factor is sent again.
    const std::string what = absl::StrFormat(
        "%s: node %s sketches in the basis %s, the others in that of v%d (it "
        "lacks that factor): sending it v%d again",
        l.name, Clip(node),
        old_basis < 0 ? std::string("Ω₀") : absl::StrCat("of v", old_basis),
        basis, f->version);
    if (times == 2) {
      LOG_INFO("%s", what);
    } else {
      LOG_DEBUG("%s", what);
    }
    link->SendFactor(*m,
                     FactorMessage(l, *f, l.factors.last_refresh_seconds()));
  }
}

absl::Status FactorPipeline::AcceptSketch(const v1::PushSketchRequest& r) {
  ASSIGN_OR_RETURN(JobLayer * l, p_.layout->Find(r.layer()));
  if (r.k() < 1 || r.k() > l->k_cap || r.contributors() < 1 ||
      r.contributors() > p_.layout->world_size() || r.count() < 0 ||
      r.count() / r.contributors() > shm::kMaxSketchCount) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sketch of %s from %s: k %d (1..k_cap %d), %d "
        "contributors, count %d",
        l->name, Clip(r.node()), r.k(), l->k_cap, r.contributors(), r.count()));
  }
  RETURN_IF_ERROR(CheckLen(r.y_size(), l->d_in * r.k(), "sketch y"));
  if (r.full()) RETURN_IF_ERROR(CheckLen(r.a_size(), l->d_in * l->d_in, "A"));
  shm::SketchData data;
  data.meta.end_step = r.end_step();
  data.meta.omega_version = r.omega_version();
  data.meta.k = r.k();
  data.meta.full = r.full() ? 1 : 0;
  data.y.assign(r.y().begin(), r.y().end());
  data.a.assign(r.a().begin(), r.a().end());
  data.trace = r.trace();
  data.count = r.count();
  AddOwned(*l, r.node(), r.contributors(), std::move(data));
  return absl::OkStatus();
}

// ---- factors ----------------------------------------------------------------

v1::PublishFactorRequest FactorPipeline::FactorMessage(const JobLayer& l,
                                                       const shm::FactorData& f,
                                                       double seconds) const {
  return FactorToMessage(p_.config->job_id, p_.config->node, p_.peers->term(),
                         l, f, seconds);
}

absl::Status FactorPipeline::AcceptFactor(const v1::PublishFactorRequest& r) {
  if (p_.layout->empty()) {
    // No local rank has declared the job's layers yet (a restarted
    // follower): keep the newest of each layer for InstallPending, so that
    // its ranks sketch in the same basis Ω as every other node.
    v1::PublishFactorRequest& kept = pending_factors_[r.factor().layer()];
    if (r.factor().version() > kept.factor().version()) kept = r;
    return absl::OkStatus();
  }
  return InstallPeerFactor(r);
}

void FactorPipeline::InstallPending() {
  std::map<std::string, v1::PublishFactorRequest> pending;
  pending.swap(pending_factors_);
  for (const auto& [name, r] : pending) {
    absl::Status st = InstallPeerFactor(r);
    if (!st.ok()) {
      LOG_WARNING("factor of %s kept from the peers: %s", name, st.ToString());
    }
  }
}

std::vector<v1::PublishFactorRequest> FactorPipeline::NewestFactors() const {
  std::vector<v1::PublishFactorRequest> out;
  for (const JobLayer& l : p_.layout->layers()) {
    if (const shm::FactorData* f = l.factors.newest(); f != nullptr) {
      out.push_back(FactorMessage(l, *f, l.factors.last_refresh_seconds()));
    }
  }
  return out;
}

void FactorPipeline::BroadcastNewest(PeerLink* link) {
  for (const JobLayer& layer : p_.layout->layers()) {
    if (layer.factors.newest() == nullptr) continue;
    link->BroadcastFactor(FactorMessage(layer, *layer.factors.newest(),
                                        layer.factors.last_refresh_seconds()));
  }
}

absl::Status FactorPipeline::InstallPeerFactor(
    const v1::PublishFactorRequest& r) {
  ASSIGN_OR_RETURN(JobLayer * l, p_.layout->Find(r.factor().layer()));
  ASSIGN_OR_RETURN(std::unique_ptr<shm::FactorData> f,
                   FactorFromMessage(*l, r));
  if (f->kind == 1) {
    RETURN_IF_ERROR(p_.sessions->EnsureFullRegions(p_.layout->FullLayers()));
  }
  // An old version is ignored; a factor out of bounds is refused.
  return InstallFactor(*l, std::move(f), r.factor().seconds()).status();
}

}  // namespace gift::daemon
