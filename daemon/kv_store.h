// The rendezvous key-value store giftd serves to the communicators of its
// local ranks over the Agent service (client/store.h semantics: Set
// replaces, Get waits up to a timeout, Add is an atomic counter). One
// namespace per job id; a job's keys are dropped when its last rank leaves,
// so the next job starts from an empty store.
//
//   KvStore store;
//   store.Set("job", "gloo/0", addr);
//   ASSIGN_OR_RETURN(std::string v, store.Get("job", "gloo/1",
//                                             absl::Seconds(30)));
//
// Thread safety: thread-safe; Get blocks only its caller.
#ifndef GIFT_DAEMON_KV_STORE_H_
#define GIFT_DAEMON_KV_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gift::daemon {

class KvStore {
 public:
  // INVALID_ARGUMENT for an empty job or key, or a value over 1 MiB.
  absl::Status Set(const std::string& job, const std::string& key,
                   const std::string& value);
  // DEADLINE_EXCEEDED "store key 'k' of job 'j' not set within 30s";
  // CANCELLED once Close() was called.
  absl::StatusOr<std::string> Get(const std::string& job,
                                  const std::string& key,
                                  absl::Duration timeout);
  // INVALID_ARGUMENT when the key holds a non-integer.
  absl::StatusOr<int64_t> Add(const std::string& job, const std::string& key,
                              int64_t delta);
  void DropJob(const std::string& job);
  // Wakes every waiting Get (shutdown).
  void Close();

 private:
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::string> values_
      ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_KV_STORE_H_
