// The one way giftd, libgift and the tools read a whole small file: tokens,
// TLS certificates and keys, CA bundles, the config file, .npy data. Only a
// regular file of at most a caller-given size is read; anything else is
// refused before the first read, so a wrong path can neither hang the
// process nor feed it without end: a FIFO would wait for a writer (it is
// opened O_NONBLOCK, then refused by fstat), /dev/zero would never end, a
// directory has nothing to read. The descriptor is O_CLOEXEC, so no child
// process inherits it.
//
//   absl::StatusOr<std::string> token =
//       ReadFile(path, kMaxTokenFileBytes, "control_token_file");
//   // error: "cannot read control_token_file '/x': not a regular file"
//
//   absl::StatusOr<std::string> bytes = ReadRegularFile(path, 1 << 20);
//   // error: the reason only, for a caller that words its own message
//
// Thread safety: pure functions (I/O only on `path`), safe from any thread.
#ifndef GIFT_COMMON_FILE_H_
#define GIFT_COMMON_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift {

// Bounds shared by the readers of the same kind of file. A token is a line;
// a PEM certificate chain, key or CA bundle of a few hundred certificates
// fits in 4 MiB.
inline constexpr int64_t kMaxTokenFileBytes = 64 << 10;
inline constexpr int64_t kMaxPemFileBytes = 4 << 20;

// The bytes of the regular file at `path`, at most `max_bytes` of them.
// Errors carry the reason only, for the caller to prefix with the path:
// NOT_FOUND when the file cannot be opened ("No such file or directory",
// "Permission denied"); INVALID_ARGUMENT for "not a regular file",
// "N bytes, more than the M allowed" (also when the file grows past M while
// it is read) and read errors.
// REQUIRES: max_bytes >= 0.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            int64_t max_bytes);

// ReadRegularFile with errors that name the file: INVALID_ARGUMENT
// "cannot read <what> '<path>': <reason>", whatever the reason. `what` says
// which file it is to the operator: "config file", "job_token_file".
// REQUIRES: max_bytes >= 0.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes,
                                     absl::string_view what);

}  // namespace gift

#endif  // GIFT_COMMON_FILE_H_
