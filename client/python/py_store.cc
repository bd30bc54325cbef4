#include "client/python/py_store.h"

#include <pybind11/stl.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gift::client::python {
namespace {

absl::Status FromPython(const py::error_already_set& e, absl::string_view what,
                        absl::string_view key) {
  const std::string msg = e.what();
  const bool timeout = absl::StrContains(msg, "imeout") ||
                       absl::StrContains(msg, "imed out") ||
                       absl::StrContains(msg, "Deadline");
  const std::string text =
      absl::StrCat("torch.distributed store ", what, " '", key, "': ", msg);
  return timeout ? absl::DeadlineExceededError(text)
                 : absl::UnavailableError(text);
}

py::object Timedelta(absl::Duration d) {
  return py::module_::import("datetime")
      .attr("timedelta")(py::arg("seconds") = absl::ToDoubleSeconds(d));
}

}  // namespace

PyStore::~PyStore() {
  py::gil_scoped_acquire gil;
  store_ = py::object();
}

absl::Status PyStore::Set(absl::string_view key, absl::string_view value) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("set")(std::string(key), py::bytes(value.data(), value.size()));
  } catch (const py::error_already_set& e) {
    return FromPython(e, "set", key);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PyStore::Get(absl::string_view key,
                                         absl::Duration timeout) {
  py::gil_scoped_acquire gil;
  const std::vector<std::string> keys = {std::string(key)};
  try {
    if (timeout <= absl::ZeroDuration()) {
      if (!store_.attr("check")(keys).cast<bool>()) {
        return absl::DeadlineExceededError(
            absl::StrCat("store key '", key, "' is not set"));
      }
    } else {
      store_.attr("wait")(keys, Timedelta(timeout));
    }
    return store_.attr("get")(std::string(key)).cast<std::string>();
  } catch (const py::error_already_set& e) {
    return FromPython(e, "get", key);
  }
}

absl::Status PyStore::Wait(const std::vector<std::string>& keys,
                           absl::Duration timeout) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("wait")(keys, Timedelta(timeout));
  } catch (const py::error_already_set& e) {
    return FromPython(e, "wait", keys.empty() ? "" : keys[0]);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PyStore::Add(absl::string_view key, int64_t delta) {
  py::gil_scoped_acquire gil;
  try {
    return store_.attr("add")(std::string(key), delta).cast<int64_t>();
  } catch (const py::error_already_set& e) {
    return FromPython(e, "add", key);
  }
}

}  // namespace gift::client::python
