// The fp8 mode of AllReduceEngine: the GIFT layers' whitening with
// worker error feedback, Euclidean error feedback, the probe steps, and the
// two-phase rounds over a bucket's pieces with the owner residuals of its
// layout.
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/allreduce_engine.h"
#include "client/chunking.h"
#include "client/probe.h"
#include "common/status_macros.h"

namespace gift::client {

// A layer the plan took off the GIFT path that still holds a worker
// residual: un-whiten it into the gradient and
// drop it, so the error it carries is sent now, in this step, instead of
// re-entering whenever the layer comes back (possibly many steps and
// factors later). Every rank does the same in the same step.
absl::Status AllReduceEngine::FlushResidual(int i, const BucketLayer& l,
                                            float* grad, GiftState& st) {
  if (st.residual == nullptr || st.factor == nullptr ||
      st.residual->data() == nullptr) {
    return absl::OkStatus();
  }
  if (whitened_[i] == nullptr) whitened_[i] = backend_->memory().NewBuffer();
  RETURN_IF_ERROR(whitened_[i]->Resize(l.size() * sizeof(float)));
  float* back = whitened_[i]->floats();
  RETURN_IF_ERROR(backend_->transforms().Inverse(
      *st.factor, st.residual->floats(), l.d_out(), back));
  RETURN_IF_ERROR(backend_->math().AddInPlace(grad, back, l.size()));
  RETURN_IF_ERROR(st.residual->Zero());
  st.previous = std::move(st.factor);  // the owner residuals' (this step)
  return absl::OkStatus();
}

absl::Status AllReduceEngine::PrepareGiftLayer(int i, const BucketLayer& l,
                                               const LayerFactor& f,
                                               const float* grad,
                                               bool euclid_owner, LayerIo* io) {
  const size_t bytes = l.size() * sizeof(float);
  GiftState& st = gift_[l.name];
  const bool ef = options_.error_feedback;
  st.previous.reset();
  if (ef) {
    if (st.residual == nullptr) st.residual = backend_->memory().NewBuffer();
    if (st.residual->bytes() != bytes || st.residual->data() == nullptr) {
      RETURN_IF_ERROR(st.residual->Resize(bytes));
      RETURN_IF_ERROR(st.residual->Zero());
      st.factor.reset();
    } else if (st.factor != nullptr && st.factor->version != f.version) {
      RETURN_IF_ERROR(backend_->transforms().Reproject(
          *st.factor, f, st.residual->floats(), l.d_out()));
    }
    if (st.factor == nullptr || st.factor->version != f.version) {
      st.previous = std::move(st.factor);
      st.factor = std::make_unique<LayerFactor>(f);
    }
  }
  if (whitened_[i] == nullptr) whitened_[i] = backend_->memory().NewBuffer();
  RETURN_IF_ERROR(whitened_[i]->Resize(bytes));
  float* whitened = whitened_[i]->floats();
  float* residual = ef ? st.residual->floats() : nullptr;
  RETURN_IF_ERROR(
      backend_->transforms().Forward(f, grad, l.d_out(), residual, whitened));
  io->src = io->dst = whitened;
  io->worker_residual = residual;
  io->owner_feedback = ef;
  io->reset_owner_residual = st.owner_version != f.version;
  // The owner residual is carried into the new coordinates (whole rows,
  // Fp8Round) when it is in the replaced factor's (a version switch) or in
  // gradient coordinates (the layer comes from the Euclidean path with
  // Euclidean feedback: R T, exact as for the worker's flush).
  if (ef && io->reset_owner_residual) {
    io->owner_to = st.factor.get();
    if (euclid_owner) {
      io->owner_carry = OwnerCarry::kWhiten;
    } else if (st.previous != nullptr &&
               st.previous->version == st.owner_version) {
      io->owner_carry = OwnerCarry::kReproject;
      io->owner_from = st.previous.get();
    }
  }
  st.owner_version = f.version;
  io->gift = true;
  return absl::OkStatus();
}

bool AllReduceEngine::EuclidFeedbackOn(const BucketLayer& l) const {
  switch (options_.euclid_error_feedback) {
    case EuclidFeedback::kOn:
      return true;
    case EuclidFeedback::kOff:
      return false;
    case EuclidFeedback::kAuto:
      break;
  }
  return l.format.is_fp4();
}

// A layer sent Euclidean this step: with feedback, x + r goes on the wire
// (added in place: the bucket is overwritten by the result anyway) and the
// round leaves r = x + r − x̂; without, a residual left from earlier is
// flushed. gift_owner (nullable): the factor whose whitened coordinates the
// owner residuals hold (the layer's last step was GIFT); they are
// un-whitened (whole rows, Fp8Round) instead of zeroed.
absl::Status AllReduceEngine::PrepareEuclidLayer(const BucketLayer& l,
                                                 float* grad,
                                                 const LayerFactor* gift_owner,
                                                 LayerIo* io) {
  if (!EuclidFeedbackOn(l)) return FlushEuclidResidual(l, grad);
  if (l.size() == 0) return absl::OkStatus();
  EuclidState& st = euclid_[l.name];
  const size_t bytes = l.size() * sizeof(float);
  if (st.residual == nullptr) st.residual = backend_->memory().NewBuffer();
  if (st.residual->bytes() != bytes || st.residual->data() == nullptr) {
    RETURN_IF_ERROR(st.residual->Resize(bytes));
    RETURN_IF_ERROR(st.residual->Zero());
  } else {
    RETURN_IF_ERROR(
        backend_->math().AddInPlace(grad, st.residual->floats(), l.size()));
  }
  io->worker_residual = st.residual->floats();
  io->owner_feedback = true;
  io->reset_owner_residual = !st.owner_live;
  if (io->reset_owner_residual && gift_owner != nullptr) {
    io->owner_carry = OwnerCarry::kUnwhiten;
    io->owner_from = gift_owner;
  }
  st.owner_live = true;
  return absl::OkStatus();
}

// Adds the layer's Euclidean worker residual (if any) to grad and drops it
// with the layer's Euclidean state.
absl::Status AllReduceEngine::FlushEuclidResidual(const BucketLayer& l,
                                                  float* grad,
                                                  bool* owner_live) {
  auto it = euclid_.find(l.name);
  if (owner_live != nullptr) {
    *owner_live = it != euclid_.end() && it->second.owner_live;
  }
  if (it == euclid_.end()) return absl::OkStatus();
  Fp8Buffer* r = it->second.residual.get();
  if (r != nullptr && r->data() != nullptr &&
      r->bytes() == l.size() * sizeof(float)) {
    RETURN_IF_ERROR(backend_->math().AddInPlace(grad, r->floats(), l.size()));
  }
  euclid_.erase(it);
  return absl::OkStatus();
}

absl::Status AllReduceEngine::Probe(const Group& g, const float* data,
                                    StepTelemetry* t) {
  const VersionedFactors& factors = *step_ctx_.factors;
  for (size_t j = 0; j < g.index.size(); ++j) {
    const BucketLayer& l = g.plan.layers()[j];
    // Probes judge the newest factor (probation, DESIGN §2), which the GIFT
    // path uses only once the daemon accepts it (VersionedFactors::Usable).
    const LayerFactor* f = factors.Newest(l.name);
    if (l.shape.size() != 2 || l.size() == 0 || f == nullptr ||
        !f->Validate(l.d_in()).ok()) {
      continue;
    }
    ProbeResult p;
    RETURN_IF_ERROR(backend_->probe().Probe(data + l.offset, l, *f, &p));
    LayerTelemetry& lt = t->layers[j];
    lt.probed = true;
    lt.probe_version = f->version;
    lt.probe_euclid_rel_l2 = p.euclid_rel_l2;
    lt.probe_gift_rel_l2 = p.gift_rel_l2;
    if (!f->beta_auto) continue;
    // β auto: the same round trip with the factor rebuilt for each grid β.
    BetaVariants& bv = beta_variants_[l.name];
    if (bv.version != f->version) {
      bv.version = kNoVersion;
      bv.f.clear();
      for (int b = 0; b < kBetaGrid; ++b) {
        ASSIGN_OR_RETURN(LayerFactor fb, f->WithBeta(kBetaGridValues[b]));
        bv.f.push_back(std::move(fb));
      }
      bv.version = f->version;
    }
    for (int b = 0; b < kBetaGrid; ++b) {
      RETURN_IF_ERROR(backend_->probe().Probe(data + l.offset, l, bv.f[b], &p));
      lt.probe_beta_rel_l2[b] = p.gift_rel_l2;
    }
    lt.beta_probed = true;
  }
  return absl::OkStatus();
}

// One bucket of an fp8 step: `t` has one entry per layer of g.plan (the
// bucket's own layout; g.index maps them to the step's plan).
absl::Status AllReduceEngine::RunFp8(float* data, const Group& g,
                                     const BucketGroup& layout,
                                     StepTelemetry* t) {
  const std::vector<BucketLayer>& layers = g.plan.layers();
  if (step_ctx_.t.probe_step) RETURN_IF_ERROR(Probe(g, data, t));
  if (step_ctx_.drift || step_ctx_.t.audit_step) {
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(AuditBefore(g, data));
    t->audit_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  }
  std::vector<LayerIo> io(layers.size());
  std::vector<const LayerFactor*> used(layers.size(), nullptr);
  RETURN_IF_ERROR(PrepareLayers(data, g, t, &io, &used));
  RoundOutcome outcome;
  outcome.Reset(layers.size());
  RETURN_IF_ERROR(RunRounds(g.plan, layout, io, &outcome));
  NoteOwnerCoords(g, layout, io, used);
  RETURN_IF_ERROR(FinishLayers(data, g, io, used, outcome, t));
  t->bytes_euclid = outcome.bytes_euclid;
  t->bytes_gift = outcome.bytes_gift;
  if (step_ctx_.drift || step_ctx_.t.audit_step) {
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(AuditAfter(g, data, t));
    t->audit_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  }
  return absl::OkStatus();
}

// Before the rounds: every layer's source and destination; a GIFT layer
// with an agreed factor is whitened (used[j] = that factor), one without
// keeps or flushes its worker residual; a layer sent Euclidean gets its
// Euclidean error feedback.
absl::Status AllReduceEngine::PrepareLayers(
    float* data, const Group& g, StepTelemetry* t, std::vector<LayerIo>* io,
    std::vector<const LayerFactor*>* used) {
  const std::vector<BucketLayer>& layers = g.plan.layers();
  const VersionedFactors& factors = *step_ctx_.factors;
  for (size_t j = 0; j < layers.size(); ++j) {
    const BucketLayer& l = layers[j];
    const int i = g.index[j];
    const int64_t version = step_ctx_.versions[i];
    (*io)[j].src = (*io)[j].dst = data + l.offset;
    if (version == kNoVersion) {
      const LayerFactor* gift_owner = nullptr;
      if (auto it = gift_.find(l.name); it != gift_.end()) {
        GiftState& st = it->second;
        // Off the GIFT path in the plan: flush. A GIFT layer merely without
        // an agreed factor this step keeps its residual for the next one.
        // Either way its owner residuals go Euclidean (un-whitened by the
        // factor they are in, which FlushResidual leaves in st.previous for
        // this step's rounds).
        const bool owner_gift =
            st.factor != nullptr && st.factor->version == st.owner_version;
        st.previous.reset();
        if (l.path != LayerPath::kGift) {
          RETURN_IF_ERROR(FlushResidual(i, l, data + l.offset, st));
        }
        if (owner_gift) {
          gift_owner =
              st.factor != nullptr ? st.factor.get() : st.previous.get();
        }
        st.owner_version = kNoVersion;
      }
      RETURN_IF_ERROR(
          PrepareEuclidLayer(l, data + l.offset, gift_owner, &(*io)[j]));
      continue;
    }
    // The GIFT path: a Euclidean residual joins the gradient first.
    bool euclid_owner = false;
    RETURN_IF_ERROR(FlushEuclidResidual(l, data + l.offset, &euclid_owner));
    const absl::Time start = absl::Now();
    (*used)[j] = factors.Find(l.name, version);
    RETURN_IF_ERROR(PrepareGiftLayer(i, l, *(*used)[j], data + l.offset,
                                     euclid_owner, &(*io)[j]));
    t->transform_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    t->layers[j].path = LayerPath::kGift;
    t->layers[j].factor_version = version;
  }
  return absl::OkStatus();
}

// The two-phase rounds over the bucket's pieces; the owner residuals of
// `layout` are made when a chunk of this rank first needs one.
absl::Status AllReduceEngine::RunRounds(const EpochPlan& plan,
                                        const BucketGroup& layout,
                                        const std::vector<LayerIo>& io,
                                        RoundOutcome* outcome) {
  const int w = comm_->world_size(), me = comm_->rank();
  const std::vector<Range> pieces =
      SplitIntoPieces(plan.communicated_elements(), options_.piece_bytes / 4);
  OwnerState* owners = nullptr;  // made when a chunk of mine needs one
  for (size_t k = 0; k < pieces.size(); ++k) {
    const PieceLayout piece =
        LayoutPiece(plan, pieces[k].begin, pieces[k].end, w);
    bool feedback = false;
    for (const Segment& s : piece.chunks[me].segments) {
      feedback |= io[s.layer].owner_feedback;
    }
    float* owner = nullptr;
    if (feedback) {
      if (owners == nullptr) {
        owners = &owner_residual_[layout.Key()];
        owners->group = layout;
        owners->pieces.resize(pieces.size());
      }
      std::unique_ptr<Fp8Buffer>& b = owners->pieces[k];
      const size_t bytes = piece.chunks[me].packed.size() * sizeof(float);
      if (b == nullptr) b = backend_->memory().NewBuffer();
      if (b->bytes() != bytes || b->data() == nullptr) {
        RETURN_IF_ERROR(b->Resize(bytes));
        RETURN_IF_ERROR(b->Zero());
      }
      owner = b->floats();
    }
    RETURN_IF_ERROR(round_->Run(plan, piece, io, owner, outcome));
  }
  return absl::OkStatus();
}

void AllReduceEngine::NoteOwnerCoords(
    const Group& g, const BucketGroup& layout, const std::vector<LayerIo>& io,
    const std::vector<const LayerFactor*>& used) {
  auto it = owner_residual_.find(layout.Key());
  if (it == owner_residual_.end()) return;
  OwnerState& os = it->second;
  if (!os.plan.has_value() || os.plan->Fingerprint() != g.plan.Fingerprint()) {
    os.plan = g.plan;
  }
  os.coords.assign(io.size(), kNoVersion);
  for (size_t j = 0; j < io.size(); ++j) {
    if (!io[j].owner_feedback) continue;
    os.coords[j] = io[j].gift ? used[j]->version : kEuclidCoords;
  }
}

// The owner residual is in sum units (Fp8Round::Reduce adds it to the sum of
// the ranks' contributions), so adding it to this rank's worker residual,
// which joins this rank's contribution, puts it into the next sum whichever
// rank owns those elements then. A layer whose worker residual is in other
// coordinates now (its path or factor changed since) drops its part, as does
// an imported layout (no plan).
absl::Status AllReduceEngine::FoldOwnerResidual(const OwnerState& os) {
  if (!os.plan.has_value()) return absl::OkStatus();
  const EpochPlan& plan = *os.plan;
  const std::vector<Range> pieces =
      SplitIntoPieces(plan.communicated_elements(), options_.piece_bytes / 4);
  for (size_t k = 0; k < pieces.size() && k < os.pieces.size(); ++k) {
    Fp8Buffer* b = os.pieces[k].get();
    if (b == nullptr || b->data() == nullptr) continue;
    const PieceLayout piece =
        LayoutPiece(plan, pieces[k].begin, pieces[k].end, comm_->world_size());
    for (const Segment& s : piece.chunks[comm_->rank()].segments) {
      const BucketLayer& l = plan.layers()[s.layer];
      const int64_t coords = os.coords[s.layer];  // set with os.plan
      Fp8Buffer* worker = nullptr;
      if (coords == kEuclidCoords) {
        auto e = euclid_.find(l.name);
        if (e != euclid_.end()) worker = e->second.residual.get();
      } else if (coords != kNoVersion) {
        auto g = gift_.find(l.name);
        if (g != gift_.end() && g->second.factor != nullptr &&
            g->second.factor->version == coords) {
          worker = g->second.residual.get();
        }
      }
      if (worker == nullptr || worker->data() == nullptr ||
          worker->bytes() != l.size() * sizeof(float) ||
          (s.elem_offset + s.count) * sizeof(float) > b->bytes()) {
        continue;
      }
      RETURN_IF_ERROR(
          backend_->math().AddInPlace(worker->floats() + s.layer_begin,
                                      b->floats() + s.elem_offset, s.count));
    }
  }
  return absl::OkStatus();
}

// After the rounds: the layers' telemetry; a non-finite layer is filled with
// NaN, a GIFT layer is un-whitened into the bucket.
absl::Status AllReduceEngine::FinishLayers(
    float* data, const Group& g, const std::vector<LayerIo>& io,
    const std::vector<const LayerFactor*>& used, const RoundOutcome& outcome,
    StepTelemetry* t) {
  const std::vector<BucketLayer>& layers = g.plan.layers();
  for (size_t j = 0; j < layers.size(); ++j) {
    const BucketLayer& l = layers[j];
    LayerTelemetry& lt = t->layers[j];
    lt.local = outcome.stats[j];
    lt.nonfinite_result = outcome.nonfinite[j];
    if (lt.nonfinite_result) {
      ++t->nonfinite_layers;
      RETURN_IF_ERROR(backend_->math().FillNaN(data + l.offset, l.size()));
    } else if (io[j].gift) {
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(backend_->transforms().Inverse(
          *used[j], whitened_[g.index[j]]->floats(), l.d_out(),
          data + l.offset));
      t->transform_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::client
