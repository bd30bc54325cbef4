#include "shm/prefix_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gift::shm {
namespace {

// A releasing owner unlinks the object before it unlocks it: a new one may
// appear in between, so Acquire retries a few times.
constexpr int kAttempts = 8;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The pid the holder wrote, or "unknown".
std::string Holder(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t pid = 0;
  if (n > 0 &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)),
                       &pid)) {
    return absl::StrCat(pid);
  }
  return "unknown";
}

// Whether `name` still names the object open at fd (not unlinked or
// replaced since it was opened).
bool StillNamed(const std::string& name, int fd) {
  struct stat held, now;
  if (fstat(fd, &held) != 0) return false;
  const int check = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (check < 0) return false;
  const bool same = fstat(check, &now) == 0 && now.st_ino == held.st_ino &&
                    now.st_dev == held.st_dev;
  close(check);
  return same;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixLock>> PrefixLock::Acquire(
    const std::string& prefix) {
  if (prefix.size() < 2 || prefix[0] != '/' ||
      prefix.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm_prefix \"", prefix, "\" must be '/' and a name without '/'"));
  }
  const std::string name = absl::StrCat("/.", prefix.substr(1), ".lock");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int fd =
        shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = Holder(fd);
      close(fd);
      if (err != EWOULDBLOCK) {
        errno = err;
        return Errno(absl::StrCat("flock ", name));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "shm_prefix ", prefix, " is in use by another giftd (pid ", holder,
          "; lock /dev/shm", name,
          "): stop it first, or give this one another shm_prefix"));
    }
    if (!StillNamed(name, fd)) {  // its owner released it meanwhile
      close(fd);
      continue;
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) !=
                                     static_cast<ssize_t>(pid.size())) {
      const absl::Status s = Errno(absl::StrCat("writing ", name));
      close(fd);
      return s;
    }
    return std::unique_ptr<PrefixLock>(new PrefixLock(fd, name));
  }
  return absl::InternalError(
      absl::StrCat("could not take ", name, " in ", kAttempts, " attempts"));
}

PrefixLock::~PrefixLock() {
  // Unlinked while still held: whoever opens the name next gets a new
  // object (and Acquire's check catches one who opened this one).
  shm_unlink(name_.c_str());
  close(fd_);
}

}  // namespace gift::shm
