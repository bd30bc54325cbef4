// Scaled FP8 quantization, CUDA. Bit-identical codes, scales and residuals to
// the CPU reference: the same IEEE operations (__fdiv_rn, __fmul_rn,
// __fsub_rn) on the same values.
//
// Two strategies:
//  * small blocks (0 < B <= kWarpBlockMax): one warp per block, fused: amax
//    by warp reduction, then encode (the re-read hits L1/L2);
//  * one scale per tensor or large blocks: the block is cut into tiles; an
//    amax kernel merges each tile's (finite amax, non-finite flag) into a
//    32-bit word that lives in the block's scale slot (bit 31: flag, bits
//    0-30: |x| bits, which order like the values), an encode kernel derives
//    the scale from that word, and a last tiny kernel turns the words into
//    the final scales. No workspace is allocated.
// Statistics are accumulated per thread, reduced per CTA and added with one
// atomic per field and CTA; counters are exact.
#include <cstddef>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/gpu.h"
#include "kernels/quantize.h"
#include "kernels/quantize_stats.cuh"

namespace gift::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 4096;
constexpr int64_t kWarpBlockMax = 2048;
constexpr uint32_t kFlag = 0x80000000u;
constexpr uint32_t kNaNBits = 0x7FC00000u;

template <Fp8Format F>
struct Traits {
  static constexpr float kMax = F == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
  static constexpr uint32_t kMaxCode = F == Fp8Format::kE4M3 ? 0x7E : 0x7B;
};

// FlushStats adds to the four counters as an array.
static_assert(offsetof(QuantizeStats, n) == 0 &&
              offsetof(QuantizeStats, upper) == 8 &&
              offsetof(QuantizeStats, lower) == 16 &&
              offsetof(QuantizeStats, nonfinite) == 24 &&
              sizeof(int64_t) == sizeof(unsigned long long));

// Plain (no initialisers) so that it may live in shared memory; zero it with
// LocalStats st{}.
struct Layout {
  int64_t n;
  int64_t block;    // elements per scale (n for one scale per tensor)
  int64_t nblocks;  // number of scales
  int64_t chunks;   // tiles per block (tiled path)
  bool vec;         // float4 access is aligned at every block start
};

template <Fp8Format F>
__device__ __forceinline__ float ScaleOf(uint32_t amax_bits) {
  const float amax = __uint_as_float(amax_bits);
  if (amax == 0.0f) return 1.0f;
  const float s = __fdiv_rn(amax, Traits<F>::kMax);
  return s > 0.0f ? s : __uint_as_float(1u);  // smallest positive float
}

__device__ __forceinline__ void AmaxOf(float x, uint32_t& amax,
                                       uint32_t& flag) {
  const uint32_t a = __float_as_uint(x) & 0x7FFFFFFFu;
  if (a < 0x7F800000u) {
    amax = max(amax, a);
  } else {
    flag = kFlag;
  }
}

// x̂ and telemetry of one element; returns the residual.
template <Fp8Format F>
__device__ __forceinline__ float Finish(float x, uint8_t q, float s,
                                        LocalStats& st) {
  const uint32_t a = __float_as_uint(x) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {
    ++st.nonfinite;
    return 0.0f;
  }
  const float h = __fmul_rn(device::Decode<F>(q), s);
  const uint32_t mag = q & 0x7Fu;
  st.upper += mag == Traits<F>::kMaxCode;
  st.lower += (mag <= 1u) & (a != 0u);
  const double xd = x, hd = h, d = hd - xd;
  st.err_sq += d * d;
  st.x_sq += xd * xd;
  st.xhat_x += hd * xd;
  return __fsub_rn(x, h);
}

// Calls f4(i, float4) for aligned quadruples of [lo, hi) and f1(i, float) for
// the rest, distributing them over `count` threads of which this is `rank`.
template <typename F4, typename F1>
__device__ __forceinline__ void ForRange(const float* x, int64_t lo, int64_t hi,
                                         int rank, int count, bool vec, F4 f4,
                                         F1 f1) {
  int64_t tail = lo;
  if (vec) {
    tail = lo + (hi - lo) / 4 * 4;
    for (int64_t i = lo + 4 * int64_t{rank}; i < tail;
         i += 4 * int64_t{count}) {
      f4(i, *reinterpret_cast<const float4*>(x + i));
    }
  }
  for (int64_t i = tail + rank; i < hi; i += count) f1(i, x[i]);
}

template <Fp8Format F>
struct Encoder {
  float s;
  uint8_t* codes;
  float* residual;

  __device__ void One(int64_t i, float x, LocalStats& st) const {
    const uint8_t q = device::Encode<F>(__fdiv_rn(x, s));
    codes[i] = q;
    const float r = Finish<F>(x, q, s, st);
    if (residual) residual[i] = r;
  }
  __device__ void Four(int64_t i, float4 v, LocalStats& st) const {
    const uint32_t q =
        device::Encode2<F>(__fdiv_rn(v.x, s), __fdiv_rn(v.y, s)) |
        (device::Encode2<F>(__fdiv_rn(v.z, s), __fdiv_rn(v.w, s)) << 16);
    *reinterpret_cast<uint32_t*>(codes + i) = q;
    float4 r;
    r.x = Finish<F>(v.x, q & 0xFF, s, st);
    r.y = Finish<F>(v.y, (q >> 8) & 0xFF, s, st);
    r.z = Finish<F>(v.z, (q >> 16) & 0xFF, s, st);
    r.w = Finish<F>(v.w, q >> 24, s, st);
    if (residual) *reinterpret_cast<float4*>(residual + i) = r;
  }
};

// ---- Small blocks: one warp per block, fused. ----------------------------
template <Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    WarpBlockKernel(const float* x, Layout L, uint8_t* codes, float* scales,
                    float* residual, QuantizeStats* stats) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  LocalStats st{};
  for (int64_t b = warp; b < L.nblocks; b += warps) {
    const int64_t lo = b * L.block, hi = min(L.n, lo + L.block);
    uint32_t amax = 0, flag = 0;
    ForRange(
        x, lo, hi, lane, 32, L.vec,
        [&](int64_t, float4 v) {
          AmaxOf(v.x, amax, flag);
          AmaxOf(v.y, amax, flag);
          AmaxOf(v.z, amax, flag);
          AmaxOf(v.w, amax, flag);
        },
        [&](int64_t, float v) { AmaxOf(v, amax, flag); });
    amax = __reduce_max_sync(0xFFFFFFFFu, amax);
    flag = __reduce_or_sync(0xFFFFFFFFu, flag);
    const Encoder<F> enc{ScaleOf<F>(amax), codes, residual};
    if (lane == 0) scales[b] = flag ? __uint_as_float(kNaNBits) : enc.s;
    ForRange(
        x, lo, hi, lane, 32, L.vec,
        [&](int64_t i, float4 v) { enc.Four(i, v, st); },
        [&](int64_t i, float v) { enc.One(i, v, st); });
  }
  if (stats) FlushStats<kThreads>(st, L.n, stats);
}

// ---- Large blocks / per tensor: tiles. -----------------------------------
__device__ __forceinline__ bool TileRange(const Layout& L, int64_t item,
                                          int64_t* b, int64_t* lo,
                                          int64_t* hi) {
  *b = item / L.chunks;
  const int64_t start = *b * L.block, end = min(L.n, start + L.block);
  *lo = start + (item % L.chunks) * kTile;
  *hi = min(end, *lo + kTile);
  return *lo < *hi;
}

__global__ void __launch_bounds__(kThreads)
    TileAmaxKernel(const float* x, Layout L, uint32_t* words) {
  __shared__ uint32_t warp_amax[kThreads / 32], warp_flag[kThreads / 32];
  for (int64_t item = blockIdx.x; item < L.nblocks * L.chunks;
       item += gridDim.x) {
    int64_t b, lo, hi;
    if (!TileRange(L, item, &b, &lo, &hi)) continue;  // uniform per CTA
    uint32_t amax = 0, flag = 0;
    ForRange(
        x, lo, hi, threadIdx.x, blockDim.x, L.vec,
        [&](int64_t, float4 v) {
          AmaxOf(v.x, amax, flag);
          AmaxOf(v.y, amax, flag);
          AmaxOf(v.z, amax, flag);
          AmaxOf(v.w, amax, flag);
        },
        [&](int64_t, float v) { AmaxOf(v, amax, flag); });
    amax = __reduce_max_sync(0xFFFFFFFFu, amax);
    flag = __reduce_or_sync(0xFFFFFFFFu, flag);
    if (threadIdx.x % 32 == 0) {
      warp_amax[threadIdx.x / 32] = amax;
      warp_flag[threadIdx.x / 32] = flag;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
        amax = max(amax, warp_amax[w]);
        flag |= warp_flag[w];
      }
      // Merge (max of the magnitude bits, or of the flag) into the word.
      uint32_t old = *reinterpret_cast<volatile uint32_t*>(&words[b]);
      for (;;) {
        const uint32_t want = max(old & ~kFlag, amax) | (old & kFlag) | flag;
        if (want == old) break;
        const uint32_t seen = atomicCAS(&words[b], old, want);
        if (seen == old) break;
        old = seen;
      }
    }
    __syncthreads();
  }
}

template <Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    TileEncodeKernel(const float* x, Layout L, const uint32_t* words,
                     uint8_t* codes, float* residual, QuantizeStats* stats) {
  LocalStats st{};
  for (int64_t item = blockIdx.x; item < L.nblocks * L.chunks;
       item += gridDim.x) {
    int64_t b, lo, hi;
    if (!TileRange(L, item, &b, &lo, &hi)) continue;
    const Encoder<F> enc{ScaleOf<F>(words[b] & ~kFlag), codes, residual};
    ForRange(
        x, lo, hi, threadIdx.x, blockDim.x, L.vec,
        [&](int64_t i, float4 v) { enc.Four(i, v, st); },
        [&](int64_t i, float v) { enc.One(i, v, st); });
  }
  if (stats) FlushStats<kThreads>(st, L.n, stats);
}

// words and scales are the same memory.
template <Fp8Format F>
__global__ void FinalizeScalesKernel(int64_t nblocks, float* scales) {
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < nblocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t w = __float_as_uint(scales[b]);
    scales[b] =
        (w & kFlag) ? __uint_as_float(kNaNBits) : ScaleOf<F>(w & ~kFlag);
  }
}

bool Aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <Fp8Format F>
absl::Status Launch(gpu::Context& ctx, const float* x, const Layout& L,
                    uint8_t* codes, float* scales, float* residual,
                    QuantizeStats* stats) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  auto* words = reinterpret_cast<uint32_t*>(scales);
  if (L.n > 0 && L.block <= kWarpBlockMax && L.nblocks > 1) {
    const int grid = device::GridFor(L.nblocks * 32, kThreads, ctx.device());
    WarpBlockKernel<F>
        <<<grid, kThreads, 0, stream>>>(x, L, codes, scales, residual, stats);
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(scales, 0, L.nblocks * sizeof(float), stream));
  if (L.n > 0) {
    const int64_t items = L.nblocks * L.chunks;
    const int grid = device::GridFor(items * kThreads, kThreads, ctx.device());
    TileAmaxKernel<<<grid, kThreads, 0, stream>>>(x, L, words);
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    TileEncodeKernel<F>
        <<<grid, kThreads, 0, stream>>>(x, L, words, codes, residual, stats);
    GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  const int grid = device::GridFor(L.nblocks, kThreads, ctx.device());
  FinalizeScalesKernel<F><<<grid, kThreads, 0, stream>>>(L.nblocks, scales);
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <Fp8Format F>
__global__ void DequantKernel(const uint8_t* codes, const float* scales,
                              int64_t n, int64_t block, bool vec, float* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = tid; i < n4; i += stride) {
    const float s = scales[(4 * i) / block];
    const uint32_t q = reinterpret_cast<const uint32_t*>(codes)[i];
    reinterpret_cast<float4*>(out)[i] =
        make_float4(__fmul_rn(device::Decode<F>(q & 0xFF), s),
                    __fmul_rn(device::Decode<F>((q >> 8) & 0xFF), s),
                    __fmul_rn(device::Decode<F>((q >> 16) & 0xFF), s),
                    __fmul_rn(device::Decode<F>(q >> 24), s));
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += stride) {
    out[i] = __fmul_rn(device::Decode<F>(codes[i]), scales[i / block]);
  }
}

absl::Status CheckArgs(int64_t n, const QuantizeSpec& spec, const void* a,
                       const void* b, const void* c) {
  if (n < 0) return absl::InvalidArgumentError("n < 0");
  if (spec.block_size < 0) return absl::InvalidArgumentError("block_size < 0");
  if (n > 0 && (a == nullptr || b == nullptr || c == nullptr)) {
    return absl::InvalidArgumentError("null buffer");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Quantize(gpu::Context& ctx, const float* x, int64_t n,
                      const QuantizeSpec& spec, uint8_t* codes, float* scales,
                      float* residual, QuantizeStats* stats) {
  if (n == 0 && spec.block_size == 0 && scales == nullptr) {
    return absl::InvalidArgumentError("null scales");
  }
  if (auto s = CheckArgs(n, spec, x, codes, scales); !s.ok()) return s;
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  if (stats) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(stats, 0, sizeof(QuantizeStats), stream));
  }
  Layout L;
  L.n = n;
  L.block = spec.block_size > 0 ? spec.block_size : n;
  L.nblocks = NumScales(n, spec.block_size);
  L.chunks = (L.block + kTile - 1) / kTile;
  L.vec = Aligned(x, 16) && Aligned(codes, 4) &&
          (residual == nullptr || Aligned(residual, 16)) &&
          (L.nblocks == 1 || L.block % 4 == 0);
  if (L.nblocks == 0) return absl::OkStatus();
  return spec.format == Fp8Format::kE4M3
             ? Launch<Fp8Format::kE4M3>(ctx, x, L, codes, scales, residual,
                                        stats)
             : Launch<Fp8Format::kE5M2>(ctx, x, L, codes, scales, residual,
                                        stats);
}

absl::Status Dequantize(gpu::Context& ctx, const uint8_t* codes,
                        const float* scales, int64_t n,
                        const QuantizeSpec& spec, float* out) {
  if (auto s = CheckArgs(n, spec, codes, scales, out); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const int64_t block = spec.block_size > 0 ? spec.block_size : n;
  const bool vec = Aligned(codes, 4) && Aligned(out, 16) &&
                   (spec.block_size == 0 || block % 4 == 0);
  const int grid = device::GridFor(vec ? n / 4 + 1 : n, kThreads, ctx.device());
  if (spec.format == Fp8Format::kE4M3) {
    DequantKernel<Fp8Format::kE4M3>
        <<<grid, kThreads, 0, stream>>>(codes, scales, n, block, vec, out);
  } else {
    DequantKernel<Fp8Format::kE5M2>
        <<<grid, kThreads, 0, stream>>>(codes, scales, n, block, vec, out);
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gift::kernels::cuda
