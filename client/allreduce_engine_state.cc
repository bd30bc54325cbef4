// Checkpoint state of AllReduceEngine: ExportState / ImportState copy
// the carried state (plans, GIFT and Euclidean worker residuals, owner
// residuals) to and from plain host data.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/allreduce_engine.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

std::vector<float> CopyOut(Fp8Buffer* b) {
  if (b == nullptr || b->data() == nullptr) return {};
  const float* f = b->floats();
  return std::vector<float>(f, f + b->bytes() / sizeof(float));
}

absl::Status CopyIn(const std::vector<float>& v, BackendMemory* memory,
                    std::unique_ptr<Fp8Buffer>* b) {
  b->reset();
  if (v.empty()) return absl::OkStatus();
  *b = memory->NewBuffer();
  RETURN_IF_ERROR((*b)->Resize(v.size() * sizeof(float)));
  std::memcpy((*b)->data(), v.data(), v.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AllReduceState> AllReduceEngine::ExportState() const {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError("ExportState: a step is in progress");
  }
  if (backend_->memory().memory_kind() != MemoryKind::kHost) {
    return absl::FailedPreconditionError(
        "ExportState: host-memory allreduces only");
  }
  AllReduceState s;
  s.step = step_;
  s.current_epoch = current_epoch_;
  for (const auto& [epoch, plan] : plans_) s.plans.push_back(plan);
  for (const auto& [name, g] : gift_) {
    AllReduceState::GiftLayer l;
    l.name = name;
    l.residual = CopyOut(g.residual.get());
    l.has_factor = g.factor != nullptr;
    if (l.has_factor) l.factor = *g.factor;
    l.owner_version = g.owner_version;
    s.gift_layers.push_back(std::move(l));
  }
  for (const auto& [name, e] : euclid_) {
    AllReduceState::EuclidLayer l;
    l.name = name;
    l.residual = CopyOut(e.residual.get());
    l.owner_live = e.owner_live;
    s.euclid_layers.push_back(std::move(l));
  }
  for (const auto& [key, os] : owner_residual_) {
    AllReduceState::OwnerResiduals o;
    o.layers = os.group.layers;
    o.offsets = os.group.offsets;
    o.elements = os.group.elements;
    for (const auto& b : os.pieces) o.pieces.push_back(CopyOut(b.get()));
    s.owner_residuals.push_back(std::move(o));
  }
  return s;
}

absl::Status AllReduceEngine::ImportEuclidLayers(
    const AllReduceState& state,
    std::map<std::string, EuclidState>* euclid) const {
  const EpochPlan& layout = plans_.rbegin()->second;
  for (const AllReduceState::EuclidLayer& l : state.euclid_layers) {
    const int i = layout.FindLayer(l.name);
    if (i < 0 ||
        (!l.residual.empty() && static_cast<int64_t>(l.residual.size()) !=
                                    layout.layers()[i].size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ImportState: bad Euclidean layer state '", l.name, "'"));
    }
    EuclidState& e = (*euclid)[l.name];
    RETURN_IF_ERROR(CopyIn(l.residual, &backend_->memory(), &e.residual));
    e.owner_live = l.owner_live;
  }
  return absl::OkStatus();
}

absl::Status AllReduceEngine::ImportState(const AllReduceState& state) {
  if (step_ctx_.open) {
    return absl::FailedPreconditionError("ImportState: a step is in progress");
  }
  if (backend_->memory().memory_kind() != MemoryKind::kHost) {
    return absl::FailedPreconditionError(
        "ImportState: host-memory allreduces only");
  }
  const EpochPlan& layout = plans_.rbegin()->second;
  std::map<int64_t, EpochPlan> plans;
  for (const EpochPlan& p : state.plans) {
    if (!p.SameLayout(layout)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ImportState: plan of epoch ", p.epoch(), " has another layout"));
    }
    plans.emplace(p.epoch(), p);
  }
  if (!plans.contains(state.current_epoch) || plans.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportState: the current epoch ", state.current_epoch,
                     " must be among the (at most two) plans"));
  }
  std::map<std::string, GiftState> gift;
  for (const AllReduceState::GiftLayer& l : state.gift_layers) {
    const int i = layout.FindLayer(l.name);
    if (i < 0 ||
        (!l.residual.empty() && static_cast<int64_t>(l.residual.size()) !=
                                    layout.layers()[i].size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ImportState: bad GIFT layer state '", l.name, "'"));
    }
    GiftState& g = gift[l.name];
    RETURN_IF_ERROR(CopyIn(l.residual, &backend_->memory(), &g.residual));
    if (l.has_factor) {
      RETURN_IF_ERROR(l.factor.Validate(layout.layers()[i].d_in()));
      g.factor = std::make_unique<LayerFactor>(l.factor);
    }
    g.owner_version = l.owner_version;
  }
  std::map<std::string, EuclidState> euclid;
  RETURN_IF_ERROR(ImportEuclidLayers(state, &euclid));
  std::map<uint64_t, OwnerState> owner;
  for (const AllReduceState::OwnerResiduals& o : state.owner_residuals) {
    for (int i : o.layers) {
      if (i < 0 || i >= static_cast<int>(layout.layers().size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("ImportState: owner residuals of layer ", i));
      }
    }
    if (o.offsets.size() != o.layers.size()) {
      return absl::InvalidArgumentError(
          "ImportState: owner residuals need one offset per layer");
    }
    const BucketGroup g{o.layers, o.offsets, o.elements};
    OwnerState& os = owner[g.Key()];
    os.group = g;
    std::vector<std::unique_ptr<Fp8Buffer>>& pieces = os.pieces;
    pieces.resize(o.pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k) {
      RETURN_IF_ERROR(CopyIn(o.pieces[k], &backend_->memory(), &pieces[k]));
    }
  }
  plans_ = std::move(plans);
  drift_.clear();  // every rank's running sums restart at the import
  drift_steps_ = 0;
  current_epoch_ = state.current_epoch;
  step_ = state.step;
  gift_ = std::move(gift);
  euclid_ = std::move(euclid);
  owner_residual_ = std::move(owner);
  groups_.clear();  // checked again against the ranks when next used
  return absl::OkStatus();
}

}  // namespace gift::client
