#include "client/gloo_store_adapter.h"

#include <gloo/common/error.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gift::client {
namespace {

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) {
    throw gloo::IoException(
        absl::StrCat("rendezvous store: ", status.ToString()));
  }
}

}  // namespace

void GlooStoreAdapter::set(const std::string& key,
                           const std::vector<char>& data) {
  ThrowIfError(store_->Set(key, absl::string_view(data.data(), data.size())));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_->Get(key, timeout_);
  ThrowIfError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  ThrowIfError(store_->Wait(keys, timeout_));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes kNoTimeout (zero) for "wait without limit"; keep ours.
  const absl::Duration t =
      timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_;
  ThrowIfError(store_->Wait(keys, t));
}

}  // namespace gift::client
