// The extension module `gift._gift`: NativeRank (session.h) for the Python
// package. Host buffers come in as float32 numpy arrays (the buffer
// protocol; torch CPU tensors through .numpy(), which shares memory);
// device buffers as integer data pointers (torch CUDA tensors' data_ptr(),
// REQUIRES the producing stream synchronised, or the overlapped calls'
// stream ordering). Errors are raised as gift.GiftError (a RuntimeError)
// with .code (the absl/gRPC code name, e.g. "UNAVAILABLE") and .message.
// The GIL is released around collectives.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/python/native_rank.h"
#include "client/python/py_store.h"
#include "client/python/state_convert.h"
#include "common/agent_socket.h"
#include "kernels/cpu_baseline.h"

namespace gift::client::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style>;

// A libgift error on its way to Python as gift.GiftError.
struct StatusError {
  absl::Status status;
};

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw StatusError{s};
}

void RegisterGiftError(py::module_& m) {
  static py::exception<StatusError> type(m, "GiftError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const std::string code(absl::StatusCodeToString(e.status.code()));
      const std::string message(e.status.message());
      py::object err = py::reinterpret_borrow<py::object>(type.ptr())(
          absl::StrCat(code, ": ", message));
      err.attr("code") = code;
      err.attr("message") = message;
      PyErr_SetObject(type.ptr(), err.ptr());
    }
  });
}

BucketGroup GroupFromPython(const std::vector<int>& layers,
                            const std::vector<int64_t>& offsets,
                            int64_t elements) {
  return BucketGroup{layers, offsets, elements};
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

std::vector<BucketLayer> LayersFromPython(const py::list& list) {
  std::vector<BucketLayer> layers;
  for (const py::handle& h : list) {
    const py::tuple t = h.cast<py::tuple>();
    BucketLayer l;
    l.name = t[0].cast<std::string>();
    l.shape = t[1].cast<std::vector<int64_t>>();
    l.offset = t[2].cast<int64_t>();
    layers.push_back(std::move(l));
  }
  return layers;
}

std::unique_ptr<NativeRank> CreateNativeRank(const py::dict& o,
                                             const py::list& layers,
                                             int64_t total) {
  NativeRankOptions s;
  auto str = [&](const char* k, std::string* v) {
    if (o.contains(k) && !o[k].is_none()) *v = o[k].cast<std::string>();
  };
  auto num = [&](const char* k, auto* v) {
    if (o.contains(k) && !o[k].is_none()) {
      *v = o[k].cast<std::remove_pointer_t<decltype(v)>>();
    }
  };
  str("mode", &s.mode);
  str("backend", &s.backend);
  str("store_dir", &s.store_dir);
  str("key_prefix", &s.key_prefix);
  str("agent_socket", &s.agent_socket);
  str("job_id", &s.job_id);
  num("rank", &s.rank);
  num("world_size", &s.world_size);
  num("local_rank", &s.local_rank);
  num("device", &s.device);
  num("daemon_store", &s.daemon_store);
  num("probe_interval", &s.probe_interval);
  num("audit_interval", &s.audit_interval);
  num("audit_drift", &s.audit_drift);
  num("timeout_seconds", &s.timeout_seconds);
  str("socket_ifname", &s.socket_ifname);
  str("format", &s.format);
  str("error_feedback", &s.error_feedback);
  num("owner_release_cap", &s.owner_release_cap);
  if (o.contains("store") && !o["store"].is_none()) {
    s.store = std::make_shared<PyStore>(o["store"]);
  }
  std::vector<BucketLayer> specs = LayersFromPython(layers);
  py::gil_scoped_release release;  // rendezvous is collective
  return ValueOrThrow(NativeRank::Create(s, std::move(specs), total));
}

// A host array of exactly `n` floats, writable when `write`.
float* HostFloats(FloatArray& a, int64_t n, bool write, const char* what) {
  if (a.size() != n) {
    throw py::value_error(absl::StrCat(what, ": expected ", n,
                                       " float32 elements, got ", a.size()));
  }
  if (write && !a.writeable()) {
    throw py::value_error(absl::StrCat(what, ": array is read-only"));
  }
  return write ? a.mutable_data() : const_cast<float*>(a.data());
}

// A step's telemetry, each layer with its wire format and bytes.
py::dict StepToPython(const NativeRank& s, const StepResult& r) {
  return TelemetryToPython(r.telemetry, r.seconds,
                           s.WireOf(r.telemetry.plan_epoch));
}

py::dict EndStep(NativeRank& s) {
  StepResult r;
  {
    py::gil_scoped_release release;
    r = ValueOrThrow(s.EndStep());
  }
  return StepToPython(s, r);
}

py::dict Step(NativeRank& s, float* flat) {
  StepResult r;
  {
    py::gil_scoped_release release;
    r = ValueOrThrow(s.Step(flat));
  }
  return StepToPython(s, r);
}

// Activation sketches: host arrays, device pointers and the sketch stream.
void BindSketches(py::class_<NativeRank>& c) {
  c.def("wants_sketch", &NativeRank::WantsSketch)
      .def("sketch",
           [](NativeRank& s, const std::string& layer, FloatArray a) {
             if (a.ndim() != 2) throw py::value_error("sketch: rows × d_in");
             const float* p = HostFloats(a, a.size(), false, "sketch");
             const int64_t rows = a.shape(0);
             absl::Status st;
             {
               // The host GEMM: let the communication thread run meanwhile.
               py::gil_scoped_release release;
               st = s.Sketch(layer, p, rows);
             }
             ThrowIfError(st);
           })
      .def(
          "sketch_ptr",
          [](NativeRank& s, const std::string& layer, uintptr_t ptr,
             int64_t rows, uintptr_t stream) {
            ThrowIfError(s.Sketch(layer, reinterpret_cast<const float*>(ptr),
                                  rows, reinterpret_cast<void*>(stream)));
          },
          py::arg("layer"), py::arg("ptr"), py::arg("rows"),
          py::arg("stream") = 0)
      .def("sketch_stream", [](const NativeRank& s) {
        return reinterpret_cast<uintptr_t>(s.sketch_stream());
      });
}

// One step: whole (step, step_ptr) or bucket by bucket (begin_step,
// reduce_bucket[_ptr], end_step).
void BindSteps(py::class_<NativeRank>& c) {
  c.def("step",
        [](NativeRank& s, FloatArray flat) {
          return Step(s, HostFloats(flat, s.base_plan().bucket_elements(), true,
                                    "step"));
        })
      .def("step_ptr",
           [](NativeRank& s, uintptr_t ptr) {
             return Step(s, reinterpret_cast<float*>(ptr));
           })
      .def("begin_step",
           [](NativeRank& s) {
             py::gil_scoped_release release;
             ThrowIfError(s.BeginStep());
           })
      .def("reduce_bucket",
           [](NativeRank& s, const std::vector<int>& layers,
              const std::vector<int64_t>& offsets, FloatArray data) {
             float* p = HostFloats(data, data.size(), true, "reduce_bucket");
             const BucketGroup g =
                 GroupFromPython(layers, offsets, data.size());
             py::gil_scoped_release release;
             ThrowIfError(s.ReduceBucket(g, p));
           })
      .def("reduce_bucket_ptr",
           [](NativeRank& s, const std::vector<int>& layers,
              const std::vector<int64_t>& offsets, uintptr_t ptr,
              int64_t elements) {
             const BucketGroup g = GroupFromPython(layers, offsets, elements);
             py::gil_scoped_release release;
             ThrowIfError(s.ReduceBucket(g, reinterpret_cast<float*>(ptr)));
           })
      .def("end_step", &EndStep);
}

// libgift's side stream, this rank's endpoint and the daemon attachment.
void BindAttachment(py::class_<NativeRank>& c) {
  c.def("stream",
        [](const NativeRank& s) {
          return reinterpret_cast<uintptr_t>(s.stream());
        })
      .def_property_readonly("endpoint", &NativeRank::endpoint)
      .def("attachment_stats", [](const NativeRank& s) {
        return AttachmentStatsToPython(s.attachment_stats());
      });
}

// Plans, factors and the checkpointed state (state_convert.h).
void BindPlansAndState(py::class_<NativeRank>& c) {
  c.def("current_epoch",
        [](const NativeRank& s) { return s.allreduce().current_epoch(); })
      .def("base_plan",
           [](const NativeRank& s) { return PlanToPython(s.base_plan()); })
      .def("add_plan",
           [](NativeRank& s, int64_t epoch, const std::vector<std::string>& l) {
             ThrowIfError(s.AddPlan(epoch, l));
           })
      .def("put_factor",
           [](NativeRank& s, const std::string& layer, const py::dict& f) {
             ThrowIfError(s.PutFactor(layer, FactorFromPython(f)));
           })
      .def("export_state",
           [](const NativeRank& s) {
             return StateToPython(ValueOrThrow(s.ExportState()),
                                  s.ExportFactors());
           })
      .def("import_state", [](NativeRank& s, const py::dict& d) {
        NamedFactors factors;
        AllReduceState st = ValueOrThrow(StateFromPython(d, &factors));
        ThrowIfError(s.ImportState(st, std::move(factors)));
      });
}

}  // namespace

PYBIND11_MODULE(_gift, m) {
  m.doc() = "libgift bindings for the gift package (one NativeRank per rank)";
  if (absl::Status cpu = gift::kernels::CheckCpuBaseline(); !cpu.ok()) {
    throw py::import_error(std::string("gift: ") + std::string(cpu.message()));
  }
  RegisterGiftError(m);
  m.def("default_agent_socket", &gift::DefaultAgentSocket,
        "giftd's Agent socket without an explicit one: $GIFT_AGENT_SOCKET "
        "when set and not empty, else the daemon's default "
        "(common/agent_socket.h)");
  py::class_<NativeRank> session(m, "NativeRank");
  session
      .def(py::init(&CreateNativeRank), py::arg("options"), py::arg("layers"),
           py::arg("total_elements"))
      .def_property_readonly(
          "mode", [](const NativeRank& s) { return s.options().mode; })
      .def_property_readonly(
          "total_elements",
          [](const NativeRank& s) { return s.base_plan().bucket_elements(); })
      .def_property_readonly("format_fallbacks", &NativeRank::format_fallbacks)
      .def("base_wire", [](const NativeRank& s) {
        // The base plan: each layer's (name, format, bytes).
        const std::vector<LayerWire> w = s.WireOfPlan(s.base_plan());
        py::list out;
        for (size_t i = 0; i < w.size(); ++i) {
          out.append(py::make_tuple(s.base_plan().layers()[i].name, w[i].format,
                                    w[i].bytes));
        }
        return out;
      });
  BindSketches(session);
  BindSteps(session);
  BindAttachment(session);
  BindPlansAndState(session);
}

}  // namespace gift::client::python
