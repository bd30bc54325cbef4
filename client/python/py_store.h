// A libgift Store over a Python torch.distributed store (c10d: TCPStore,
// FileStore, PrefixStore ...): the rendezvous of libgift's communicator
// through the job's own store — the one torchrun already runs — so ranks
// on different hosts need no shared folder.
//
//   auto store = std::make_shared<PyStore>(py_object);  // GIL held
//   options.store = store;
//
// Mapping: Set → store.set(key, bytes); Get(key, t) → store.wait([key], t)
// then store.get(key) (t == 0: store.check([key])); Wait → store.wait;
// Add → store.add. A Python exception becomes DEADLINE_EXCEEDED when the
// store timed out, else UNAVAILABLE, with its message.
// Thread safety: every call takes the GIL; usable from any thread.
#ifndef GIFT_CLIENT_PYTHON_PY_STORE_H_
#define GIFT_CLIENT_PYTHON_PY_STORE_H_

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "client/store.h"

namespace gift::client::python {

namespace py = pybind11;

class PyStore : public Store {
 public:
  // REQUIRES: the GIL is held.
  explicit PyStore(py::object store) : store_(std::move(store)) {}
  ~PyStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  py::object store_;
};

}  // namespace gift::client::python

#endif  // GIFT_CLIENT_PYTHON_PY_STORE_H_
