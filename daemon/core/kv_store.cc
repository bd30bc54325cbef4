#include "daemon/core/kv_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log.h"

namespace gift::daemon {
namespace {

absl::Status CheckKey(const std::string& job, const std::string& key) {
  if (job.empty()) return absl::InvalidArgumentError("store: empty job_id");
  if (key.empty()) return absl::InvalidArgumentError("store: empty key");
  if (key.size() > kMaxStoreKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("store: key '%s' is longer than %d bytes", Clip(key),
                        kMaxStoreKeyBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KvStore::MakeRoomFor(const std::string& job) {
  if (jobs_.count(job) > 0 ||
      jobs_.size() < static_cast<size_t>(limits_.max_jobs)) {
    return absl::OkStatus();
  }
  auto oldest = jobs_.end();
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (it->first == kept_) continue;
    if (oldest == jobs_.end() ||
        it->second.last_use < oldest->second.last_use) {
      oldest = it;
    }
  }
  if (oldest == jobs_.end()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "store: %d jobs hold keys (max_store_jobs) and none may give way",
        jobs_.size()));
  }
  LOG_INFO("store: keys of job '%s' dropped for job '%s' (max_store_jobs %d)",
           Clip(oldest->first), Clip(job), limits_.max_jobs);
  jobs_.erase(oldest);
  return absl::OkStatus();
}

absl::Status KvStore::Put(const std::string& job, const std::string& key,
                          const std::string& value) {
  if (static_cast<int64_t>(value.size()) > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "store: value of key '%s' is %d bytes; max_store_value_bytes is %d",
        Clip(key), value.size(), limits_.max_value_bytes));
  }
  // Sizes below 2^32 each: the sums cannot overflow.
  auto found = jobs_.find(job);
  int64_t bytes = found == jobs_.end() ? 0 : found->second.bytes;
  if (found != jobs_.end()) {
    auto old = found->second.values.find(key);
    if (old != found->second.values.end()) {
      bytes -= static_cast<int64_t>(key.size() + old->second.size());
    }
  }
  bytes += static_cast<int64_t>(key.size() + value.size());
  if (bytes > limits_.max_job_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "store: job '%s' would hold %d bytes of keys and values; "
        "max_store_job_bytes is %d",
        Clip(job), bytes, limits_.max_job_bytes));
  }
  if (absl::Status s = MakeRoomFor(job); !s.ok()) return s;
  Job& j = jobs_[job];
  j.values[key] = value;
  j.bytes = bytes;
  j.last_use = ++use_clock_;
  return absl::OkStatus();
}

absl::Status KvStore::Set(const std::string& job, const std::string& key,
                          const std::string& value) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  return Put(job, key, value);
}

absl::StatusOr<std::string> KvStore::Get(const std::string& job,
                                         const std::string& key,
                                         absl::Duration timeout) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto find = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> const std::string* {
    auto j = jobs_.find(job);
    if (j == jobs_.end()) return nullptr;
    auto v = j->second.values.find(key);
    return v == j->second.values.end() ? nullptr : &v->second;
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || find() != nullptr;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (const std::string* v = find(); v != nullptr) return *v;
  if (closed_) return absl::CancelledError("store: giftd is shutting down");
  return absl::DeadlineExceededError(
      absl::StrFormat("store key '%s' of job '%s' not set within %s", Clip(key),
                      Clip(job), absl::FormatDuration(timeout)));
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& job,
                                     const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(job, key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  int64_t current = 0;
  auto j = jobs_.find(job);
  if (j != jobs_.end()) {
    auto v = j->second.values.find(key);
    if (v != j->second.values.end() && !v->second.empty() &&
        !absl::SimpleAtoi(v->second, &current)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "store key '%s' holds a non-integer value", Clip(key)));
    }
  }
  int64_t sum;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrFormat("store key '%s': %d + %d would overflow int64",
                        Clip(key), current, delta));
  }
  if (absl::Status s = Put(job, key, absl::StrCat(sum)); !s.ok()) return s;
  return sum;
}

void KvStore::DropJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job);
}

void KvStore::KeepJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  kept_ = job;
}

void KvStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace gift::daemon
