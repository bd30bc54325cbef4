// libFuzzer target: the .npy reader of the tools (tools/npy.h) on any bytes.
// What it checks beyond "no crash, no sanitizer report":
//  * ParseNpyHeader and ParseNpy agree (a whole image parses only if its
//    header does) and an accepted array holds exactly prod(shape) floats;
//  * an accepted array survives SerializeNpy → ParseNpy bit for bit, for
//    every header version;
//  * ReadNpy (the file API, through a memfd) says what ParseNpy says.
// Bad input is an error status, never an exception or an abort.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "tools/npy.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_npy: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gift::tools;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(bytes, "fuzz.npy");
  absl::StatusOr<NpyArray> array = ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) return 0;
  Check(header.ok(), "ParseNpy accepted what ParseNpyHeader refused");
  Check(header->descr == "<f4" && !header->fortran_order,
        "ParseNpy accepted a descr other than '<f4' or Fortran order");
  Check(static_cast<int64_t>(array->data.size()) == array->size(),
        "data size differs from prod(shape)");
  Check(array->shape == header->shape, "shapes of header and array differ");

  for (int version : {1, 2, 3}) {
    absl::StatusOr<std::string> again =
        SerializeNpy(array->shape, array->data, version);
    Check(again.ok(), "SerializeNpy refused an array ParseNpy accepted");
    absl::StatusOr<NpyArray> back = ParseNpy(*again, "again.npy");
    Check(back.ok(), "ParseNpy refused what SerializeNpy wrote");
    Check(back->shape == array->shape, "round trip changed the shape");
    Check(back->data.size() == array->data.size() &&
              (array->data.empty() ||
               std::memcmp(back->data.data(), array->data.data(),
                           array->data.size() * sizeof(float)) == 0),
          "round trip changed the data");
  }

  // The file API on the same bytes (a memfd: no disk, no name clashes).
  const int fd = memfd_create("fuzz_npy", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data, size) == static_cast<ssize_t>(size)) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    absl::StatusOr<NpyArray> read = ReadNpy(path);
    Check(read.ok(), "ReadNpy refused what ParseNpy accepted");
    Check(
        read->shape == array->shape && read->data.size() == array->data.size(),
        "ReadNpy and ParseNpy differ");
  }
  close(fd);
  return 0;
}
