// Conversions between libgift's checkpoint state (AllReduceState, plans,
// GIFT factors, telemetry) and plain Python objects (dicts, lists, ints,
// floats, strings and float32 numpy arrays), so that GiftState.state_dict()
// can be pickled or torch.save-d without this extension.
//
//   py::dict d = StateToPython(*session->ExportState(), factors);
//   ASSIGN_OR_RETURN(auto state, StateFromPython(d, &factors));
//
// Thread safety: needs the GIL.
#ifndef GIFT_CLIENT_PYTHON_STATE_CONVERT_H_
#define GIFT_CLIENT_PYTHON_STATE_CONVERT_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/allreduce_engine.h"
#include "client/giftd_connection.h"
#include "client/python/native_rank.h"

namespace gift::client::python {

namespace py = pybind11;

using NamedFactors = std::vector<std::pair<std::string, LayerFactor>>;

py::dict FactorToPython(const LayerFactor& f);
LayerFactor FactorFromPython(const py::dict& d);  // throws on bad input

py::dict PlanToPython(const EpochPlan& plan);
absl::StatusOr<EpochPlan> PlanFromPython(const py::dict& d);

py::dict StateToPython(const AllReduceState& state,
                       const NamedFactors& factors);
// Throws (KeyError / TypeError) on a malformed dict.
absl::StatusOr<AllReduceState> StateFromPython(const py::dict& d,
                                               NamedFactors* factors);

// `wire`: per layer of the step's plan (NativeRank::WireOf), its format
// and bytes (each layer's "format", "wire_bytes"); empty = without them.
py::dict TelemetryToPython(const StepTelemetry& t, double seconds,
                           const std::vector<LayerWire>& wire = {});
py::dict AttachmentStatsToPython(const ConnectionStats& s);

}  // namespace gift::client::python

#endif  // GIFT_CLIENT_PYTHON_STATE_CONVERT_H_
