#include "daemon/kv_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gift::daemon {
namespace {

constexpr size_t kMaxValueBytes = 1 << 20;

absl::Status CheckKey(const std::string& job, const std::string& key) {
  if (job.empty()) return absl::InvalidArgumentError("store: empty job_id");
  if (key.empty()) return absl::InvalidArgumentError("store: empty key");
  return absl::OkStatus();
}

}  // namespace

absl::Status KvStore::Set(const std::string& job, const std::string& key,
                          const std::string& value) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("store: value of key '%s' is %d bytes (limit %d)", key,
                        value.size(), kMaxValueBytes));
  }
  absl::MutexLock lock(&mu_);
  values_[{job, key}] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& job,
                                         const std::string& key,
                                         absl::Duration timeout) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  const auto id = std::make_pair(job, key);
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || values_.count(id) > 0;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (auto it = values_.find(id); it != values_.end()) return it->second;
  if (closed_) return absl::CancelledError("store: giftd is shutting down");
  return absl::DeadlineExceededError(
      absl::StrFormat("store key '%s' of job '%s' not set within %s", key, job,
                      absl::FormatDuration(timeout)));
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& job,
                                     const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::string& v = values_[{job, key}];
  int64_t current = 0;
  if (!v.empty() && !absl::SimpleAtoi(v, &current)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("store key '%s' holds a non-integer value", key));
  }
  current += delta;
  v = absl::StrCat(current);
  return current;
}

void KvStore::DropJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.begin(); it != values_.end();) {
    it = it->first.first == job ? values_.erase(it) : std::next(it);
  }
}

void KvStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace gift::daemon
