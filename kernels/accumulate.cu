// Dequantize-and-accumulate, CUDA. Each thread owns four consecutive
// elements (float4 / 32-bit code loads when aligned), keeps the running sum
// in registers over all sources and writes acc once. Products and sums use
// __fmul_rn/__fadd_rn in source order, as the CPU reference, so the results
// agree bit for bit. Sources go to the kernel by value, kMaxSources per
// launch; later launches continue from acc.
#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/accumulate.h"
#include "kernels/fp8_device.cuh"
#include "kernels/gpu.h"

namespace gift::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSources = 16;

struct SourceBatch {
  const uint8_t* codes[kMaxSources];
  const float* scales[kMaxSources];
  int count;
};

template <Fp8Format F>
__device__ __forceinline__ float AddOne(float a, uint8_t q, float s) {
  return __fadd_rn(a, __fmul_rn(device::Decode<F>(q), s));
}

template <Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    AccumulateKernel(SourceBatch src, int64_t n, int64_t block, bool vec,
                     bool zero_first, float* acc) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = tid; i < n4; i += stride) {
    float4 a = zero_first ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                          : reinterpret_cast<const float4*>(acc)[i];
    const int64_t b = (4 * i) / block;
    for (int k = 0; k < src.count; ++k) {
      const uint32_t q = reinterpret_cast<const uint32_t*>(src.codes[k])[i];
      const float s = src.scales[k][b];
      a.x = AddOne<F>(a.x, q & 0xFF, s);
      a.y = AddOne<F>(a.y, (q >> 8) & 0xFF, s);
      a.z = AddOne<F>(a.z, (q >> 16) & 0xFF, s);
      a.w = AddOne<F>(a.w, q >> 24, s);
    }
    reinterpret_cast<float4*>(acc)[i] = a;
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += stride) {
    float a = zero_first ? 0.0f : acc[i];
    const int64_t b = i / block;
    for (int k = 0; k < src.count; ++k) {
      a = AddOne<F>(a, src.codes[k][i], src.scales[k][b]);
    }
    acc[i] = a;
  }
}

bool Aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

absl::Status CheckArgs(const Fp8Source* sources, int num_sources, int64_t n,
                       const QuantizeSpec& spec, const float* acc) {
  if (n < 0 || num_sources < 0 || spec.block_size < 0) {
    return absl::InvalidArgumentError("negative n, num_sources or block_size");
  }
  if (num_sources > 0 && sources == nullptr) {
    return absl::InvalidArgumentError("null sources");
  }
  if (n == 0) return absl::OkStatus();
  if (acc == nullptr) return absl::InvalidArgumentError("null acc");
  for (int k = 0; k < num_sources; ++k) {
    if (sources[k].codes == nullptr || sources[k].scales == nullptr) {
      return absl::InvalidArgumentError("null source");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DequantizeAccumulate(gpu::Context& ctx, const Fp8Source* sources,
                                  int num_sources, int64_t n,
                                  const QuantizeSpec& spec, bool zero_first,
                                  float* acc) {
  if (auto s = CheckArgs(sources, num_sources, n, spec, acc); !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  if (num_sources == 0) {
    if (zero_first) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(acc, 0, n * sizeof(float), stream));
    }
    return absl::OkStatus();
  }
  const int64_t block = spec.block_size > 0 ? spec.block_size : n;
  bool vec = Aligned(acc, 16) && (spec.block_size == 0 || block % 4 == 0);
  for (int k = 0; k < num_sources; ++k) vec &= Aligned(sources[k].codes, 4);
  const int grid = device::GridFor(vec ? n / 4 + 1 : n, kThreads, ctx.device());
  for (int k0 = 0; k0 < num_sources; k0 += kMaxSources) {
    SourceBatch batch;
    batch.count = std::min(kMaxSources, num_sources - k0);
    for (int k = 0; k < batch.count; ++k) {
      batch.codes[k] = sources[k0 + k].codes;
      batch.scales[k] = sources[k0 + k].scales;
    }
    const bool zero = zero_first && k0 == 0;
    if (spec.format == Fp8Format::kE4M3) {
      AccumulateKernel<Fp8Format::kE4M3>
          <<<grid, kThreads, 0, stream>>>(batch, n, block, vec, zero, acc);
    } else {
      AccumulateKernel<Fp8Format::kE5M2>
          <<<grid, kThreads, 0, stream>>>(batch, n, block, vec, zero, acc);
    }
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels::cuda
