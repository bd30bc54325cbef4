// The memory part of an Fp8Backend (fp8_backend.h): buffers of the
// backend's memory kind (host, or device memory on the backend's stream) and
// a zero-fill of any range of it. Every other part of the backend takes and
// returns pointers of this kind.
//
//   std::unique_ptr<Fp8Buffer> buf = backend->memory().NewBuffer();
//   RETURN_IF_ERROR(buf->Resize(n * sizeof(float)));
//   RETURN_IF_ERROR(buf->Zero());
//
// Thread safety: not thread-safe; one user at a time (a buffer with the
// backend that made it).
#ifndef GIFT_CLIENT_FP8_BACKEND_MEMORY_H_
#define GIFT_CLIENT_FP8_BACKEND_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "client/transport.h"

namespace gift::client {

// A resizable buffer in the backend's memory.
class Fp8Buffer {
 public:
  virtual ~Fp8Buffer() = default;
  // Makes the buffer `bytes` long. A changed size leaves the contents
  // unspecified; an unchanged size keeps them.
  virtual absl::Status Resize(size_t bytes) = 0;
  // Sets every byte to zero.
  virtual absl::Status Zero() = 0;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;

  float* floats() { return static_cast<float*>(data()); }
  uint8_t* u8() { return static_cast<uint8_t*>(data()); }
  // Scratch growth: Resize(bytes) unless the buffer is allocated and already
  // holds at least `bytes` (then it keeps its size and contents).
  absl::Status Grow(size_t bytes) {
    if (data() != nullptr && this->bytes() >= bytes) return absl::OkStatus();
    return Resize(bytes);
  }
};

class BackendMemory {
 public:
  virtual ~BackendMemory() = default;

  virtual MemoryKind memory_kind() const = 0;
  virtual std::unique_ptr<Fp8Buffer> NewBuffer() = 0;
  // Sets bytes [p, p + bytes) to zero.
  virtual absl::Status Zero(void* p, size_t bytes) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_MEMORY_H_
