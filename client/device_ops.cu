// Grid-stride elementwise kernels; explicit __f*_rn intrinsics so that nvcc
// never contracts or approximates (bit-identical to the host loops).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "client/device_ops.h"
#include "client/fp8_backend_math.h"
#include "common/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/wire_format.h"

namespace gift::client::device {
namespace {

constexpr int kThreads = 256;

cudaStream_t StreamOf(gpu::Context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}

int Grid(gpu::Context& ctx, int64_t n) {
  return kernels::device::GridFor(n, kThreads, ctx.device());
}

#define GIFT_GRID_STRIDE(i, n)                                              \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void DivideKernel(float* x, int64_t n, float w) {
  GIFT_GRID_STRIDE(i, n) { x[i] = __fdiv_rn(x[i], w); }
}

__global__ void AddKernel(float* acc, const float* x, int64_t n) {
  GIFT_GRID_STRIDE(i, n) { acc[i] = __fadd_rn(acc[i], x[i]); }
}

__global__ void FlagKernel(const float* x, int64_t n, uint8_t* flag) {
  GIFT_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;  // benign race: every writer writes 1
  }
}

__global__ void FlagFp4Kernel(const uint8_t* scales, int64_t n,
                              const float* tensor_scale, kernels::Fp4Format f,
                              uint8_t* flag) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && f == kernels::Fp4Format::kNvfp4 &&
      !kernels::IsNvfp4TensorScaleValid(*tensor_scale)) {
    *flag = 1;
  }
  GIFT_GRID_STRIDE(i, n) {
    if (kernels::IsFp4NaNScale(scales[i], f)) *flag = 1;  // benign race
  }
}

__global__ void FillNaNKernel(float* x, int64_t n) {
  GIFT_GRID_STRIDE(i, n) { x[i] = __int_as_float(0x7FC00000); }
}

__global__ void ToBf16Kernel(const float* x, int64_t n, uint16_t* out) {
  GIFT_GRID_STRIDE(i, n) {
    uint32_t u = __float_as_uint(x[i]);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
      out[i] = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      u += 0x7FFFu + ((u >> 16) & 1u);
      out[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

__global__ void FromBf16Kernel(const uint16_t* x, int64_t n, float* out) {
  GIFT_GRID_STRIDE(i, n) {
    out[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
  }
}

// sums[0] += Σ(xhat − x)², sums[1] += Σx², and with `dot` also
// sums[2] += Σxhat·x.
__global__ void SquaredErrorKernel(const float* x, const float* xhat, int64_t n,
                                   double* sums, bool dot) {
  __shared__ double err[kThreads], ref[kThreads], prod[kThreads];
  double e = 0, r = 0, p = 0;
  GIFT_GRID_STRIDE(i, n) {
    const double d = static_cast<double>(xhat[i]) - x[i];
    e += d * d;
    r += static_cast<double>(x[i]) * x[i];
    p += static_cast<double>(xhat[i]) * x[i];
  }
  err[threadIdx.x] = e;
  ref[threadIdx.x] = r;
  prod[threadIdx.x] = p;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      err[threadIdx.x] += err[threadIdx.x + s];
      ref[threadIdx.x] += ref[threadIdx.x + s];
      prod[threadIdx.x] += prod[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&sums[0], err[0]);
    atomicAdd(&sums[1], ref[0]);
    if (dot) atomicAdd(&sums[2], prod[0]);
  }
}

// f from sums[1] = Σacc², sums[3] = Σres² (AddSquaredError's second slots).
__global__ void CappedAddKernel(float* acc, const float* res, int64_t n,
                                float cap, const double* sums, float* keep) {
  const float f = ReleaseFactor(sums[1], sums[3], cap);
  GIFT_GRID_STRIDE(i, n) {
    const float r = __fmul_rn(f, res[i]);
    acc[i] = __fadd_rn(acc[i], r);
    keep[i] = __fsub_rn(res[i], r);
  }
}

__global__ void AbsMaxKernel(const float* x, int64_t n, float* amax) {
  __shared__ float m[kThreads];
  float a = 0.0f;
  GIFT_GRID_STRIDE(i, n) {
    const float v = fabsf(x[i]);
    a = isfinite(v) ? fmaxf(a, v) : __int_as_float(0x7F800000);
  }
  m[threadIdx.x] = a;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      m[threadIdx.x] = fmaxf(m[threadIdx.x], m[threadIdx.x + s]);
    __syncthreads();
  }
  // Non-negative floats (+Inf included) order like their bit patterns.
  if (threadIdx.x == 0) {
    atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m[0]));
  }
}

__device__ __forceinline__ float ScaleOf(float amax, float w, float fmax) {
  if (amax == 0.0f) return 1.0f;
  const float s = __fdiv_rn(__fmul_rn(w, amax), fmax);
  return s > 0.0f ? s : __int_as_float(1);  // smallest denormal on underflow
}

template <kernels::Fp8Format F>
__device__ __forceinline__ constexpr float MaxOf() {
  return F == kernels::Fp8Format::kE4M3 ? 448.0f : 57344.0f;  // Fp8Max
}

template <kernels::Fp8Format F>
__global__ void EncodeScaledKernel(const float* x, int64_t n, const float* amax,
                                   float w, uint8_t* codes) {
  const float s = ScaleOf(*amax, w, MaxOf<F>());
  GIFT_GRID_STRIDE(i, n) {
    codes[i] = kernels::device::Encode<F>(__fdiv_rn(x[i], s));
  }
}

template <kernels::Fp8Format F>
__global__ void DecodeScaledKernel(const uint8_t* codes, int64_t n,
                                   const float* amax, float w, float* out) {
  const float a = *amax;
  const float s = ScaleOf(a, w, MaxOf<F>());
  const bool finite = isfinite(a);
  GIFT_GRID_STRIDE(i, n) {
    out[i] = finite ? __fdiv_rn(
                          __fmul_rn(kernels::device::Decode<F>(codes[i]), s), w)
                    : __int_as_float(0x7FC00000);
  }
}

absl::Status Launched() {
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CheckN(int64_t n, const void* p, const char* what) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": n < 0"));
  if (n > 0 && p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null pointer"));
  }
  return absl::OkStatus();
}

}  // namespace

#define GIFT_LAUNCH(kernel, ctx, n, ...)                               \
  do {                                                                 \
    if ((n) == 0) return absl::OkStatus();                             \
    kernel<<<Grid(ctx, n), kThreads, 0, StreamOf(ctx)>>>(__VA_ARGS__); \
    return Launched();                                                 \
  } while (0)

absl::Status Divide(gpu::Context& ctx, float* x, int64_t n, float w) {
  if (absl::Status s = CheckN(n, x, "Divide"); !s.ok()) return s;
  GIFT_LAUNCH(DivideKernel, ctx, n, x, n, w);
}

absl::Status AddInPlace(gpu::Context& ctx, float* acc, const float* x,
                        int64_t n) {
  if (absl::Status s = CheckN(n, acc, "AddInPlace"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, x, "AddInPlace"); !s.ok()) return s;
  GIFT_LAUNCH(AddKernel, ctx, n, acc, x, n);
}

absl::Status AddCapped(gpu::Context& ctx, float* acc, const float* res,
                       int64_t n, float cap, double* sums, float* keep) {
  if (absl::Status s = CheckN(n, acc, "AddCapped"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, res, "AddCapped"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, keep, "AddCapped"); !s.ok()) return s;
  if (sums == nullptr) return absl::InvalidArgumentError("null sums");
  if (n == 0) return absl::OkStatus();
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(sums, 0, 4 * sizeof(double), StreamOf(ctx)));
  if (absl::Status s = AddSquaredError(ctx, acc, acc, n, sums); !s.ok()) {
    return s;
  }
  if (absl::Status s = AddSquaredError(ctx, res, res, n, sums + 2); !s.ok()) {
    return s;
  }
  GIFT_LAUNCH(CappedAddKernel, ctx, n, acc, res, n, cap, sums, keep);
}

absl::Status FlagNonFinite(gpu::Context& ctx, const float* x, int64_t n,
                           uint8_t* flag) {
  if (absl::Status s = CheckN(n, x, "FlagNonFinite"); !s.ok()) return s;
  if (flag == nullptr) return absl::InvalidArgumentError("null flag");
  GIFT_LAUNCH(FlagKernel, ctx, n, x, n, flag);
}

absl::Status FlagNonFiniteFp4(gpu::Context& ctx, const uint8_t* block_scales,
                              int64_t n, const float* tensor_scale,
                              kernels::Fp4Format f, uint8_t* flag) {
  if (absl::Status s = CheckN(n, block_scales, "FlagNonFiniteFp4"); !s.ok()) {
    return s;
  }
  if (flag == nullptr) return absl::InvalidArgumentError("null flag");
  if (f == kernels::Fp4Format::kNvfp4 && tensor_scale == nullptr) {
    return absl::InvalidArgumentError(
        "FlagNonFiniteFp4: nvfp4 needs its tensor scale");
  }
  GIFT_LAUNCH(FlagFp4Kernel, ctx, std::max<int64_t>(n, 1), block_scales, n,
              tensor_scale, f, flag);
}

absl::Status FillNaN(gpu::Context& ctx, float* x, int64_t n) {
  if (absl::Status s = CheckN(n, x, "FillNaN"); !s.ok()) return s;
  GIFT_LAUNCH(FillNaNKernel, ctx, n, x, n);
}

absl::Status ToBf16(gpu::Context& ctx, const float* x, int64_t n,
                    uint16_t* out) {
  if (absl::Status s = CheckN(n, x, "ToBf16"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, out, "ToBf16"); !s.ok()) return s;
  GIFT_LAUNCH(ToBf16Kernel, ctx, n, x, n, out);
}

absl::Status FromBf16(gpu::Context& ctx, const uint16_t* x, int64_t n,
                      float* out) {
  if (absl::Status s = CheckN(n, x, "FromBf16"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, out, "FromBf16"); !s.ok()) return s;
  GIFT_LAUNCH(FromBf16Kernel, ctx, n, x, n, out);
}

absl::Status AddSquaredError(gpu::Context& ctx, const float* x,
                             const float* xhat, int64_t n, double* sums) {
  if (absl::Status s = CheckN(n, x, "AddSquaredError"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, xhat, "AddSquaredError"); !s.ok()) return s;
  if (sums == nullptr) return absl::InvalidArgumentError("null sums");
  GIFT_LAUNCH(SquaredErrorKernel, ctx, n, x, xhat, n, sums, false);
}

absl::Status AddComparison(gpu::Context& ctx, const float* ref, const float* x,
                           int64_t n, double* sums) {
  if (absl::Status s = CheckN(n, ref, "AddComparison"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, x, "AddComparison"); !s.ok()) return s;
  if (sums == nullptr) return absl::InvalidArgumentError("null sums");
  GIFT_LAUNCH(SquaredErrorKernel, ctx, n, ref, x, n, sums, true);
}

absl::Status AbsMax(gpu::Context& ctx, const float* x, int64_t n, float* amax) {
  if (absl::Status s = CheckN(n, x, "AbsMax"); !s.ok()) return s;
  if (amax == nullptr) return absl::InvalidArgumentError("null amax");
  GIFT_LAUNCH(AbsMaxKernel, ctx, n, x, n, amax);
}

absl::Status EncodeScaled(gpu::Context& ctx, const float* x, int64_t n,
                          kernels::Fp8Format f, const float* amax, float w,
                          uint8_t* codes) {
  if (absl::Status s = CheckN(n, x, "EncodeScaled"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, codes, "EncodeScaled"); !s.ok()) return s;
  if (f == kernels::Fp8Format::kE4M3) {
    GIFT_LAUNCH(EncodeScaledKernel<kernels::Fp8Format::kE4M3>, ctx, n, x, n,
                amax, w, codes);
  }
  GIFT_LAUNCH(EncodeScaledKernel<kernels::Fp8Format::kE5M2>, ctx, n, x, n, amax,
              w, codes);
}

absl::Status DecodeScaled(gpu::Context& ctx, const uint8_t* codes, int64_t n,
                          kernels::Fp8Format f, const float* amax, float w,
                          float* out) {
  if (absl::Status s = CheckN(n, codes, "DecodeScaled"); !s.ok()) return s;
  if (absl::Status s = CheckN(n, out, "DecodeScaled"); !s.ok()) return s;
  if (f == kernels::Fp8Format::kE4M3) {
    GIFT_LAUNCH(DecodeScaledKernel<kernels::Fp8Format::kE4M3>, ctx, n, codes, n,
                amax, w, out);
  }
  GIFT_LAUNCH(DecodeScaledKernel<kernels::Fp8Format::kE5M2>, ctx, n, codes, n,
              amax, w, out);
}

}  // namespace gift::client::device
