// GPU runtime: the one place where the kernels module asks whether CUDA is
// there. Without CUDA every entry point reports "no device".
#include "kernels/gpu.h"

#include <utility>

#if GIFT_HAVE_CUDA
#include "common/cuda_check.h"
#endif

namespace gift::gpu {

#if GIFT_HAVE_CUDA

bool BuiltWithCuda() { return true; }

int DeviceCount() {
  int count = 0;  // left untouched when the driver is missing
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(int device) {
  const int n = DeviceCount();
  if (device < 0 || device >= n) {
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device, " (",
                                               n, " device(s) visible)"));
  }
  std::unique_ptr<Context> ctx(new Context());
  ctx->device_ = device;
  GIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ctx->stream_ = stream;
  cublasHandle_t blas = nullptr;
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas));
  ctx->cublas_ = blas;
  GIFT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas, stream));
  cusolverDnHandle_t solver = nullptr;
  GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnCreate(&solver));
  ctx->cusolver_ = solver;
  GIFT_CUSOLVER_RETURN_IF_ERROR(cusolverDnSetStream(solver, stream));
  return ctx;
}

Context::~Context() {
  if (cusolver_) cusolverDnDestroy(static_cast<cusolverDnHandle_t>(cusolver_));
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::Status Context::Synchronize() {
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

RawDeviceBuffer::~RawDeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

absl::Status RawDeviceBuffer::Allocate(size_t bytes) {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (bytes == 0) return absl::OkStatus();
  GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status RawDeviceBuffer::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("upload past buffer end");
  if (bytes == 0) return absl::OkStatus();
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
  // A pageable upload may still be in flight when cudaMemcpy returns, and
  // the contexts' streams are non-blocking: wait, so that a kernel queued
  // next on any stream sees the data.
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status RawDeviceBuffer::Download(void* host, size_t bytes) const {
  if (bytes > bytes_) return absl::OutOfRangeError("download past buffer end");
  if (bytes == 0) return absl::OkStatus();
  // Kernels run on non-blocking streams the legacy stream does not wait for.
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status RawDeviceBuffer::Fill(int byte_value) {
  if (bytes_ == 0) return absl::OkStatus();
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemset(ptr_, byte_value, bytes_));
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // see Upload
  return absl::OkStatus();
}

#else  // !GIFT_HAVE_CUDA

bool BuiltWithCuda() { return false; }
int DeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<Context>> Context::Create(int) {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}
Context::~Context() = default;
absl::Status Context::Synchronize() {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}
RawDeviceBuffer::~RawDeviceBuffer() = default;
absl::Status RawDeviceBuffer::Allocate(size_t) {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}
absl::Status RawDeviceBuffer::Upload(const void*, size_t) {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}
absl::Status RawDeviceBuffer::Download(void*, size_t) const {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}
absl::Status RawDeviceBuffer::Fill(int) {
  return absl::UnavailableError("this build of GIFT has no CUDA support");
}

#endif  // GIFT_HAVE_CUDA

RawDeviceBuffer::RawDeviceBuffer(RawDeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

RawDeviceBuffer& RawDeviceBuffer::operator=(RawDeviceBuffer&& o) noexcept {
  if (this != &o) {
    RawDeviceBuffer tmp(std::move(*this));
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

}  // namespace gift::gpu
