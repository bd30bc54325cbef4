// Device-side FP8 coding shared by the .cu files of the kernels module
// (separable compilation is off, so these are inline, per translation unit).
// Encoding uses CUDA's own __nv_cvt_float2_to_fp8x2 (one cvt.rn.satfinite
// instruction for two values on sm_89+, exact emulation below), with NaN
// mapped to the canonical 0x7F as the CPU reference does. Decoding goes
// through half precision, which holds every FP8 value exactly.
//
// Include only from .cu files.
#ifndef GIFT_KERNELS_FP8_DEVICE_CUH_
#define GIFT_KERNELS_FP8_DEVICE_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fp8.h"

namespace gift::kernels::device {

template <Fp8Format F>
__host__ __device__ constexpr __nv_fp8_interpretation_t Interp() {
  return F == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
}

template <Fp8Format F>
__device__ __forceinline__ uint8_t Encode(float x) {
  const uint8_t q = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, Interp<F>());
  return isnan(x) ? uint8_t{0x7F} : q;
}

// Two values into the low (a) and high (b) byte.
template <Fp8Format F>
__device__ __forceinline__ uint32_t Encode2(float a, float b) {
  uint32_t q =
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, Interp<F>());
  if (isnan(a)) q = (q & 0xFF00u) | 0x7Fu;
  if (isnan(b)) q = (q & 0x00FFu) | 0x7F00u;
  return q;
}

template <Fp8Format F>
__device__ __forceinline__ float Decode(uint8_t q) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(q, Interp<F>());
  return __half2float(__half(h));
}

// Grid size for a grid-stride loop over `work` items of `threads` threads:
// enough blocks to fill the device a few times over, never more than needed.
inline int GridFor(int64_t work, int threads, int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sms <= 0) {
    sms = 132;
  }
  const int64_t want = (work + threads - 1) / threads;
  const int64_t cap = int64_t{sms} * 8;
  return static_cast<int>(want < 1 ? 1 : (want < cap ? want : cap));
}

}  // namespace gift::kernels::device

#endif  // GIFT_KERNELS_FP8_DEVICE_CUH_
