// Reader and writer for NumPy's .npy format (versions 1.0, 2.0 and 3.0),
// limited to what the tools exchange: little-endian float32 ('<f4') arrays
// in C order.
//
// The header is validated strictly: the magic string, a known version, a
// header length that fits the file, a Python dict literal with exactly the
// keys 'descr', 'fortran_order' and 'shape', a '\n'-terminated header, and a
// data section of exactly prod(shape) * 4 bytes. Only a regular file of
// bounded size is read (ReadNpy). Every failure is an INVALID_ARGUMENT
// (NOT_FOUND for a missing file) whose message names the file and what was
// found; nothing throws.
//
//   ASSIGN_OR_RETURN(NpyArray w, ReadNpy("grad.npy"));
//   if (w.shape.size() != 2) ...;
//   float first = w.data[0];
//   RETURN_IF_ERROR(WriteNpy("copy.npy", w.shape, w.data));
//
// Thread safety: pure functions (file I/O only on the paths given).
#ifndef GIFT_TOOLS_NPY_H_
#define GIFT_TOOLS_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::tools {

// The fields of a .npy header, as written in the file.
struct NpyHeader {
  int major_version = 1;
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  // Offset of the first data byte.
  int64_t data_offset = 0;
};

// A float32 array in C (row-major) order.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;

  // Number of elements (1 for a 0-d array).
  int64_t size() const;
};

// Parses the header of the .npy image `bytes`; `name` is used in messages.
// Accepts any descr string; does not look at the data section.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes,
                                         absl::string_view name);

// Parses a whole .npy image. INVALID_ARGUMENT unless descr is '<f4',
// fortran_order is False and the data section has exactly the right size.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  absl::string_view name);

// Largest .npy file ReadNpy reads by default: 8 GiB (a [T, R, d_out, d_in]
// worker sequence of 4096 x 4096 layers, 4 workers, 32 steps).
inline constexpr int64_t kMaxNpyBytes = int64_t{8} << 30;

// Reads and parses `path`. NOT_FOUND if it cannot be opened;
// INVALID_ARGUMENT, before reading, unless it is a regular file (not a FIFO,
// a device or a directory) of at most `max_bytes`.
absl::StatusOr<NpyArray> ReadNpy(const std::string& path,
                                 int64_t max_bytes = kMaxNpyBytes);

// Serialises a '<f4' C-order array with a header of format `major_version`
// (1, 2 or 3), padded so that the data starts at a multiple of 64 bytes.
// REQUIRES: data.size() == prod(shape).
absl::StatusOr<std::string> SerializeNpy(const std::vector<int64_t>& shape,
                                         const std::vector<float>& data,
                                         int major_version = 1);

// SerializeNpy and write to `path` (INTERNAL if the write fails).
absl::Status WriteNpy(const std::string& path,
                      const std::vector<int64_t>& shape,
                      const std::vector<float>& data, int major_version = 1);

}  // namespace gift::tools

#endif  // GIFT_TOOLS_NPY_H_
