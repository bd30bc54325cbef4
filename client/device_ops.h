// Elementwise CUDA kernels of the device allreduce path that the kernels
// module does not provide: the FP32 steps between its quantize and
// accumulate kernels (division by W, the owner-residual addition), the
// non-finite flag, NaN fill, bfloat16 conversion, a relative-L2 reduction for
// probes, and the per-layer amax / scaled FP8 coding of the nccl-fp8 path.
// Every launcher queues on ctx's stream and returns the launch status; each
// has the same IEEE single-precision semantics as the host loop it mirrors
// (host_fp8_backend.cc), so results agree bit for bit.
//
// Thread safety: pure launchers over caller-owned device buffers.
#ifndef GIFT_CLIENT_DEVICE_OPS_H_
#define GIFT_CLIENT_DEVICE_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/fp4.h"
#include "kernels/fp8.h"
#include "kernels/gpu.h"

namespace gift::client::device {

// x[i] = x[i] / w (IEEE division).
absl::Status Divide(gpu::Context& ctx, float* x, int64_t n, float w);
// acc[i] = acc[i] + x[i].
absl::Status AddInPlace(gpu::Context& ctx, float* acc, const float* x,
                        int64_t n);
// VectorMath::AddCapped (fp8_backend_math.h); sums: 4 doubles of scratch.
absl::Status AddCapped(gpu::Context& ctx, float* acc, const float* res,
                       int64_t n, float cap, double* sums, float* keep);
// *flag = 1 when any x[0, n) is NaN or infinite (never cleared here).
absl::Status FlagNonFinite(gpu::Context& ctx, const float* x, int64_t n,
                           uint8_t* flag);
// *flag = 1 when the 4-bit segment is flagged non-finite: any of its n
// block-scale codes is f's flag or a garbage code (kernels::IsFp4NaNScale),
// or (nvfp4) the tensor scale, one device float, is invalid
// (kernels::IsNvfp4TensorScaleValid). As kernels::Fp4SegmentFlagged; never
// cleared here. tensor_scale: nvfp4 only (nullable for mxfp4).
absl::Status FlagNonFiniteFp4(gpu::Context& ctx, const uint8_t* block_scales,
                              int64_t n, const float* tensor_scale,
                              kernels::Fp4Format f, uint8_t* flag);
// x[i] = 0x7FC00000.
absl::Status FillNaN(gpu::Context& ctx, float* x, int64_t n);
// Round to nearest even, NaN → (bits >> 16) | 0x40, as the host.
absl::Status ToBf16(gpu::Context& ctx, const float* x, int64_t n,
                    uint16_t* out);
absl::Status FromBf16(gpu::Context& ctx, const uint16_t* x, int64_t n,
                      float* out);
// sums[0] += Σ(xhat − x)², sums[1] += Σx² (doubles; order is not fixed).
absl::Status AddSquaredError(gpu::Context& ctx, const float* x,
                             const float* xhat, int64_t n, double* sums);
// sums[0] += Σ(x − ref)², sums[1] += Σref², sums[2] += Σx·ref (doubles).
absl::Status AddComparison(gpu::Context& ctx, const float* ref, const float* x,
                           int64_t n, double* sums);

// nccl-fp8: *amax = max |x| over finite elements, or +Inf when any element is
// NaN or infinite. *amax must hold 0 (or a lower bound) before the call.
absl::Status AbsMax(gpu::Context& ctx, const float* x, int64_t n, float* amax);
// With s = (amax == 0 ? 1 : w · amax / fmax) read from device memory:
// codes[i] = fp8(x[i] / s) (satfinite; amax = +Inf gives any codes).
absl::Status EncodeScaled(gpu::Context& ctx, const float* x, int64_t n,
                          kernels::Fp8Format f, const float* amax, float w,
                          uint8_t* codes);
// out[i] = (float(codes[i]) · s) / w with s as above; NaN when amax is not
// finite (the non-finite flag of the nccl-fp8 path).
absl::Status DecodeScaled(gpu::Context& ctx, const uint8_t* codes, int64_t n,
                          kernels::Fp8Format f, const float* amax, float w,
                          float* out);

}  // namespace gift::client::device

#endif  // GIFT_CLIENT_DEVICE_OPS_H_
