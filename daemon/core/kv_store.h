// The rendezvous key-value store giftd serves to the communicators of its
// local ranks over the Agent service (client/store.h semantics: Set
// replaces, Get waits up to a timeout, Add is an atomic counter). One
// namespace per job id; a job's keys are dropped when its last rank leaves,
// so the next job starts from an empty store.
//
// Bounded (StoreLimits, from giftd's max_store_* options): a value, a key,
// the bytes of one job's keys and values, and the number of jobs with keys
// — a new job then replaces the least recently used one, never the job
// KeepJob names (the one the daemon serves).
//
//   KvStore store(limits);
//   store.Set("job", "gloo/0", addr);
//   ASSIGN_OR_RETURN(std::string v, store.Get("job", "gloo/1",
//                                             absl::Seconds(30)));
//
// Thread safety: thread-safe; Get blocks only its caller.
#ifndef GIFT_DAEMON_CORE_KV_STORE_H_
#define GIFT_DAEMON_CORE_KV_STORE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/limits.h"

namespace gift::daemon {

struct StoreLimits {
  int64_t max_value_bytes = Limits{}.max_store_value_bytes;
  int64_t max_job_bytes = Limits{}.max_store_job_bytes;
  int max_jobs = Limits{}.max_store_jobs;
};

class KvStore {
 public:
  explicit KvStore(StoreLimits limits = {}) : limits_(limits) {}

  // INVALID_ARGUMENT for an empty job or key, a key over kMaxStoreKeyBytes
  // or a value over max_value_bytes; RESOURCE_EXHAUSTED when the job's keys
  // and values would pass max_job_bytes, or max_jobs other jobs hold keys
  // and none of them may give way. Nothing changes on an error.
  absl::Status Set(const std::string& job, const std::string& key,
                   const std::string& value);
  // DEADLINE_EXCEEDED "store key 'k' of job 'j' not set within 30s";
  // CANCELLED once Close() was called.
  absl::StatusOr<std::string> Get(const std::string& job,
                                  const std::string& key,
                                  absl::Duration timeout);
  // INVALID_ARGUMENT when the key holds a non-integer; OUT_OF_RANGE when
  // the sum overflows int64 (the value stays); Set's limits otherwise.
  absl::StatusOr<int64_t> Add(const std::string& job, const std::string& key,
                              int64_t delta);
  void DropJob(const std::string& job);
  // The job whose keys never give way to a new job; "" for none.
  void KeepJob(const std::string& job);
  // Wakes every waiting Get (shutdown).
  void Close();

 private:
  struct Job {
    std::map<std::string, std::string> values;
    int64_t bytes = 0;      // Σ key + value sizes
    uint64_t last_use = 0;  // use_clock_ at the last Set or Add
  };
  // Stores value under (job, key) within the limits.
  absl::Status Put(const std::string& job, const std::string& key,
                   const std::string& value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Room for a new job: drops the least recently used other one.
  absl::Status MakeRoomFor(const std::string& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StoreLimits limits_;
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::string kept_ ABSL_GUARDED_BY(mu_);
  uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_KV_STORE_H_
