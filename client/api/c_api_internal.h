// The handles of libgift's C ABI (include/gift/c_api.h) and the helpers
// every entry point shares: the guard that turns a gift::Status (or an
// exception) into a gift_status_t and the calling thread's last error
// message, and the checks of C arguments. Not installed; only the
// client/api/c_api_*.cc files include it.
//
//   gift_status_t gift_thing_set_x(gift_thing_t* thing, const char* x) {
//     return gift::capi::Guard(__func__, [&] {
//       if (thing == nullptr) return gift::capi::Null("thing");
//       return gift::capi::CopyString(x, "x", &thing->x);
//     });
//   }
//
// Thread safety: the helpers keep no shared state; the last error message is
// per thread. A handle is as thread-safe as the C++ object it wraps.
#ifndef GIFT_CLIENT_API_C_API_INTERNAL_H_
#define GIFT_CLIENT_API_C_API_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gift/allreduce.h"
#include "gift/bucket_plan.h"
#include "gift/c_api.h"
#include "gift/communicator.h"
#include "gift/daemon_attachment.h"
#include "gift/status.h"

struct gift_communicator_options_t {
  gift::CommunicatorOptions o;
};
struct gift_communicator_t {
  std::shared_ptr<gift::Communicator> c;
};
struct gift_plan_builder_t {
  std::vector<gift::LayerSpec> layers;
};
struct gift_plan_t {
  gift::BucketPlan plan;
};
struct gift_allreduce_options_t {
  gift::AllReduceOptions o;
};
struct gift_allreduce_t {
  std::unique_ptr<gift::QuantizedAllReduce> ar;
  // The last completed step (gift_allreduce_last_step / _last_layer).
  bool has_last = false;
  gift::StepStats last;
};
struct gift_attachment_options_t {
  gift::AttachmentOptions o;
};
struct gift_attachment_t {
  std::shared_ptr<gift::DaemonAttachment> a;
};

namespace gift::capi {

// The calling thread's last error message (gift_last_error_message).
std::string& LastError() noexcept;

// Records "<fn>: <what><detail>" as this thread's message and returns
// `code`. Never throws: without memory for the message it stays empty.
gift_status_t Fail(const char* fn, StatusCode code, const char* what,
                   const char* detail = "") noexcept;

// GIFT_OK (clearing the message) or Fail(fn, s.code(), s.message()).
gift_status_t Finish(const char* fn, const Status& s) noexcept;

// Runs `body` (returning a gift::Status) as the C function `fn`; no
// exception leaves it.
template <typename Body>
gift_status_t Guard(const char* fn, Body&& body) noexcept {
  try {
    return Finish(fn, body());
  } catch (const std::bad_alloc&) {
    return Fail(fn, StatusCode::kResourceExhausted, "out of memory");
  } catch (const std::exception& e) {
    return Fail(fn, StatusCode::kInternal, "unexpected exception: ", e.what());
  } catch (...) {
    return Fail(fn, StatusCode::kInternal, "unexpected exception");
  }
}

inline Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

inline Status Null(const char* what) {
  return Invalid(std::string(what) + " is NULL");
}

// A copy of a C string argument; INVALID_ARGUMENT for NULL.
inline Status CopyString(const char* s, const char* what, std::string* out) {
  if (s == nullptr) return Null(what);
  *out = s;
  return Status();
}

// A new default-constructed handle, or NULL without memory.
template <typename T>
T* NewOrNull() noexcept {
  try {
    return new T();
  } catch (...) {
    return nullptr;
  }
}

// Fills the fields of `info` that its struct_size covers from `full`.
template <typename T>
Status FillSized(T* info, T full) {
  if (info == nullptr) return Null("info");
  const size_t size = info->struct_size;
  if (size < sizeof(size_t)) {
    return Invalid("info->struct_size must be set to sizeof the struct");
  }
  full.struct_size = size;
  std::memcpy(static_cast<void*>(info), &full, std::min(size, sizeof(T)));
  return Status();
}

}  // namespace gift::capi

#endif  // GIFT_CLIENT_API_C_API_INTERNAL_H_
