#include "client/python/state_convert.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

namespace gift::client::python {
namespace {

py::array_t<float> ToArray(const std::vector<float>& v) {
  py::array_t<float> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * 4);
  return a;
}

std::vector<float> FromArray(const py::handle& h) {
  auto a =
      py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!a) throw py::type_error("gift state: expected a float array");
  return std::vector<float>(a.data(), a.data() + a.size());
}

}  // namespace

py::dict FactorToPython(const LayerFactor& f) {
  py::dict d;
  d["version"] = f.version;
  d["kind"] = f.kind == GiftTransform::kFull ? "full" : "low-rank";
  d["d_in"] = f.d_in;
  d["r"] = f.r;
  d["u"] = ToArray(f.u);
  d["c"] = ToArray(f.c);
  d["c_inv"] = ToArray(f.c_inv);
  d["t"] = ToArray(f.t);
  d["t_inv"] = ToArray(f.t_inv);
  return d;
}

LayerFactor FactorFromPython(const py::dict& d) {
  LayerFactor f;
  f.version = d["version"].cast<int64_t>();
  f.kind = d["kind"].cast<std::string>() == "full" ? GiftTransform::kFull
                                                   : GiftTransform::kLowRank;
  f.d_in = d["d_in"].cast<int64_t>();
  f.r = d["r"].cast<int64_t>();
  f.u = FromArray(d["u"]);
  f.c = FromArray(d["c"]);
  f.c_inv = FromArray(d["c_inv"]);
  if (d.contains("t")) f.t = FromArray(d["t"]);
  if (d.contains("t_inv")) f.t_inv = FromArray(d["t_inv"]);
  return f;
}

py::dict PlanToPython(const EpochPlan& plan) {
  py::list layers;
  for (const BucketLayer& l : plan.layers()) {
    py::dict d;
    d["name"] = l.name;
    d["shape"] = l.shape;
    d["offset"] = l.offset;
    d["path"] = static_cast<int>(l.path);
    d["transform"] = static_cast<int>(l.transform);
    d["format"] = l.format.code();
    d["block_size"] = l.block_size;
    layers.append(d);
  }
  py::dict d;
  d["epoch"] = plan.epoch();
  d["bucket_elements"] = plan.bucket_elements();
  d["layers"] = layers;
  return d;
}

absl::StatusOr<EpochPlan> PlanFromPython(const py::dict& d) {
  std::vector<BucketLayer> layers;
  for (const py::handle& h : d["layers"].cast<py::list>()) {
    const py::dict l = h.cast<py::dict>();
    BucketLayer s;
    s.name = l["name"].cast<std::string>();
    s.shape = l["shape"].cast<std::vector<int64_t>>();
    s.offset = l["offset"].cast<int64_t>();
    s.path = static_cast<LayerPath>(l["path"].cast<int>());
    s.transform = static_cast<GiftTransform>(l["transform"].cast<int>());
    s.format = kernels::WireFormat::FromCode(l["format"].cast<int>());
    s.block_size = l["block_size"].cast<int64_t>();
    layers.push_back(std::move(s));
  }
  return EpochPlan::Create(d["epoch"].cast<int64_t>(),
                           d["bucket_elements"].cast<int64_t>(),
                           std::move(layers));
}

py::dict StateToPython(const AllReduceState& s, const NamedFactors& factors) {
  py::dict d;
  d["step"] = s.step;
  d["current_epoch"] = s.current_epoch;
  py::list plans, gift, owner, held;
  for (const EpochPlan& p : s.plans) plans.append(PlanToPython(p));
  for (const AllReduceState::GiftLayer& l : s.gift_layers) {
    py::dict g;
    g["name"] = l.name;
    g["residual"] = ToArray(l.residual);
    g["factor"] = l.has_factor ? py::object(FactorToPython(l.factor))
                               : py::object(py::none());
    g["owner_version"] = l.owner_version;
    gift.append(g);
  }
  for (const AllReduceState::OwnerResiduals& o : s.owner_residuals) {
    py::dict g;
    g["layers"] = o.layers;
    g["offsets"] = o.offsets;
    g["elements"] = o.elements;
    py::list pieces;
    for (const std::vector<float>& r : o.pieces) pieces.append(ToArray(r));
    g["pieces"] = pieces;
    owner.append(g);
  }
  py::list euclid;
  for (const AllReduceState::EuclidLayer& l : s.euclid_layers) {
    py::dict e;
    e["name"] = l.name;
    e["residual"] = ToArray(l.residual);
    e["owner_live"] = l.owner_live;
    euclid.append(e);
  }
  for (const auto& [name, f] : factors) {
    held.append(py::make_tuple(name, FactorToPython(f)));
  }
  d["euclid_layers"] = euclid;
  d["plans"] = plans;
  d["gift_layers"] = gift;
  d["owner_residuals"] = owner;
  d["factors"] = held;
  return d;
}

absl::StatusOr<AllReduceState> StateFromPython(const py::dict& d,
                                               NamedFactors* factors) {
  AllReduceState s;
  s.step = d["step"].cast<int64_t>();
  s.current_epoch = d["current_epoch"].cast<int64_t>();
  for (const py::handle& h : d["plans"].cast<py::list>()) {
    absl::StatusOr<EpochPlan> p = PlanFromPython(h.cast<py::dict>());
    if (!p.ok()) return p.status();
    s.plans.push_back(*std::move(p));
  }
  for (const py::handle& h : d["gift_layers"].cast<py::list>()) {
    const py::dict g = h.cast<py::dict>();
    AllReduceState::GiftLayer l;
    l.name = g["name"].cast<std::string>();
    l.residual = FromArray(g["residual"]);
    l.has_factor = !g["factor"].is_none();
    if (l.has_factor) l.factor = FactorFromPython(g["factor"].cast<py::dict>());
    l.owner_version = g["owner_version"].cast<int64_t>();
    s.gift_layers.push_back(std::move(l));
  }
  for (const py::handle& h : d["owner_residuals"].cast<py::list>()) {
    const py::dict g = h.cast<py::dict>();
    AllReduceState::OwnerResiduals o;
    o.layers = g["layers"].cast<std::vector<int>>();
    o.offsets = g["offsets"].cast<std::vector<int64_t>>();
    o.elements = g["elements"].cast<int64_t>();
    for (const py::handle& r : g["pieces"].cast<py::list>()) {
      o.pieces.push_back(FromArray(r));
    }
    s.owner_residuals.push_back(std::move(o));
  }
  // Absent in states saved before Euclidean error feedback: none.
  if (d.contains("euclid_layers")) {
    for (const py::handle& h : d["euclid_layers"].cast<py::list>()) {
      const py::dict e = h.cast<py::dict>();
      AllReduceState::EuclidLayer l;
      l.name = e["name"].cast<std::string>();
      l.residual = FromArray(e["residual"]);
      l.owner_live = e["owner_live"].cast<bool>();
      s.euclid_layers.push_back(std::move(l));
    }
  }
  factors->clear();
  for (const py::handle& h : d["factors"].cast<py::list>()) {
    const py::tuple t = h.cast<py::tuple>();
    factors->emplace_back(t[0].cast<std::string>(),
                          FactorFromPython(t[1].cast<py::dict>()));
  }
  return s;
}

py::dict TelemetryToPython(const StepTelemetry& t, double seconds,
                           const std::vector<LayerWire>& wire) {
  py::list layers;
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerTelemetry& l = t.layers[i];
    py::dict d;
    d["name"] = l.name;
    d["path"] = LayerPathName(l.path);
    if (i < wire.size()) {
      d["format"] = wire[i].format;
      d["wire_bytes"] = wire[i].bytes;
    }
    d["factor_version"] = l.factor_version;
    d["n"] = l.local.n;
    d["upper"] = l.local.upper;
    d["lower"] = l.local.lower;
    d["nonfinite"] = l.local.nonfinite;
    d["rel_l2"] =
        l.local.x_sq > 0 ? std::sqrt(l.local.err_sq / l.local.x_sq) : 0.0;
    d["nonfinite_result"] = l.nonfinite_result;
    d["probed"] = l.probed;
    d["probe_euclid_rel_l2"] = l.probe_euclid_rel_l2;
    d["probe_gift_rel_l2"] = l.probe_gift_rel_l2;
    d["audited"] = l.audited;
    d["audit_rel_l2"] = l.audit_rel_l2;
    d["audit_cosine"] = l.audit_cosine;
    d["drift_audited"] = l.drift_audited;
    d["audit_drift"] = l.audit_drift;
    d["drift_steps"] = l.drift_steps;
    layers.append(d);
  }
  py::dict d;
  d["step"] = t.step;
  d["plan_epoch"] = t.plan_epoch;
  d["probe_step"] = t.probe_step;
  d["audit_step"] = t.audit_step;
  d["bytes_audit"] = t.bytes_audit;
  d["audit_seconds"] = t.audit_seconds;
  d["nonfinite_layers"] = t.nonfinite_layers;
  d["bytes_euclid"] = t.bytes_euclid;
  d["bytes_gift"] = t.bytes_gift;
  d["bytes_control"] = t.bytes_control;
  d["transform_seconds"] = t.transform_seconds;
  d["seconds"] = seconds;
  d["layers"] = layers;
  return d;
}

py::dict AttachmentStatsToPython(const ConnectionStats& s) {
  py::dict d;
  d["attached"] = s.attached;
  d["attaches"] = s.attaches;
  d["detaches"] = s.detaches;
  d["plans_applied"] = s.plans_applied;
  d["factors_received"] = s.factors_received;
  d["stale_drops"] = s.stale_drops;
  d["windows_closed"] = s.windows_closed;
  d["windows_skipped"] = s.windows_skipped;
  d["current_epoch"] = s.current_epoch;
  d["current_refresh_interval"] = s.current_refresh_interval;
  d["daemon_instance"] = s.daemon_instance;
  d["last_error"] = s.last_error;
  return d;
}

}  // namespace gift::client::python
