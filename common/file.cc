#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift {
namespace {

absl::Status TooLarge(int64_t size, int64_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(size, " bytes, more than the ", max_bytes, " allowed"));
}

// Reads what `fd` holds, `expected` bytes as fstat saw it, never more than
// max_bytes.
absl::StatusOr<std::string> ReadAll(int fd, int64_t expected,
                                    int64_t max_bytes) {
  std::string bytes;
  bytes.reserve(static_cast<size_t>(expected));
  std::string buf(1 << 16, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InvalidArgumentError(std::strerror(errno));
    if (n == 0) return bytes;
    const int64_t total = static_cast<int64_t>(bytes.size()) + n;
    if (total > max_bytes) return TooLarge(total, max_bytes);  // it grew
    bytes.append(buf.data(), static_cast<size_t>(n));
  }
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(std::strerror(errno));
  struct stat st;
  absl::StatusOr<std::string> bytes;
  if (::fstat(fd, &st) != 0) {
    bytes = absl::InvalidArgumentError(std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    bytes = absl::InvalidArgumentError("not a regular file");
  } else if (st.st_size > max_bytes) {
    bytes = TooLarge(st.st_size, max_bytes);
  } else {
    bytes = ReadAll(fd, st.st_size, max_bytes);
  }
  ::close(fd);
  return bytes;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes,
                                     absl::string_view what) {
  absl::StatusOr<std::string> bytes = ReadRegularFile(path, max_bytes);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read ", what, " '", path, "': ", bytes.status().message()));
  }
  return bytes;
}

}  // namespace gift
