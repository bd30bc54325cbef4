// Whitening transforms applied to a weight gradient W (rows = d_out,
// cols = d_in, row-major) on the hot path (DESIGN §2).
//
// Low-rank: out = X + ((X U) diag(c)) Uᵀ + add, with U d_in × r (row-major)
// orthonormal columns and c the r coefficients. With c = √(σ²/λ') − 1 this
// is X·T (forward), with c⁻ = √(λ'/σ²) − 1 it is X·T⁻¹ (inverse). The
// optional `add` (rows × d_in, nullable) fuses error feedback into the
// forward side: Ũ = W T + R. Never forms a d_in × d_in matrix; cost
// 4·rows·d_in·r flops. Dense (the `full` transform): out = X T + add with T
// d_in × d_in (row-major).
//
// Residual re-projection at a factor switch v → v′ (in place):
//   R ← (R T_v⁻¹) T_v′.
//
// Arithmetic is float32 GEMMs (cuBLAS on the GPU; on the CPU a tiled AVX2 +
// FMA kernel, or whole-matrix Eigen GEMMs on CPUs without AVX2); results
// agree to GEMM rounding, not bitwise. The CPU low-rank kernel makes one pass
// over the rows in blocks of 96: P_b = (X_b U) diag(c) into the workspace,
// then out_b = X_b + add_b + P_b Uᵀ written once while X_b is in cache (no
// element-wise pass, no allocation; a 32 KiB stack buffer holds a transposed
// chunk of U; r > 512 takes the Eigen path). Per transform it runs at about the
// speed of the two plain sgemm calls of the same shapes
// (bench/whiten_bench.cc).
//
//   LowRankView f{u, c, d_in, r};
//   std::vector<float> ws(WhitenWorkspaceFloats(rows, d_in, r));
//   RETURN_IF_ERROR(ApplyLowRank(w, rows, f, residual, out, ws.data()));
//
// Thread safety: pure functions over caller-owned buffers.
#ifndef GIFT_KERNELS_WHITEN_H_
#define GIFT_KERNELS_WHITEN_H_

#include <cstdint>

#include "absl/status/status.h"

namespace gift::gpu {
class Context;
}

namespace gift::kernels {

// A low-rank factor as the kernels see it. REQUIRES: 0 <= r <= d.
struct LowRankView {
  const float* u = nullptr;  // d × r, row-major
  const float* c = nullptr;  // r
  int64_t d = 0;
  int64_t r = 0;
};

// Floats of scratch that ApplyLowRank / ReprojectResidual need for `rows`
// rows: rows·r for ApplyLowRank, rows·d + rows·r for ReprojectResidual. The
// value returned, rows·(d + r), is enough for either; for ReprojectResidual
// pass r = max(old_inverse.r, new_forward.r). 0 for negative arguments.
int64_t WhitenWorkspaceFloats(int64_t rows, int64_t d, int64_t r);

// out (rows × d) = x + ((x U) diag(c)) Uᵀ + add. out may alias x or add
// (the same buffer; not a partial overlap). add may be null.
absl::Status ApplyLowRank(const float* x, int64_t rows, const LowRankView& f,
                          const float* add, float* out, float* workspace);

// out (rows × d) = x T + add, T d × d row-major. out must not alias x.
absl::Status ApplyDense(const float* x, int64_t rows, int64_t d, const float* t,
                        const float* add, float* out);

// residual (rows × d) ← (residual T_old⁻¹) T_new, where old_inverse carries
// c⁻ of the old factor and new_forward c of the new one.
absl::Status ReprojectResidual(float* residual, int64_t rows,
                               const LowRankView& old_inverse,
                               const LowRankView& new_forward,
                               float* workspace);

namespace internal {
// Argument checks shared by the CPU and CUDA launchers: INVALID_ARGUMENT for
// negative sizes, r > d, a null pointer where data is needed, or (dense) out
// aliasing x. They read no data, so device pointers are fine.
absl::Status CheckLowRankArgs(const float* x, int64_t rows,
                              const LowRankView& f, const float* out,
                              const float* workspace);
absl::Status CheckDenseArgs(const float* x, int64_t rows, int64_t d,
                            const float* t, const float* out);
absl::Status CheckReprojectArgs(const float* residual, int64_t rows,
                                const LowRankView& old_inverse,
                                const LowRankView& new_forward,
                                const float* workspace);

// ApplyLowRank's portable path (whole-matrix Eigen GEMMs), which CPUs without
// AVX2 take; same contract. For tests and benchmarks.
absl::Status ApplyLowRankPortable(const float* x, int64_t rows,
                                  const LowRankView& f, const float* add,
                                  float* out, float* workspace);
}  // namespace internal

namespace cuda {
// Device pointers; queued on ctx's stream (cuBLAS bound to it). Same
// contracts and workspace sizes as the CPU functions above.
absl::Status ApplyLowRank(gpu::Context& ctx, const float* x, int64_t rows,
                          const LowRankView& f, const float* add, float* out,
                          float* workspace);
absl::Status ApplyDense(gpu::Context& ctx, const float* x, int64_t rows,
                        int64_t d, const float* t, const float* add,
                        float* out);
absl::Status ReprojectResidual(gpu::Context& ctx, float* residual, int64_t rows,
                               const LowRankView& old_inverse,
                               const LowRankView& new_forward,
                               float* workspace);
}  // namespace cuda

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_WHITEN_H_
