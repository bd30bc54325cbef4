// Block-scaled 4-bit quantization, CUDA. Bit-identical codes, scales,
// residuals, dequantized values and sums to the CPU reference
// (quantize_fp4.cc): the same IEEE operations in the same order (__fdiv_rn,
// __fmul_rn, __fsub_rn, __fadd_rn), E2M1/E8M0 through the same inline
// coders of fp4.h, E4M3 through fp8_device.cuh (bit-identical to fp8.h).
//
// Quantize: first the segment's finite amax is reduced into a 32-bit word
// (|x| bits order like the values; atomicMax per warp), for nvfp4's tensor
// scale and for the tensor-relative boundary hits of both formats. The
// word lives in the tensor-scale slot, or, for mxfp4 called without one,
// in the first 4 bytes of stats->n (no amax is needed without either).
// Then one thread per block of 16 / 32 elements computes the block's amax,
// scale, packed codes (whole bytes: a block never shares a byte),
// residuals and telemetry (FlushStats without n); a last one-thread kernel
// turns the word into s_t (or writes 1 for mxfp4) and writes stats->n.
// Dequantize and accumulate: one thread per code byte (two elements), sums
// kept in registers over up to kMaxSources sources per launch. Statistics
// are reduced per CTA and added with one atomic per field and CTA. Not
// tuned: one thread per block reads 64 / 128 contiguous bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/fp4.h"
#include "kernels/fp8_device.cuh"
#include "kernels/gpu.h"
#include "kernels/quantize_fp4.h"
#include "kernels/quantize_stats.cuh"

namespace gift::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSources = 16;

static_assert(offsetof(QuantizeStats, n) == 0 &&
              offsetof(QuantizeStats, upper) == 8 &&
              offsetof(QuantizeStats, lower) == 16 &&
              offsetof(QuantizeStats, nonfinite) == 24 &&
              sizeof(int64_t) == sizeof(unsigned long long));

// Plain (no initialisers) so that it may live in shared memory.
// Nvfp4TensorScale on the amax's bits.
__device__ __forceinline__ float TensorScale(uint32_t amax_bits) {
  const float amax = __uint_as_float(amax_bits);
  if (amax == 0.0f) return 1.0f;
  const float s = __fdiv_rn(amax, kNvfp4TensorDivisor);
  return s > 0.0f ? s : __uint_as_float(1u);
}

// Nvfp4BlockScaleCode / Mxfp4ScaleCode.
template <Fp4Format F>
__device__ __forceinline__ uint8_t ScaleCode(float amax, float s_t) {
  if constexpr (F == Fp4Format::kNvfp4) {
    if (amax == 0.0f) return 0x00;
    const uint8_t c =
        device::Encode<Fp8Format::kE4M3>(__fdiv_rn(__fdiv_rn(amax, s_t), 6.0f));
    return c == 0 ? uint8_t{0x01} : c;
  } else {
    if (amax == 0.0f) return 127;
    const uint8_t e = EncodeE8M0(amax);
    return e > 2 ? uint8_t(e - 2) : uint8_t{0};
  }
}

// The CPU reference's BlockCoder.
template <Fp4Format F>
struct Coder {
  float tensor, block, div, recip;

  __device__ static Coder For(uint8_t code, float s_t) {
    Coder c{s_t, 0.0f, 1.0f, 1.0f};
    if constexpr (F == Fp4Format::kNvfp4) {
      c.block = device::Decode<Fp8Format::kE4M3>(code);
      c.div = code == 0 ? 1.0f : c.block;
    } else {
      c.block = DecodeE8M0(code);
      c.recip = __uint_as_float(uint32_t(254 - code) << 23);
    }
    return c;
  }
  __device__ uint8_t Encode(float x) const {
    if constexpr (F == Fp4Format::kNvfp4) {
      return EncodeE2M1(__fdiv_rn(__fdiv_rn(x, tensor), div));
    } else {
      return EncodeE2M1(__fmul_rn(x, recip));
    }
  }
  __device__ float Decode(uint8_t q) const {
    if constexpr (F == Fp4Format::kNvfp4) {
      return __fmul_rn(__fmul_rn(DecodeE2M1(q), block), tensor);
    } else {
      return __fmul_rn(DecodeE2M1(q), block);
    }
  }
};

__global__ void __launch_bounds__(kThreads)
    AmaxKernel(const float* x, int64_t n, uint32_t* word) {
  uint32_t amax = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t a = __float_as_uint(x[i]) & 0x7FFFFFFFu;
    if (a < 0x7F800000u) amax = max(amax, a);
  }
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  if (threadIdx.x % 32 == 0 && amax != 0) atomicMax(word, amax);
}

// One thread per block. amax_word: the segment's amax (nullable for mxfp4
// without stats).
template <Fp4Format F>
__global__ void __launch_bounds__(kThreads)
    EncodeKernel(const float* x, int64_t n, const uint32_t* amax_word,
                 uint8_t* codes, uint8_t* block_scales, float* residual,
                 QuantizeStats* stats) {
  constexpr int64_t kBlock = Fp4BlockSize(F);
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  const uint32_t amax_bits = amax_word != nullptr ? *amax_word : 0u;
  const float s_t = F == Fp4Format::kNvfp4 ? TensorScale(amax_bits) : 1.0f;
  // The boundary hits' coder: that of the segment's amax block.
  const Coder<F> hits =
      Coder<F>::For(ScaleCode<F>(__uint_as_float(amax_bits), s_t), s_t);
  LocalStats st{};
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < nblocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const int64_t lo = b * kBlock, hi = min(n, lo + kBlock);
    uint32_t amax = 0;
    bool flag = false;
    for (int64_t i = lo; i < hi; ++i) {
      const uint32_t a = __float_as_uint(x[i]) & 0x7FFFFFFFu;
      if (a < 0x7F800000u) {
        amax = max(amax, a);
      } else {
        flag = true;
      }
    }
    const uint8_t code = ScaleCode<F>(__uint_as_float(amax), s_t);
    const Coder<F> c = Coder<F>::For(code, s_t);
    uint8_t byte = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const float xv = x[i];  // before residual (may alias x) is written
      const uint8_t q = c.Encode(xv);
      if ((i - lo) % 2 == 0) {
        byte = q;
      } else {
        codes[i / 2] = uint8_t(byte | (q << 4));
      }
      const uint32_t a = __float_as_uint(xv) & 0x7FFFFFFFu;
      float r = 0.0f;
      if (a < 0x7F800000u) {
        const float h = c.Decode(q);
        const uint8_t t = hits.Encode(xv) & 7;
        st.upper += t == kE2M1MaxCode;
        st.lower += (t == 0) & (a != 0u);
        const double xd = xv, hd = h, d = hd - xd;
        st.err_sq += d * d;
        st.x_sq += xd * xd;
        st.xhat_x += hd * xd;
        r = __fsub_rn(xv, h);
      } else {
        ++st.nonfinite;
      }
      if (residual) residual[i] = r;
    }
    if ((hi - lo) % 2 != 0) codes[(hi - 1) / 2] = byte;
    block_scales[b] =
        !flag ? code : (F == Fp4Format::kNvfp4 ? kNvfp4NaNScale : kE8M0NaN);
  }
  // n is written by FinalizeKernel: stats->n may hold the amax word.
  if (stats) FlushStats<kThreads>(st, n, stats, /*add_n=*/false);
}

// tensor_scale (nullable) holds the amax word; becomes s_t (mxfp4: 1).
// stats->n (nullable) gets n, replacing the amax word if it was there.
__global__ void FinalizeKernel(float* tensor_scale, bool nv,
                               QuantizeStats* stats, int64_t n) {
  if (tensor_scale) {
    tensor_scale[0] = nv ? TensorScale(__float_as_uint(tensor_scale[0])) : 1.0f;
  }
  if (stats) stats->n = n;
}

template <Fp4Format F>
__global__ void __launch_bounds__(kThreads)
    DequantKernel(const uint8_t* codes, const uint8_t* block_scales,
                  const float* tensor_scale, int64_t n, float* out) {
  constexpr int64_t kBlock = Fp4BlockSize(F);
  const float s_t = F == Fp4Format::kNvfp4 ? tensor_scale[0] : 1.0f;
  const int64_t bytes = (n + 1) / 2;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < bytes;
       j += int64_t{gridDim.x} * blockDim.x) {
    const Coder<F> c = Coder<F>::For(block_scales[2 * j / kBlock], s_t);
    const uint8_t q = codes[j];
    out[2 * j] = c.Decode(q & 15);
    if (2 * j + 1 < n) out[2 * j + 1] = c.Decode(q >> 4);
  }
}

struct SourceBatch {
  const uint8_t* codes[kMaxSources];
  const uint8_t* block_scales[kMaxSources];
  const float* tensor_scale[kMaxSources];
  int count;
};

template <Fp4Format F>
__global__ void __launch_bounds__(kThreads)
    AccumulateKernel(SourceBatch src, int64_t n, bool zero_first, float* acc) {
  constexpr int64_t kBlock = Fp4BlockSize(F);
  const int64_t bytes = (n + 1) / 2;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < bytes;
       j += int64_t{gridDim.x} * blockDim.x) {
    const bool two = 2 * j + 1 < n;
    float a0 = zero_first ? 0.0f : acc[2 * j];
    float a1 = zero_first || !two ? 0.0f : acc[2 * j + 1];
    for (int k = 0; k < src.count; ++k) {
      const float s_t = F == Fp4Format::kNvfp4 ? src.tensor_scale[k][0] : 1.0f;
      const Coder<F> c =
          Coder<F>::For(src.block_scales[k][2 * j / kBlock], s_t);
      const uint8_t q = src.codes[k][j];
      a0 = __fadd_rn(a0, c.Decode(q & 15));
      a1 = __fadd_rn(a1, c.Decode(q >> 4));
    }
    acc[2 * j] = a0;
    if (two) acc[2 * j + 1] = a1;
  }
}

template <Fp4Format F>
absl::Status LaunchQuantize(gpu::Context& ctx, const float* x, int64_t n,
                            uint8_t* codes, uint8_t* block_scales,
                            float* tensor_scale, float* residual,
                            QuantizeStats* stats) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  constexpr bool kNv = F == Fp4Format::kNvfp4;
  // The amax word (nvfp4, and mxfp4 with stats): the tensor-scale slot,
  // zeroed here, else the first 4 bytes of stats->n (zeroed by the caller).
  uint32_t* word = nullptr;
  if (kNv || stats != nullptr) {
    word = tensor_scale != nullptr ? reinterpret_cast<uint32_t*>(tensor_scale)
                                   : reinterpret_cast<uint32_t*>(stats);
  }
  if (word != nullptr) {
    if (tensor_scale != nullptr) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(word, 0, sizeof(uint32_t), stream));
    }
    if (n > 0) {
      const int grid = device::GridFor(n, kThreads, ctx.device());
      AmaxKernel<<<grid, kThreads, 0, stream>>>(x, n, word);
      GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
  }
  const int64_t nblocks = Fp4NumBlocks(n, F);
  if (nblocks > 0) {
    const int grid = device::GridFor(nblocks, kThreads, ctx.device());
    EncodeKernel<F><<<grid, kThreads, 0, stream>>>(
        x, n, word, codes, block_scales, residual, stats);
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (tensor_scale != nullptr || stats != nullptr) {
    FinalizeKernel<<<1, 1, 0, stream>>>(tensor_scale, kNv, stats, n);
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeFp4(gpu::Context& ctx, const float* x, int64_t n,
                         Fp4Format f, uint8_t* codes, uint8_t* block_scales,
                         float* tensor_scale, float* residual,
                         QuantizeStats* stats) {
  if (auto s = internal::CheckQuantizeFp4Args(x, n, f, codes, block_scales,
                                              tensor_scale);
      !s.ok()) {
    return s;
  }
  if (stats) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(stats, 0, sizeof(QuantizeStats),
                        static_cast<cudaStream_t>(ctx.stream())));
  }
  return f == Fp4Format::kNvfp4
             ? LaunchQuantize<Fp4Format::kNvfp4>(ctx, x, n, codes, block_scales,
                                                 tensor_scale, residual, stats)
             : LaunchQuantize<Fp4Format::kMxfp4>(ctx, x, n, codes, block_scales,
                                                 tensor_scale, residual, stats);
}

absl::Status DequantizeFp4(gpu::Context& ctx, const uint8_t* codes,
                           const uint8_t* block_scales,
                           const float* tensor_scale, int64_t n, Fp4Format f,
                           float* out) {
  if (auto s = internal::CheckDequantizeFp4Args(codes, block_scales,
                                                tensor_scale, n, f, out);
      !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const int grid = device::GridFor((n + 1) / 2, kThreads, ctx.device());
  if (f == Fp4Format::kNvfp4) {
    DequantKernel<Fp4Format::kNvfp4><<<grid, kThreads, 0, stream>>>(
        codes, block_scales, tensor_scale, n, out);
  } else {
    DequantKernel<Fp4Format::kMxfp4><<<grid, kThreads, 0, stream>>>(
        codes, block_scales, tensor_scale, n, out);
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status DequantizeAccumulateFp4(gpu::Context& ctx,
                                     const Fp4Source* sources, int num_sources,
                                     int64_t n, Fp4Format f, bool zero_first,
                                     float* acc) {
  if (auto s =
          internal::CheckAccumulateFp4Args(sources, num_sources, n, f, acc);
      !s.ok()) {
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
  const int grid = device::GridFor((n + 1) / 2, kThreads, ctx.device());
  for (int k0 = 0; k0 < num_sources; k0 += kMaxSources) {
    SourceBatch batch;
    batch.count = std::min(kMaxSources, num_sources - k0);
    for (int k = 0; k < batch.count; ++k) {
      batch.codes[k] = sources[k0 + k].codes;
      batch.block_scales[k] = sources[k0 + k].block_scales;
      batch.tensor_scale[k] = sources[k0 + k].tensor_scale;
    }
    const bool zero = zero_first && k0 == 0;
    if (f == Fp4Format::kNvfp4) {
      AccumulateKernel<Fp4Format::kNvfp4>
          <<<grid, kThreads, 0, stream>>>(batch, n, zero, acc);
    } else {
      AccumulateKernel<Fp4Format::kMxfp4>
          <<<grid, kThreads, 0, stream>>>(batch, n, zero, acc);
    }
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels::cuda
