// The GPU runtime seen by the kernels: device discovery and an execution
// context (CUDA stream + cuBLAS + cuSOLVER handles) that every GPU kernel
// launcher takes. No CUDA type appears here, so CPU-only code and tests can
// include it; in a build without CUDA, DeviceCount() is 0 and Context::Create
// returns UNAVAILABLE.
//
//   if (!gift::gpu::Available()) GTEST_SKIP() << "no GPU";
//   ASSERT_OK_AND_ASSIGN(auto ctx, gift::gpu::Context::Create());
//   gift::gpu::DeviceBuffer<float> d(n);
//   ASSERT_OK(d.Upload(host.data(), n));
//   ASSERT_OK(gift::kernels::cuda::Quantize(*ctx, d.get(), ...));
//   ASSERT_OK(ctx->Synchronize());
#ifndef GIFT_KERNELS_GPU_H_
#define GIFT_KERNELS_GPU_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::gpu {

// True when this binary was built with CUDA.
bool BuiltWithCuda();

// Number of usable CUDA devices; 0 without CUDA, without a driver or without
// a device (never an error).
int DeviceCount();
inline bool Available() { return DeviceCount() > 0; }

// An execution context on one device: a non-blocking stream and the cuBLAS
// and cuSOLVER handles bound to it. Thread safety: a Context is used by one
// thread at a time (like the stream it owns).
class Context {
 public:
  // REQUIRES: 0 <= device < DeviceCount().
  static absl::StatusOr<std::unique_ptr<Context>> Create(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  // cudaStream_t, cublasHandle_t and cusolverDnHandle_t, type-erased.
  void* stream() const { return stream_; }
  void* cublas() const { return cublas_; }
  void* cusolver() const { return cusolver_; }

  // Waits for all work queued on the stream; returns the first error.
  absl::Status Synchronize();

 private:
  Context() = default;
  int device_ = 0;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  void* cusolver_ = nullptr;
};

// Untyped device allocation (cudaMalloc) with copies that are synchronous
// with the host and with every stream of the device; for tests,
// benchmarks and setup code, not for the per-step hot path.
class RawDeviceBuffer {
 public:
  RawDeviceBuffer() = default;
  ~RawDeviceBuffer();
  RawDeviceBuffer(RawDeviceBuffer&& o) noexcept;
  RawDeviceBuffer& operator=(RawDeviceBuffer&& o) noexcept;

  absl::Status Allocate(size_t bytes);
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;
  absl::Status Fill(int byte_value);  // cudaMemset
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  absl::Status Allocate(size_t n) {
    n_ = n;
    return raw_.Allocate(n * sizeof(T));
  }
  absl::Status Upload(const T* host, size_t n) {
    return raw_.Upload(host, n * sizeof(T));
  }
  absl::Status Download(T* host, size_t n) const {
    return raw_.Download(host, n * sizeof(T));
  }
  absl::Status Fill(int byte_value) { return raw_.Fill(byte_value); }
  T* get() const { return static_cast<T*>(raw_.get()); }
  size_t size() const { return n_; }

 private:
  RawDeviceBuffer raw_;
  size_t n_ = 0;
};

}  // namespace gift::gpu

#endif  // GIFT_KERNELS_GPU_H_
