// The comparison part of an Fp8Backend (fp8_backend.h), for audit steps
// (quantized_allreduce.h): the relative L2 error and cosine of vectors
// against references, summed in double per slot where the data lives and
// read back once.
//
//   RETURN_IF_ERROR(cmp.BeginCompare(layers));
//   RETURN_IF_ERROR(cmp.Compare(fp32_avg, applied, n, layer));
//   std::vector<kernels::QuantizeStats> sums;
//   RETURN_IF_ERROR(cmp.EndCompare(&sums));  // sums[layer].RelL2()
//
// Thread safety: not thread-safe; one comparison at a time.
#ifndef GIFT_CLIENT_FP8_BACKEND_COMPARE_H_
#define GIFT_CLIENT_FP8_BACKEND_COMPARE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/quantize.h"

namespace gift::client {

class Comparator {
 public:
  virtual ~Comparator() = default;

  // Clears `slots` comparison slots.
  virtual absl::Status BeginCompare(int slots) = 0;
  // Adds to slot `slot` (doubles): err_sq += Σ(x − ref)², x_sq += Σref²,
  // xhat_x += Σx·ref, so that the slot's QuantizeStats::RelL2() and
  // Cosine() are those of x against the reference ref.
  virtual absl::Status Compare(const float* ref, const float* x, int64_t n,
                               int slot) = 0;
  // Waits for the comparisons and returns every slot's sums (n, upper,
  // lower, nonfinite are 0).
  virtual absl::Status EndCompare(
      std::vector<kernels::QuantizeStats>* sums) = 0;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_COMPARE_H_
