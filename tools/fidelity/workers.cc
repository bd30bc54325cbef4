#include "tools/fidelity/workers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/fidelity/metrics.h"

namespace gift::fidelity {
namespace {

// The chunks one worker sends in phase 1, each encoded with its own scales.
using Outgoing = std::vector<Encoded>;

// The state that persists across steps: error-feedback residuals.
class QuantizedAllreduce {
 public:
  QuantizedAllreduce(int64_t n, int64_t workers, const WireSpec& spec,
                     bool error_feedback)
      : n_(n), r_(workers), spec_(spec), ef_(error_feedback) {
    if (ef_) {
      worker_res_.assign(r_, std::vector<float>(n_, 0.0f));
      owner_res_.assign(n_, 0.0f);
    }
  }

  // Phase 1 for worker w on its whitened gradient u (modified in place).
  absl::StatusOr<Outgoing> Send(int64_t w, std::vector<float>& u) {
    Outgoing out(r_);
    if (ef_) {
      for (int64_t i = 0; i < n_; ++i) u[i] += worker_res_[w][i];
    }
    for (int64_t j = 0; j < r_; ++j) {
      const int64_t b = ChunkBegin(n_, r_, j),
                    len = ChunkBegin(n_, r_, j + 1) - b;
      RETURN_IF_ERROR(Encode(u.data() + b, len, spec_,
                             ef_ ? worker_res_[w].data() + b : nullptr,
                             &out[j]));
    }
    return out;
  }

  // Phase 2 and the receivers' side: the FP32 average every worker gets.
  absl::StatusOr<std::vector<float>> Reduce(const std::vector<Outgoing>& in) {
    std::vector<float> avg(n_);
    std::vector<const Encoded*> sources(r_);
    for (int64_t j = 0; j < r_; ++j) {
      const int64_t b = ChunkBegin(n_, r_, j),
                    len = ChunkBegin(n_, r_, j + 1) - b;
      for (int64_t w = 0; w < r_; ++w) sources[w] = &in[w][j];
      std::vector<float> sum(len);
      RETURN_IF_ERROR(DecodeAccumulate(sources, len, spec_, sum.data()));
      if (ef_) {
        for (int64_t i = 0; i < len; ++i) sum[i] += owner_res_[b + i];
      }
      Encoded gathered;
      RETURN_IF_ERROR(Encode(sum.data(), len, spec_,
                             ef_ ? owner_res_.data() + b : nullptr, &gathered));
      RETURN_IF_ERROR(Decode(gathered, len, spec_, avg.data() + b));
    }
    const float inv = static_cast<float>(r_);
    for (float& v : avg) v = v / inv;
    return avg;
  }

 private:
  int64_t n_, r_;
  WireSpec spec_;
  bool ef_;
  std::vector<std::vector<float>> worker_res_;
  std::vector<float> owner_res_;
};

}  // namespace

int64_t ChunkBegin(int64_t n, int64_t workers, int64_t j) {
  return n * j / workers;
}

WireBytes WireBytesPerWorker(int64_t n, int64_t workers, const WireSpec& spec) {
  double encoded = 0;
  for (int64_t j = 0; j < workers; ++j) {
    encoded += EncodedBytes(
        ChunkBegin(n, workers, j + 1) - ChunkBegin(n, workers, j), spec);
  }
  const double frac = static_cast<double>(workers - 1) / workers;
  WireBytes b;
  // Each phase: (R−1)/R of the encoded chunks (elements and scales).
  b.fp8 = 2 * frac * encoded;
  b.fp32 = 2 * frac * static_cast<double>(n) * 4;
  return b;
}

WireBytes WireBytesPerWorker(int64_t n, int64_t workers, int64_t block_size) {
  return WireBytesPerWorker(n, workers,
                            WireSpec(kernels::Fp8Format::kE4M3, block_size));
}

absl::StatusOr<std::vector<WorkerStepMetrics>> SimulateWorkers(
    const float* grads, const WorkerShape& s, const Transform& t,
    const WireSpec& spec, bool error_feedback) {
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
