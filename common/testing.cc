#include "common/testing.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::testing {

absl::StatusOr<std::string> MakeTempDir(absl::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                  "/", prefix, "_XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  return tmpl;
}

TempDir::TempDir(absl::string_view prefix) {
  absl::StatusOr<std::string> dir = MakeTempDir(prefix);
  if (dir.ok()) path_ = *std::move(dir);
}

TempDir::~TempDir() { Remove(); }

TempDir::TempDir(TempDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

std::string TempDir::Sub(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

std::string TempDir::Release() { return std::exchange(path_, std::string()); }

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
               absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace gift::testing
