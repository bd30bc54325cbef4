#include "client/versioned_factors.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::client {

absl::Status LayerFactor::Validate(int64_t layer_d_in) const {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("GIFT factor version ", version, ": ", what));
  };
  if (version < 0) return bad("negative version");
  if (d_in != layer_d_in) {
    return bad(absl::StrCat("d_in ", d_in, " does not match the layer's ",
                            layer_d_in));
  }
  const size_t d = static_cast<size_t>(d_in);
  if (kind == GiftTransform::kLowRank) {
    if (r < 0 || r > d_in) return bad("rank out of [0, d_in]");
    if (u.size() != d * r || c.size() != static_cast<size_t>(r) ||
        c_inv.size() != static_cast<size_t>(r)) {
      return bad("low-rank sizes: need u d_in*r, c and c_inv r floats");
    }
    if (!lambda.empty() && lambda.size() != static_cast<size_t>(r)) {
      return bad("lambda must be empty or r floats");
    }
    return absl::OkStatus();
  }
  if (t.size() != d * d || t_inv.size() != d * d) {
    return bad("full transform needs t and t_inv of d_in*d_in floats");
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerFactor> LayerFactor::WithBeta(double beta) const {
  if (!(beta > 0) || !std::isfinite(beta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WithBeta: beta must be finite and > 0 (got ", beta, ")"));
  }
  if (kind != GiftTransform::kLowRank || r < 1 ||
      lambda.size() != static_cast<size_t>(r) || !(trace_mean > 0) ||
      !std::isfinite(trace_mean)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "WithBeta: factor version ", version,
        " carries no eigenvalues and trace (not a beta-auto low-rank one)"));
  }
  double top = 0;
  for (float l : lambda) top += l;
  const double tail = d_in > r ? (trace_mean - top) / (d_in - r) : 0.0;
  const double sigma2 = std::max(tail, beta * trace_mean / d_in);
  LayerFactor out = *this;
  for (int64_t j = 0; j < r; ++j) {
    const double used = std::max<double>(lambda[j], sigma2);
    out.c[j] = static_cast<float>(std::sqrt(sigma2 / used) - 1.0);
    out.c_inv[j] = static_cast<float>(std::sqrt(used / sigma2) - 1.0);
  }
  return out;
}

absl::Status VersionedFactors::Put(const std::string& layer,
                                   LayerFactor factor) {
  if (factor.version < 0) {
    return absl::InvalidArgumentError("GIFT factor: negative version");
  }
  if (absl::Status s = factor.Validate(factor.d_in); !s.ok()) return s;
  std::vector<std::shared_ptr<LayerFactor>>& slots = by_layer_[layer];
  slots.erase(std::remove_if(
                  slots.begin(), slots.end(),
                  [&](const auto& f) { return f->version == factor.version; }),
              slots.end());
  slots.push_back(std::make_shared<LayerFactor>(std::move(factor)));
  std::sort(slots.begin(), slots.end(), [](const auto& a, const auto& b) {
    return a->version < b->version;
  });
  // Evict the oldest, but never the newest usable version.
  const std::vector<int64_t> usable = Usable(layer);
  while (slots.size() > kKeep) {
    auto victim = slots.begin();
    if (!usable.empty() && (*victim)->version == usable.back()) ++victim;
    if (victim == slots.end() || slots.size() <= kKeep) break;
    slots.erase(victim);
  }
  return absl::OkStatus();
}

void VersionedFactors::SetAccepted(const std::string& layer, int64_t version) {
  std::vector<int64_t>& a = accepted_[layer];
  if (version < 0) {
    a.clear();
    return;
  }
  if (std::find(a.begin(), a.end(), version) == a.end()) {
    a.push_back(version);
    std::sort(a.begin(), a.end());
  }
  // Keep what is held, and the newest (it may arrive later).
  const std::vector<int64_t> held = Held(layer);
  std::vector<int64_t> kept;
  for (int64_t v : a) {
    if (v == a.back() || std::find(held.begin(), held.end(), v) != held.end()) {
      kept.push_back(v);
    }
  }
  while (kept.size() > kKeep + 1) kept.erase(kept.begin());
  a = std::move(kept);
}

std::vector<int64_t> VersionedFactors::Usable(const std::string& layer) const {
  std::vector<int64_t> held = Held(layer);
  auto it = accepted_.find(layer);
  if (it == accepted_.end()) return held;
  std::vector<int64_t> out;
  for (int64_t v : held) {
    if (std::find(it->second.begin(), it->second.end(), v) !=
        it->second.end()) {
      out.push_back(v);
    }
  }
  return out;
}

const LayerFactor* VersionedFactors::Find(const std::string& layer,
                                          int64_t version) const {
  auto it = by_layer_.find(layer);
  if (it == by_layer_.end()) return nullptr;
  for (const auto& f : it->second) {
    if (f->version == version) return f.get();
  }
  return nullptr;
}

std::vector<int64_t> VersionedFactors::Held(const std::string& layer) const {
  std::vector<int64_t> v;
  auto it = by_layer_.find(layer);
  if (it == by_layer_.end()) return v;
  for (const auto& f : it->second) v.push_back(f->version);
  return v;
}

const LayerFactor* VersionedFactors::Newest(const std::string& layer) const {
  auto it = by_layer_.find(layer);
  if (it == by_layer_.end() || it->second.empty()) return nullptr;
  return it->second.back().get();
}

void VersionedFactors::Drop(const std::string& layer) {
  by_layer_.erase(layer);  // the gate stays: the daemon's acceptances hold
}

}  // namespace gift::client
