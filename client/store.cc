#include "client/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// File names stay well under NAME_MAX (255) with the "k_" prefix.
constexpr size_t kMaxEscapedKey = 240;
constexpr absl::Duration kMinPoll = absl::Milliseconds(1);
constexpr absl::Duration kMaxPoll = absl::Milliseconds(20);

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(e)));
}

// Keeps [A-Za-z0-9_-] and writes every other byte as %XX, so any key maps to
// a distinct, portable file name.
std::string EscapeKey(absl::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

absl::Status CheckKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("store key is empty");
  if (EscapeKey(key).size() > kMaxEscapedKey) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key too long: ", key.substr(0, 64), "..."));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write", path);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Polls `ready` until it returns true or `timeout` passes; backs off from 1
// to 20 ms so that a waiting rank costs little CPU.
template <typename Ready>
absl::Status PollUntil(absl::Duration timeout, Ready ready,
                       absl::string_view what) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = kMinPoll;
  while (true) {
    ASSIGN_OR_RETURN(bool done, ready());
    if (done) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("store: timed out after ", absl::FormatDuration(timeout),
                       " waiting for ", what));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPoll);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Create(std::string dir) {
  if (dir.empty()) return absl::InvalidArgumentError("FileStore: empty dir");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InternalError(absl::StrCat(
        "FileStore: cannot create directory ", dir, ": ", ec.message()));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(dir)));
}

std::string FileStore::PathOf(absl::string_view key) const {
  return absl::StrCat(dir_, "/k_", EscapeKey(key));
}

absl::StatusOr<std::string> FileStore::TryRead(absl::string_view key) const {
  const std::string path = PathOf(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    return absl::NotFoundError(absl::StrCat("store key not set: ", key));
  }
  if (fd < 0) return ErrnoError("open", path);
  std::string value;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoError("read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    value.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return value;
}

absl::Status FileStore::WriteAtomically(absl::string_view key,
                                        absl::string_view value) const {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(dir_, "/.tmp-", ::getpid(), "-",
                                       counter.fetch_add(1), "-", ::gettid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  absl::Status s = WriteAll(fd, value, tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close", tmp);
  const std::string path = PathOf(key);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError("rename to", path);
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  RETURN_IF_ERROR(CheckKey(key));
  return WriteAtomically(key, value);
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  RETURN_IF_ERROR(CheckKey(key));
  std::string value;
  RETURN_IF_ERROR(PollUntil(
      timeout,
      [&]() -> absl::StatusOr<bool> {
        absl::StatusOr<std::string> v = TryRead(key);
        if (absl::IsNotFound(v.status())) return false;
        if (!v.ok()) return v.status();
        value = *std::move(v);
        return true;
      },
      absl::StrCat("key ", key)));
  return value;
}

absl::Status FileStore::Wait(const std::vector<std::string>& keys,
                             absl::Duration timeout) {
  for (const std::string& key : keys) RETURN_IF_ERROR(CheckKey(key));
  size_t next = 0;  // keys before `next` are known to be set
  absl::Status s = PollUntil(
      timeout,
      [&]() -> absl::StatusOr<bool> {
        for (; next < keys.size(); ++next) {
          if (::access(PathOf(keys[next]).c_str(), F_OK) != 0) return false;
        }
        return true;
      },
      absl::StrCat(keys.size(), " key(s)"));
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(
        absl::StrCat(s.message(), "; first missing: ", keys[next]));
  }
  return s;
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  RETURN_IF_ERROR(CheckKey(key));
  const std::string lock_path = absl::StrCat(dir_, "/l_", EscapeKey(key));
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open", lock_path);
  // flock locks belong to the open file description, so this serialises
  // threads of one process as well as processes.
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      absl::Status s = ErrnoError("flock", lock_path);
      ::close(fd);
      return s;
    }
  }
  int64_t value = 0;
  absl::StatusOr<std::string> old = TryRead(key);
  absl::Status s = old.status();
  if (absl::IsNotFound(s)) {
    s = absl::OkStatus();
  } else if (s.ok() && !absl::SimpleAtoi(*old, &value)) {
    s = absl::InvalidArgumentError(
        absl::StrCat("store key ", key, " does not hold an integer"));
  }
  if (s.ok()) {
    value += delta;
    s = WriteAtomically(key, absl::StrCat(value));
  }
  ::close(fd);  // releases the lock
  if (!s.ok()) return s;
  return value;
}

std::string PrefixStore::Full(absl::string_view key) const {
  return absl::StrCat(prefix_, key);
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Full(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key,
                                             absl::Duration timeout) {
  return base_->Get(Full(key), timeout);
}

absl::Status PrefixStore::Wait(const std::vector<std::string>& keys,
                               absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(Full(k));
  return base_->Wait(full, timeout);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Full(key), delta);
}

}  // namespace gift::client
