// One giftd per shared-memory name prefix. A giftd removes the objects a
// crashed predecessor left under its prefix when it starts, so a second
// giftd with the same prefix would remove the live one's memory from under
// its ranks. PrefixLock makes the prefix exclusive first: an flock(2) on a
// hidden POSIX shm object named after the prefix ("/.<prefix>.lock", which
// no listing of the prefix's objects shows), holding the owner's pid for
// the error a second giftd reports. The lock goes with the process, so a
// crashed giftd never blocks its successor.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<PrefixLock> lock,
//                    PrefixLock::Acquire(config.shm_prefix));
//   ... remove stale objects, create sessions ...
//   lock.reset();  // unlinks the lock object, then releases it
//
// Thread safety: Acquire is thread-safe; a lock is owned by one thread.
#ifndef GIFT_SHM_PREFIX_LOCK_H_
#define GIFT_SHM_PREFIX_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gift::shm {

class PrefixLock {
 public:
  // FAILED_PRECONDITION "shm_prefix P is in use by another giftd (pid N)"
  // while another holder (another process, or another lock of this one)
  // has it; INVALID_ARGUMENT for a prefix that is no POSIX shm name;
  // INTERNAL for an I/O error.
  static absl::StatusOr<std::unique_ptr<PrefixLock>> Acquire(
      const std::string& prefix);
  ~PrefixLock();

  PrefixLock(const PrefixLock&) = delete;
  PrefixLock& operator=(const PrefixLock&) = delete;

  // The lock object's POSIX name.
  const std::string& name() const { return name_; }

 private:
  PrefixLock(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

  int fd_;
  std::string name_;
};

}  // namespace gift::shm

#endif  // GIFT_SHM_PREFIX_LOCK_H_
