// FP8 codec, CUDA. Four elements per thread and iteration (float4 / uchar4
// accesses) when the pointers allow it, a scalar grid-stride loop otherwise
// and for the tail.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/fp8.h"
#include "kernels/fp8_device.cuh"
#include "kernels/gpu.h"

namespace gift::kernels::cuda {
namespace {

constexpr int kThreads = 256;

bool Aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <Fp8Format F>
__global__ void EncodeKernel(const float* x, int64_t n, bool vec,
                             uint8_t* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = tid; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<uint32_t*>(out)[i] =
        device::Encode2<F>(v.x, v.y) | (device::Encode2<F>(v.z, v.w) << 16);
  }
  for (int64_t i = n4 * 4 + tid; i < n; i += stride) {
    out[i] = device::Encode<F>(x[i]);
  }
}

template <Fp8Format F>
__global__ void DecodeKernel(const uint8_t* codes, int64_t n, bool vec,
                             float* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = tid; i < n4; i += stride) {
    const uint32_t q = reinterpret_cast<const uint32_t*>(codes)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(
        device::Decode<F>(q & 0xFF), device::Decode<F>((q >> 8) & 0xFF),
        device::Decode<F>((q >> 16) & 0xFF), device::Decode<F>(q >> 24));
  }
  for (int64_t i = n4 * 4 + tid; i < n; i += stride) {
    out[i] = device::Decode<F>(codes[i]);
  }
}

absl::Status CheckArgs(int64_t n, const void* a, const void* b) {
  if (n < 0) return absl::InvalidArgumentError("n < 0");
  if (n > 0 && (a == nullptr || b == nullptr)) {
    return absl::InvalidArgumentError("null buffer");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeFp8(gpu::Context& ctx, const float* x, int64_t n,
                       Fp8Format f, uint8_t* out) {
  if (auto s = CheckArgs(n, x, out); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const bool vec = Aligned(x, 16) && Aligned(out, 4);
  const int grid = device::GridFor(vec ? n / 4 + 1 : n, kThreads, ctx.device());
  if (f == Fp8Format::kE4M3) {
    EncodeKernel<Fp8Format::kE4M3>
        <<<grid, kThreads, 0, stream>>>(x, n, vec, out);
  } else {
    EncodeKernel<Fp8Format::kE5M2>
        <<<grid, kThreads, 0, stream>>>(x, n, vec, out);
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status DecodeFp8(gpu::Context& ctx, const uint8_t* codes, int64_t n,
                       Fp8Format f, float* out) {
  if (auto s = CheckArgs(n, codes, out); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const bool vec = Aligned(codes, 4) && Aligned(out, 16);
  const int grid = device::GridFor(vec ? n / 4 + 1 : n, kThreads, ctx.device());
  if (f == Fp8Format::kE4M3) {
    DecodeKernel<Fp8Format::kE4M3>
        <<<grid, kThreads, 0, stream>>>(codes, n, vec, out);
  } else {
    DecodeKernel<Fp8Format::kE5M2>
        <<<grid, kThreads, 0, stream>>>(codes, n, vec, out);
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gift::kernels::cuda
