#include "tools/fidelity/workers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/accumulate.h"
#include "tools/fidelity/metrics.h"

namespace gift::fidelity {
namespace {

// The FP8 codes and per-chunk scales one worker sends in phase 1.
struct Outgoing {
  std::vector<uint8_t> codes;
  std::vector<std::vector<float>> scales;  // per chunk
};

// The state that persists across steps: error-feedback residuals.
class QuantizedAllreduce {
 public:
  QuantizedAllreduce(int64_t n, int64_t workers,
                     const kernels::QuantizeSpec& spec, bool error_feedback)
      : n_(n), r_(workers), spec_(spec), ef_(error_feedback) {
    if (ef_) {
      worker_res_.assign(r_, std::vector<float>(n_, 0.0f));
      owner_res_.assign(n_, 0.0f);
    }
  }

  // Phase 1 for worker w on its whitened gradient u (modified in place).
  absl::StatusOr<Outgoing> Send(int64_t w, std::vector<float>& u) {
    Outgoing out;
    out.codes.resize(n_);
    out.scales.resize(r_);
    if (ef_) {
      for (int64_t i = 0; i < n_; ++i) u[i] += worker_res_[w][i];
    }
    for (int64_t j = 0; j < r_; ++j) {
      const int64_t b = ChunkBegin(n_, r_, j),
                    len = ChunkBegin(n_, r_, j + 1) - b;
      out.scales[j].resize(kernels::NumScales(len, spec_.block_size));
      RETURN_IF_ERROR(kernels::Quantize(
          u.data() + b, len, spec_, out.codes.data() + b, out.scales[j].data(),
          ef_ ? worker_res_[w].data() + b : nullptr, nullptr));
    }
    return out;
  }

  // Phase 2 and the receivers' side: the FP32 average every worker gets.
  absl::StatusOr<std::vector<float>> Reduce(const std::vector<Outgoing>& in) {
    std::vector<float> avg(n_);
    std::vector<kernels::Fp8Source> sources(r_);
    for (int64_t j = 0; j < r_; ++j) {
      const int64_t b = ChunkBegin(n_, r_, j),
                    len = ChunkBegin(n_, r_, j + 1) - b;
      for (int64_t w = 0; w < r_; ++w) {
        sources[w] = {in[w].codes.data() + b, in[w].scales[j].data()};
      }
      std::vector<float> sum(len);
      RETURN_IF_ERROR(kernels::DequantizeAccumulate(
          sources.data(), static_cast<int>(r_), len, spec_, true, sum.data()));
      if (ef_) {
        for (int64_t i = 0; i < len; ++i) sum[i] += owner_res_[b + i];
      }
      std::vector<uint8_t> codes(len);
      std::vector<float> scales(kernels::NumScales(len, spec_.block_size));
      RETURN_IF_ERROR(
          kernels::Quantize(sum.data(), len, spec_, codes.data(), scales.data(),
                            ef_ ? owner_res_.data() + b : nullptr, nullptr));
      RETURN_IF_ERROR(kernels::Dequantize(codes.data(), scales.data(), len,
                                          spec_, avg.data() + b));
    }
    const float inv = static_cast<float>(r_);
    for (float& v : avg) v = v / inv;
    return avg;
  }

 private:
  int64_t n_, r_;
  kernels::QuantizeSpec spec_;
  bool ef_;
  std::vector<std::vector<float>> worker_res_;
  std::vector<float> owner_res_;
};

}  // namespace

int64_t ChunkBegin(int64_t n, int64_t workers, int64_t j) {
  return n * j / workers;
}

WireBytes WireBytesPerWorker(int64_t n, int64_t workers, int64_t block_size) {
  int64_t scales = 0;
  for (int64_t j = 0; j < workers; ++j) {
    scales += kernels::NumScales(
        ChunkBegin(n, workers, j + 1) - ChunkBegin(n, workers, j), block_size);
  }
  const double frac = static_cast<double>(workers - 1) / workers;
  WireBytes b;
  // Each phase: (R−1)/R of the elements and of the scales, per worker.
  b.fp8 = 2 * frac * (static_cast<double>(n) + 4.0 * scales);
  b.fp32 = 2 * frac * static_cast<double>(n) * 4;
  return b;
}

absl::StatusOr<std::vector<WorkerStepMetrics>> SimulateWorkers(
    const float* grads, const WorkerShape& s, const Transform& t,
    const kernels::QuantizeSpec& spec, bool error_feedback) {
  const int64_t n = s.d_out * s.d_in;
  if (s.workers < 1 || s.steps < 1 || n < s.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker simulation needs >= 1 worker and step and at least one "
        "element per chunk (workers ",
        s.workers, ", elements ", n, ")"));
  }
  QuantizedAllreduce comm(n, s.workers, spec, error_feedback);
  RowMatrixd sum_hat = RowMatrixd::Zero(s.d_out, s.d_in);
  RowMatrixd sum_ref = RowMatrixd::Zero(s.d_out, s.d_in);
  std::vector<WorkerStepMetrics> out;
  for (int64_t step = 0; step < s.steps; ++step) {
    std::vector<Outgoing> sent;
    RowMatrixd mean = RowMatrixd::Zero(s.d_out, s.d_in);
    for (int64_t w = 0; w < s.workers; ++w) {
      const float* g = grads + (step * s.workers + w) * n;
      const RowMatrixd gd =
          Eigen::Map<const RowMatrixf>(g, s.d_out, s.d_in).cast<double>();
      mean += gd;
      const RowMatrixf u = t.Forward(gd).cast<float>();
      std::vector<float> flat(u.data(), u.data() + n);
      ASSIGN_OR_RETURN(Outgoing o, comm.Send(w, flat));
      sent.push_back(std::move(o));
    }
    mean /= static_cast<double>(s.workers);
    ASSIGN_OR_RETURN(std::vector<float> avg, comm.Reduce(sent));
    const RowMatrixd g_hat =
        t.Backward(Eigen::Map<const RowMatrixf>(avg.data(), s.d_out, s.d_in)
                       .cast<double>());
    sum_hat += g_hat;
    sum_ref += mean;
    const ErrorMetrics e = CompareTo(g_hat, mean);
    out.push_back({step, e.rel_l2, e.cos, RelativeError(sum_hat, sum_ref)});
  }
  return out;
}

}  // namespace gift::fidelity
