// The C ABI of libgift (include/gift/c_api.h): status names, the calling
// thread's last error message, the version; and the guard's bookkeeping
// (c_api_internal.h). Every entry point of the C ABI checks its arguments,
// catches every exception (none crosses into C), and records the calling
// thread's last error message.
#include <string>

#include "client/api/c_api_internal.h"
#include "gift/c_api.h"
#include "gift/status.h"

#ifndef GIFT_VERSION_STRING
#error "GIFT_VERSION_STRING must be defined by the build"
#endif

namespace gift::capi {

std::string& LastError() noexcept {
  thread_local std::string last_error;
  return last_error;
}

gift_status_t Fail(const char* fn, StatusCode code, const char* what,
                   const char* detail) noexcept {
  std::string& last_error = LastError();
  last_error.clear();
  try {
    last_error.append(fn).append(": ").append(what).append(detail);
  } catch (...) {
    last_error.clear();
  }
  return static_cast<gift_status_t>(code);
}

gift_status_t Finish(const char* fn, const Status& s) noexcept {
  if (s.ok()) {
    LastError().clear();
    return GIFT_OK;
  }
  return Fail(fn, s.code(), s.message().c_str());
}

}  // namespace gift::capi

// The definitions below have C linkage: gift/c_api.h declares them inside
// extern "C".

const char* gift_status_name(gift_status_t code) {
  const int c = static_cast<int>(code);
  if (c < 0 || c > 16) return "UNKNOWN";
  return gift::StatusCodeName(static_cast<gift::StatusCode>(c));
}

const char* gift_last_error_message(void) {
  return gift::capi::LastError().c_str();
}

const char* gift_version(void) { return GIFT_VERSION_STRING; }
