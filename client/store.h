// Rendezvous key-value store shared by the ranks of one job.
//
// Transport backends bootstrap through a Store: Gloo publishes each
// rank's TCP addresses, NCCL publishes the unique id of rank 0. Keys are
// written once and read by everyone, so the interface is small: Set, a Get
// that waits for the key up to a deadline, Wait for several keys, and an
// atomic Add for counters. FileStore keeps the keys as files in a directory
// that every rank can reach (local disk for one host, a shared file system
// across hosts); the daemon-backed store comes with the daemon.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<FileStore> files,
//                    FileStore::Create("/tmp/job42"));
//   PrefixStore store("allreduce/0/", files.get());
//   RETURN_IF_ERROR(store.Set("addr", bytes));
//   ASSIGN_OR_RETURN(std::string peer, store.Get("addr", absl::Seconds(30)));
#ifndef GIFT_CLIENT_STORE_H_
#define GIFT_CLIENT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::client {

// Abstract rendezvous store. Implementations are thread-safe, and safe to use
// from several processes at once when they share the backing medium.
class Store {
 public:
  virtual ~Store() = default;

  // Publishes `value` under `key`, replacing any previous value atomically:
  // a reader sees either the old or the new value, never a mix.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  // DEADLINE_EXCEEDED (naming the key) when it is not set in time. A zero
  // timeout checks once.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  // Waits up to `timeout` until every key in `keys` is set.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;

  // Atomically adds `delta` to the integer counter `key` (absent counts as
  // 0) and returns the new value. INVALID_ARGUMENT when `key` holds a value
  // that is not a decimal integer.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;
};

// Store on a directory: one file per key, written to a temporary name and
// renamed into place (readers never see partial values); Get and Wait poll
// with a deadline; Add serialises through flock(2) on a per-key lock file, so
// it is atomic across threads and processes. Keys may hold any bytes: they
// are escaped into file names.
// Thread-safe; several processes may share one directory.
class FileStore : public Store {
 public:
  // Creates `dir` (and parents) if needed. The directory should be empty at
  // the start of a job: keys left from an earlier job would be read as set.
  static absl::StatusOr<std::unique_ptr<FileStore>> Create(std::string dir);

  const std::string& dir() const { return dir_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  std::string PathOf(absl::string_view key) const;
  // Reads the value file of `key`; NOT_FOUND when it does not exist.
  absl::StatusOr<std::string> TryRead(absl::string_view key) const;
  absl::Status WriteAtomically(absl::string_view key,
                               absl::string_view value) const;

  const std::string dir_;
};

// Prepends a fixed prefix to every key of another store, so that several
// communicators (or jobs) can share one store without clashing.
// Thread-safe if `base` is. `base` must outlive this object.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store* base)
      : prefix_(std::move(prefix)), base_(base) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  std::string Full(absl::string_view key) const;

  const std::string prefix_;
  Store* const base_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_STORE_H_
