// Activation statistics for the factor refresh (DESIGN §2).
//
// Streaming Nyström sketch: for a batch of sampled input rows a (rows × d,
// row-major) and the published test matrix Ω (d × k, row-major):
//   Y += aᵀ (a Ω)    (d × k, row-major, float32)
//   trace += Σ‖a_i‖² (double), count += rows.
// Full second moment for the `full` transform:
//   A += aᵀ a        (d × d, row-major, float32), same trace and count.
// E[a aᵀ] is then Y / count (resp. A / count); the daemon does that division.
//
// Arithmetic is float32 GEMMs (Eigen / cuBLAS); CPU and GPU agree to GEMM
// rounding.
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_KERNELS_SKETCH_H_
#define GIFT_KERNELS_SKETCH_H_

#include <cstdint>

#include "absl/status/status.h"

namespace gift::gpu {
class Context;
}

namespace gift::kernels {

struct SketchAccumulator {
  float* y = nullptr;        // d × k (sketch) or d × d (second moment)
  double* trace = nullptr;   // one value
  int64_t* count = nullptr;  // one value
};

// Floats of scratch SketchAccumulate needs: rows·k.
int64_t SketchWorkspaceFloats(int64_t rows, int64_t k);

// REQUIRES: rows >= 0, d > 0, k > 0.
absl::Status SketchAccumulate(const float* a, int64_t rows, int64_t d,
                              const float* omega, int64_t k,
                              const SketchAccumulator& acc, float* workspace);

absl::Status SecondMomentAccumulate(const float* a, int64_t rows, int64_t d,
                                    const SketchAccumulator& acc);

namespace internal {
// Argument checks shared by the CPU and CUDA launchers (no data is read):
// INVALID_ARGUMENT for rows < 0, d <= 0, k <= 0 or a null pointer where data
// is needed.
absl::Status CheckSketchArgs(const float* a, int64_t rows, int64_t d,
                             const float* omega, int64_t k,
                             const SketchAccumulator& acc,
                             const float* workspace);
absl::Status CheckSecondMomentArgs(const float* a, int64_t rows, int64_t d,
                                   const SketchAccumulator& acc);
}  // namespace internal

namespace cuda {
// Device pointers (acc's y, trace and count too); queued on ctx's stream.
absl::Status SketchAccumulate(gpu::Context& ctx, const float* a, int64_t rows,
                              int64_t d, const float* omega, int64_t k,
                              const SketchAccumulator& acc, float* workspace);
absl::Status SecondMomentAccumulate(gpu::Context& ctx, const float* a,
                                    int64_t rows, int64_t d,
                                    const SketchAccumulator& acc);
}  // namespace cuda

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_SKETCH_H_
