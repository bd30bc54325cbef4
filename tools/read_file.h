// Reads a whole file for the tools' inputs (.npy arrays, token and CA
// files) with a bound: only a regular file of at most `max_bytes` is read.
// What is not a regular file is refused before any read, so a bad path
// cannot hang or exhaust the tool: a FIFO would wait for a writer (it is
// opened non-blocking), /dev/zero would never end, a directory has nothing
// to read (and reports a nonsense size).
//
//   absl::StatusOr<std::string> bytes = ReadRegularFile(path, 1 << 20);
//   if (!bytes.ok()) return Bad(path, bytes.status().message());
//
// Errors carry only the reason, for the caller to prefix with the path:
// NOT_FOUND when the file cannot be opened ("No such file or directory",
// "Permission denied"), INVALID_ARGUMENT for "not a regular file",
// "N bytes, more than the M allowed" (also when it grows past M while it is
// read) and read errors.
//
// Thread safety: a pure function (I/O only on `path`).
#ifndef GIFT_TOOLS_READ_FILE_H_
#define GIFT_TOOLS_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gift::tools {

// REQUIRES: max_bytes >= 0.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            int64_t max_bytes);

}  // namespace gift::tools

#endif  // GIFT_TOOLS_READ_FILE_H_
