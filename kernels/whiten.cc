// CPU reference of the whitening transforms. The low-rank path goes through
// the rows × r product only, never a d × d matrix.
//
// Low-rank, AVX2 + FMA (run-time dispatch, internal::CpuHasAvx2Kernels): one
// pass over the rows in blocks of kBlockRows. Per block, P_b = (X_b U) diag(c)
// (6 × 16 register tiles over the whole depth d; P_b in the workspace), then
// out_b = X_b + add_b + P_b Uᵀ in 6 × 16 tiles whose accumulators start at
// X_b + add_b, with Uᵀ transposed a column chunk at a time into a 32 KiB
// stack buffer. X_b is re-read from cache, and out is written once: no
// element-wise pass, no temporaries beyond the block's P_b. Other CPUs (and
// r > kMaxTiledRank) take the portable path: float32 Eigen GEMMs over the
// whole row-major maps.
#include "kernels/whiten.h"

#include <Eigen/Core>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/fp8.h"  // GIFT_FP8_AVX2, internal::CpuHasAvx2Kernels

namespace gift::kernels {
namespace {

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;
using ConstMapVec = Eigen::Map<const Eigen::VectorXf>;

absl::Status NullError(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is null"));
}

bool Overlaps(const float* a, const float* b, int64_t n) {
  return a != nullptr && b != nullptr && a < b + n && b < a + n;
}

#ifdef GIFT_FP8_AVX2
// The tiled AVX2 path of ApplyLowRank (file comment). Register tiles are
// kMr rows × 16 columns (two vectors): 12 accumulators, as in BLIS's Haswell
// micro-kernel.
constexpr int kMr = 6;
// Rows per block: X_b (kBlockRows · d floats) is read twice, the second time
// from L2/L3; larger blocks amortise the per-block transposes of U.
constexpr int64_t kBlockRows = 96;
// Floats of the stack buffer holding a transposed chunk of U (r × chunk).
constexpr int64_t kUtFloats = 8192;
// Largest rank of the tiled path: the chunk stays at least 16 columns wide.
constexpr int64_t kMaxTiledRank = kUtFloats / 16;

// Lanes [0, n) set, n clamped to [0, 8].
GIFT_AVX2_INLINE __m256i LaneMask(int64_t n) {
  const int32_t k = static_cast<int32_t>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <bool kMasked>
GIFT_AVX2_INLINE __m256 Load(const float* p, __m256i mask) {
  if constexpr (kMasked) return _mm256_maskload_ps(p, mask);
  return _mm256_loadu_ps(p);
}

template <bool kMasked>
GIFT_AVX2_INLINE void Store(float* p, __m256i mask, __m256 v) {
  if constexpr (kMasked) {
    _mm256_maskstore_ps(p, mask, v);
  } else {
    _mm256_storeu_ps(p, v);
  }
}

// p[m][k0 + 0..15] = c[k0 + ..] · Σ_j x[m][j] u[j][k0 + ..] for m < MR, rows
// of x d apart, of u and p r apart; the masks m0, m1 select the columns
// below r when kMasked.
template <int MR, bool kMasked>
GIFT_AVX2_TARGET void ProjectTile(const float* x, int64_t d, const float* u,
                                  const float* c, int64_t r, int64_t k0,
                                  __m256i m0, __m256i m1, float* p) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  const float* up = u + k0;
  for (int64_t j = 0; j < d; ++j, up += r) {
    const __m256 u0 = Load<kMasked>(up, m0);
    const __m256 u1 = Load<kMasked>(up + 8, m1);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * d + j);
      acc[m][0] = _mm256_fmadd_ps(xv, u0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(xv, u1, acc[m][1]);
    }
  }
  const __m256 c0 = Load<kMasked>(c + k0, m0);
  const __m256 c1 = Load<kMasked>(c + k0 + 8, m1);
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    Store<kMasked>(p + m * r + k0, m0, _mm256_mul_ps(acc[m][0], c0));
    Store<kMasked>(p + m * r + k0 + 8, m1, _mm256_mul_ps(acc[m][1], c1));
  }
}

// out[m][0..15] = x[m][..] (+ add[m][..]) + Σ_k p[m][k] ut[k][0..15] for
// m < MR: rows of x, add and out d apart, of p r apart, of ut ut_stride
// apart. Each element of out is written after its x and add were read, so
// out may alias either.
template <int MR, bool kMasked>
GIFT_AVX2_TARGET void ExpandTile(const float* x, const float* add, float* out,
                                 int64_t d, const float* p, int64_t r,
                                 const float* ut, int64_t ut_stride, __m256i m0,
                                 __m256i m1) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    acc[m][0] = Load<kMasked>(x + m * d, m0);
    acc[m][1] = Load<kMasked>(x + m * d + 8, m1);
    if (add != nullptr) {
      acc[m][0] = _mm256_add_ps(acc[m][0], Load<kMasked>(add + m * d, m0));
      acc[m][1] = _mm256_add_ps(acc[m][1], Load<kMasked>(add + m * d + 8, m1));
    }
  }
  for (int64_t k = 0; k < r; ++k, ut += ut_stride) {
    const __m256 u0 = _mm256_loadu_ps(ut);
    const __m256 u1 = _mm256_loadu_ps(ut + 8);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m256 pv = _mm256_broadcast_ss(p + m * r + k);
      acc[m][0] = _mm256_fmadd_ps(pv, u0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(pv, u1, acc[m][1]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    Store<kMasked>(out + m * d, m0, acc[m][0]);
    Store<kMasked>(out + m * d + 8, m1, acc[m][1]);
  }
}

// ProjectTile<MR, kMasked> for MR = mr (1..kMr).
template <bool kMasked>
GIFT_AVX2_INLINE void ProjectRows(int64_t mr, const float* x, int64_t d,
                                  const float* u, const float* c, int64_t r,
                                  int64_t k0, __m256i m0, __m256i m1,
                                  float* p) {
  switch (mr) {
    case 1:
      return ProjectTile<1, kMasked>(x, d, u, c, r, k0, m0, m1, p);
    case 2:
      return ProjectTile<2, kMasked>(x, d, u, c, r, k0, m0, m1, p);
    case 3:
      return ProjectTile<3, kMasked>(x, d, u, c, r, k0, m0, m1, p);
    case 4:
      return ProjectTile<4, kMasked>(x, d, u, c, r, k0, m0, m1, p);
    case 5:
      return ProjectTile<5, kMasked>(x, d, u, c, r, k0, m0, m1, p);
    default:
      return ProjectTile<6, kMasked>(x, d, u, c, r, k0, m0, m1, p);
  }
}

// ExpandTile<MR, kMasked> for MR = mr (1..kMr).
template <bool kMasked>
GIFT_AVX2_INLINE void ExpandRows(int64_t mr, const float* x, const float* add,
                                 float* out, int64_t d, const float* p,
                                 int64_t r, const float* ut, int64_t ut_stride,
                                 __m256i m0, __m256i m1) {
  switch (mr) {
    case 1:
      return ExpandTile<1, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
    case 2:
      return ExpandTile<2, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
    case 3:
      return ExpandTile<3, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
    case 4:
      return ExpandTile<4, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
    case 5:
      return ExpandTile<5, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
    default:
      return ExpandTile<6, kMasked>(x, add, out, d, p, r, ut, ut_stride, m0,
                                    m1);
  }
}

// dst[k][j] = src[j][k] for j, k < 8: rows of src ss apart, of dst ds apart.
GIFT_AVX2_INLINE void Transpose8x8(const float* src, int64_t ss, float* dst,
                                   int64_t ds) {
  __m256 a[8], b[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(src + i * ss);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    b[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
    b[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    a[i] = _mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    a[i + 1] = _mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    a[i + 2] = _mm256_shuffle_ps(b[i + 1], b[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    a[i + 3] = _mm256_shuffle_ps(b[i + 1], b[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ds,
                     _mm256_permute2f128_ps(a[i], a[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ds,
                     _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  }
}

// ut[k][jj] = u[j0 + jj][k] for k < r, jj < nc; columns nc up to the next
// multiple of 16 are zero (ExpandTile reads them, masks them off).
GIFT_AVX2_INLINE void TransposeChunk(const float* u, int64_t r, int64_t j0,
                                     int64_t nc, float* ut, int64_t stride) {
  const int64_t nc8 = nc / 8 * 8, r8 = r / 8 * 8;
  for (int64_t jj = 0; jj < nc8; jj += 8) {
    for (int64_t k = 0; k < r8; k += 8) {
      Transpose8x8(u + (j0 + jj) * r + k, r, ut + k * stride + jj, stride);
    }
  }
  for (int64_t k = 0; k < r; ++k) {
    const int64_t jj_begin = k < r8 ? nc8 : 0;  // the tiles' leftovers
    for (int64_t jj = jj_begin; jj < nc; ++jj) {
      ut[k * stride + jj] = u[(j0 + jj) * r + k];
    }
    for (int64_t jj = nc; jj < (nc + 15) / 16 * 16; ++jj)
      ut[k * stride + jj] = 0;
  }
}

// The AVX2 path of ApplyLowRank; arguments checked, rows > 0, d > 0,
// r <= kMaxTiledRank.
GIFT_AVX2_TARGET void ApplyLowRankTiled(const float* x, int64_t rows,
                                        const LowRankView& f, const float* add,
                                        float* out, float* workspace) {
  const int64_t d = f.d, r = f.r;
  // Columns of Uᵀ per chunk (a multiple of 16; r · chunk <= kUtFloats).
  const int64_t d16 = (d + 15) / 16 * 16;
  const int64_t chunk = r == 0 ? d16 : std::min(kUtFloats / r / 16 * 16, d16);
  alignas(32) float ut[kUtFloats];
  const __m256i all = LaneMask(8);
  for (int64_t b0 = 0; b0 < rows; b0 += kBlockRows) {
    const int64_t nb = std::min(kBlockRows, rows - b0);
    const float* xb = x + b0 * d;
    const float* addb = add == nullptr ? nullptr : add + b0 * d;
    float* ob = out + b0 * d;
    float* p = workspace;  // nb × r: P_b = (X_b U) diag(c)
    for (int64_t i = 0; i < nb; i += kMr) {
      const int64_t mr = std::min<int64_t>(kMr, nb - i);
      for (int64_t k0 = 0; k0 < r; k0 += 16) {
        if (r - k0 >= 16) {
          ProjectRows<false>(mr, xb + i * d, d, f.u, f.c, r, k0, all, all,
                             p + i * r);
        } else {
          ProjectRows<true>(mr, xb + i * d, d, f.u, f.c, r, k0,
                            LaneMask(r - k0), LaneMask(r - k0 - 8), p + i * r);
        }
      }
    }
    // out_b = X_b + add_b + P_b Uᵀ, a chunk of columns at a time.
    for (int64_t j0 = 0; j0 < d; j0 += chunk) {
      const int64_t nc = std::min(chunk, d - j0);
      TransposeChunk(f.u, r, j0, nc, ut, chunk);
      for (int64_t i = 0; i < nb; i += kMr) {
        const int64_t mr = std::min<int64_t>(kMr, nb - i);
        const int64_t at = i * d + j0;
        for (int64_t jj = 0; jj < nc; jj += 16) {
          const float* xt = xb + at + jj;
          const float* addt = addb == nullptr ? nullptr : addb + at + jj;
          if (nc - jj >= 16) {
            ExpandRows<false>(mr, xt, addt, ob + at + jj, d, p + i * r, r,
                              ut + jj, chunk, all, all);
          } else {
            ExpandRows<true>(mr, xt, addt, ob + at + jj, d, p + i * r, r,
                             ut + jj, chunk, LaneMask(nc - jj),
                             LaneMask(nc - jj - 8));
          }
        }
      }
    }
  }
}
#endif  // GIFT_FP8_AVX2

}  // namespace

int64_t WhitenWorkspaceFloats(int64_t rows, int64_t d, int64_t r) {
  if (rows < 0 || d < 0 || r < 0) return 0;
  return rows * (d + r);
}

namespace internal {

absl::Status CheckLowRankArgs(const float* x, int64_t rows,
                              const LowRankView& f, const float* out,
                              const float* workspace) {
  if (rows < 0 || f.d < 0 || f.r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative size: rows=", rows, " d=", f.d, " r=", f.r));
  }
  if (f.r > f.d) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank r=", f.r, " exceeds d=", f.d));
  }
  const bool has_data = rows > 0 && f.d > 0;
  if (has_data && x == nullptr) return NullError("x");
  if (has_data && out == nullptr) return NullError("out");
  if (f.r > 0 && f.d > 0 && f.u == nullptr) return NullError("factor u");
  if (f.r > 0 && f.c == nullptr) return NullError("factor c");
  if (has_data && f.r > 0 && workspace == nullptr)
    return NullError("workspace");
  return absl::OkStatus();
}

absl::Status CheckDenseArgs(const float* x, int64_t rows, int64_t d,
                            const float* t, const float* out) {
  if (rows < 0 || d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative size: rows=", rows, " d=", d));
  }
  if (rows == 0 || d == 0) return absl::OkStatus();
  if (x == nullptr) return NullError("x");
  if (t == nullptr) return NullError("t");
  if (out == nullptr) return NullError("out");
  if (Overlaps(x, out, rows * d)) {
    return absl::InvalidArgumentError("ApplyDense: out must not alias x");
  }
  return absl::OkStatus();
}

absl::Status CheckReprojectArgs(const float* residual, int64_t rows,
                                const LowRankView& old_inverse,
                                const LowRankView& new_forward,
                                const float* workspace) {
  if (old_inverse.d != new_forward.d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor dimensions differ: ", old_inverse.d, " vs ", new_forward.d));
  }
  RETURN_IF_ERROR(
      CheckLowRankArgs(residual, rows, old_inverse, residual, workspace));
  RETURN_IF_ERROR(
      CheckLowRankArgs(residual, rows, new_forward, residual, workspace));
  if (rows > 0 && old_inverse.d > 0 && workspace == nullptr) {
    return NullError("workspace");
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace internal {

absl::Status ApplyLowRankPortable(const float* x, int64_t rows,
                                  const LowRankView& f, const float* add,
                                  float* out, float* workspace) {
  RETURN_IF_ERROR(internal::CheckLowRankArgs(x, rows, f, out, workspace));
  const int64_t d = f.d;
  if (rows == 0 || d == 0) return absl::OkStatus();
  ConstMapMat xm(x, rows, d);
  // P = (X U) diag(c) is computed from x before out is written, so out may
  // alias x (or add).
  if (f.r > 0) {
    ConstMapMat um(f.u, d, f.r);
    MapMat p(workspace, rows, f.r);
    p.noalias() = xm * um;
    p *= ConstMapVec(f.c, f.r).asDiagonal();
  }
  MapMat om(out, rows, d);
  if (add != nullptr) {
    om = xm + ConstMapMat(add, rows, d);  // element-wise: aliasing is safe
  } else if (out != x) {
    om = xm;
  }
  if (f.r > 0) {
    om.noalias() += ConstMapMat(workspace, rows, f.r) *
                    ConstMapMat(f.u, d, f.r).transpose();
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ApplyLowRank(const float* x, int64_t rows, const LowRankView& f,
                          const float* add, float* out, float* workspace) {
#ifdef GIFT_FP8_AVX2
  if (f.r <= kMaxTiledRank && internal::CpuHasAvx2Kernels()) {
    RETURN_IF_ERROR(internal::CheckLowRankArgs(x, rows, f, out, workspace));
    if (rows > 0 && f.d > 0) ApplyLowRankTiled(x, rows, f, add, out, workspace);
    return absl::OkStatus();
  }
#endif
  return internal::ApplyLowRankPortable(x, rows, f, add, out, workspace);
}

absl::Status ApplyDense(const float* x, int64_t rows, int64_t d, const float* t,
                        const float* add, float* out) {
  RETURN_IF_ERROR(internal::CheckDenseArgs(x, rows, d, t, out));
  if (rows == 0 || d == 0) return absl::OkStatus();
  ConstMapMat xm(x, rows, d);
  ConstMapMat tm(t, d, d);
  MapMat om(out, rows, d);
  if (add == nullptr) {
    om.noalias() = xm * tm;
    return absl::OkStatus();
  }
  if (add != out) om = ConstMapMat(add, rows, d);
  om.noalias() += xm * tm;
  return absl::OkStatus();
}

absl::Status ReprojectResidual(float* residual, int64_t rows,
                               const LowRankView& old_inverse,
                               const LowRankView& new_forward,
                               float* workspace) {
  RETURN_IF_ERROR(internal::CheckReprojectArgs(residual, rows, old_inverse,
                                               new_forward, workspace));
  const int64_t d = old_inverse.d;
  if (rows == 0 || d == 0) return absl::OkStatus();
  float* moved = workspace;               // rows × d: R T_old⁻¹
  float* scratch = workspace + rows * d;  // rows × max(r)
  RETURN_IF_ERROR(
      ApplyLowRank(residual, rows, old_inverse, nullptr, moved, scratch));
  return ApplyLowRank(moved, rows, new_forward, nullptr, residual, scratch);
}

}  // namespace gift::kernels
