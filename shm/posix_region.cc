#include "shm/posix_region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::shm::internal {
namespace {

absl::Status Errno(const std::string& what, int err) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC || err == ENOMEM || err == EMFILE || err == ENFILE) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::InternalError(msg);
}

class PosixRegion : public Region {
 public:
  PosixRegion(RegionDesc desc, void* data, bool owner)
      : desc_(desc), data_(data), owner_(owner) {}
  ~PosixRegion() override {
    munmap(data_, desc_.bytes);
    if (owner_) shm_unlink(desc_.name);
  }
  PosixRegion(const PosixRegion&) = delete;
  PosixRegion& operator=(const PosixRegion&) = delete;

  void* data() const override { return data_; }
  uint64_t bytes() const override { return desc_.bytes; }
  bool on_device() const override { return false; }
  const RegionDesc& desc() const override { return desc_; }

  absl::Status Write(uint64_t offset, const void* src,
                     uint64_t bytes) override {
    if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
      return s;
    }
    if (bytes > 0) std::memcpy(static_cast<char*>(data_) + offset, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Read(uint64_t offset, void* dst, uint64_t bytes) const override {
    if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
      return s;
    }
    if (bytes > 0) std::memcpy(dst, static_cast<char*>(data_) + offset, bytes);
    return absl::OkStatus();
  }
  absl::Status Zero(uint64_t offset, uint64_t bytes) override {
    if (absl::Status s = CheckRange(offset, bytes, desc_.bytes); !s.ok()) {
      return s;
    }
    if (bytes > 0) std::memset(static_cast<char*>(data_) + offset, 0, bytes);
    return absl::OkStatus();
  }
  // Host memory: a store is visible to the other process once made; the
  // protocol's atomics provide the ordering.
  absl::Status SignalWrites(void*) override { return absl::OkStatus(); }
  absl::Status WaitWrites(void*) override { return absl::OkStatus(); }

 private:
  const RegionDesc desc_;
  void* const data_;
  const bool owner_;
};

// Maps `fd` (closed here either way).
absl::StatusOr<void*> MapAndClose(int fd, uint64_t bytes,
                                  const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return Errno(absl::StrCat("mmap ", name), err);
  return p;
}

}  // namespace

absl::Status ValidatePosixName(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos ||
      name.find('\0') != std::string::npos || name.size() >= kNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad shared memory name \"", name, "\": want '/' followed by 1 to ",
        kNameBytes - 2, " characters without '/'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DescName(const RegionDesc& desc) {
  const void* nul = std::memchr(desc.name, '\0', kNameBytes);
  if (nul == nullptr) {
    return absl::InvalidArgumentError("region name is not NUL-terminated");
  }
  return std::string(desc.name, static_cast<const char*>(nul) - desc.name);
}

absl::Status CheckRange(uint64_t offset, uint64_t bytes, uint64_t size) {
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes,
                                              ") outside a region of ", size,
                                              " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Region>> CreatePosixRegion(
    const std::string& name, uint64_t bytes) {
  if (absl::Status s = ValidatePosixName(name); !s.ok()) return s;
  if (bytes == 0) {
    return absl::InvalidArgumentError("a region needs at least one byte");
  }
  // A stale object (e.g. from a crashed daemon) is replaced, never reused:
  // O_EXCL then guarantees the mode and size below are ours.
  shm_unlink(name.c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", name), errno);
  // The umask cannot widen 0600, but fchmod makes the mode explicit.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, off_t(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Errno(absl::StrCat("sizing ", name), err);
  }
  absl::StatusOr<void*> p = MapAndClose(fd, bytes, name);
  if (!p.ok()) {
    shm_unlink(name.c_str());
    return p.status();
  }
  RegionDesc desc{};
  desc.kind = static_cast<uint32_t>(RegionKind::kPosix);
  desc.bytes = bytes;
  std::memcpy(desc.name, name.data(), name.size());
  return std::unique_ptr<Region>(new PosixRegion(desc, *p, /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<Region>> OpenPosixRegion(
    const RegionDesc& desc) {
  absl::StatusOr<std::string> name = DescName(desc);
  if (!name.ok()) return name.status();
  if (absl::Status s = ValidatePosixName(*name); !s.ok()) return s;
  int fd = shm_open(name->c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", *name), errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errno(absl::StrCat("fstat ", *name), err);
  }
  if (uint64_t(st.st_size) != desc.bytes || desc.bytes == 0) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory ", *name, " has ", st.st_size,
                     " bytes, the descriptor says ", desc.bytes));
  }
  absl::StatusOr<void*> p = MapAndClose(fd, desc.bytes, *name);
  if (!p.ok()) return p.status();
  return std::unique_ptr<Region>(new PosixRegion(desc, *p, /*owner=*/false));
}

}  // namespace gift::shm::internal
