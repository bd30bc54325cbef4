// Device side of QuantizeStats (kernels/quantize.h): a thread's running
// counters and sums, and the CTA-wide reduction that adds them into the
// caller's QuantizeStats in device memory. Shared by the FP8 (quantize.cu)
// and 4-bit (quantize_fp4.cu) quantize kernels.
//
//   LocalStats st{};                  // per thread, while it encodes
//   FlushStats<kThreads>(st, n, out); // every thread of the CTA calls it
//
// Thread safety: FlushStats synchronises the CTA (__syncthreads) and adds
// to *out atomically, so CTAs of one launch may share `out`.
#ifndef GIFT_KERNELS_QUANTIZE_STATS_CUH_
#define GIFT_KERNELS_QUANTIZE_STATS_CUH_

#include <cstdint>

#include "kernels/quantize.h"

namespace gift::kernels::cuda {

struct LocalStats {
  unsigned long long upper, lower, nonfinite;
  double err_sq, x_sq, xhat_x;
};

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}

// CTA-wide reduction of every thread's stats into *out (all threads call;
// blockDim.x <= kThreads, a multiple of 32). Block 0 also adds n unless
// add_n is false (then the caller writes out->n itself, after the launch).
template <int kThreads>
__device__ void FlushStats(LocalStats st, int64_t n, QuantizeStats* out,
                           bool add_n = true) {
  __shared__ LocalStats warps[kThreads / 32];
  st.upper = WarpSum(st.upper);
  st.lower = WarpSum(st.lower);
  st.nonfinite = WarpSum(st.nonfinite);
  st.err_sq = WarpSum(st.err_sq);
  st.x_sq = WarpSum(st.x_sq);
  st.xhat_x = WarpSum(st.xhat_x);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  LocalStats t{};
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    t.upper += warps[w].upper;
    t.lower += warps[w].lower;
    t.nonfinite += warps[w].nonfinite;
    t.err_sq += warps[w].err_sq;
    t.x_sq += warps[w].x_sq;
    t.xhat_x += warps[w].xhat_x;
  }
  auto* counters = reinterpret_cast<unsigned long long*>(out);
  if (add_n && blockIdx.x == 0) {
    atomicAdd(&counters[0], static_cast<unsigned long long>(n));
  }
  atomicAdd(&counters[1], t.upper);
  atomicAdd(&counters[2], t.lower);
  atomicAdd(&counters[3], t.nonfinite);
  atomicAdd(&out->err_sq, t.err_sq);
  atomicAdd(&out->x_sq, t.x_sq);
  atomicAdd(&out->xhat_x, t.xhat_x);
}

}  // namespace gift::kernels::cuda

#endif  // GIFT_KERNELS_QUANTIZE_STATS_CUH_
