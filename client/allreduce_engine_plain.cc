// The plain modes of AllReduceEngine (fp32, bf16): one Transport
// AllReduce SUM per run of adjacent layers, then ÷ W in FP32.
#include <cstdint>
#include <vector>

#include "client/allreduce_engine.h"
#include "common/status_macros.h"

namespace gift::client {

absl::Status AllReduceEngine::RunPlain(float* bucket, const EpochPlan& plan,
                                       StepTelemetry* t) {
  const float w = static_cast<float>(comm_->world_size());
  const std::vector<BucketLayer>& layers = plan.layers();
  for (size_t i = 0; i < layers.size();) {
    // A maximal run of adjacent layers is one call.
    const int64_t begin = layers[i].offset;
    int64_t end = begin + layers[i].size();
    for (++i; i < layers.size() && layers[i].offset == end; ++i) {
      end += layers[i].size();
    }
    const int64_t n = end - begin;
    if (n == 0) continue;
    float* x = bucket + begin;
    if (options_.mode == AllReduceMode::kFp32) {
      RETURN_IF_ERROR(
          comm_->AllReduce(x, x, n, DataType::kFloat32, ReduceOp::kSum));
    } else {
      if (bf16_->bytes() < n * sizeof(uint16_t)) {
        RETURN_IF_ERROR(bf16_->Resize(n * sizeof(uint16_t)));
      }
      auto* bf = static_cast<uint16_t*>(bf16_->data());
      RETURN_IF_ERROR(backend_->math().ToBf16(x, n, bf));
      RETURN_IF_ERROR(
          comm_->AllReduce(bf, bf, n, DataType::kBFloat16, ReduceOp::kSum));
      RETURN_IF_ERROR(backend_->math().FromBf16(bf, n, x));
    }
    RETURN_IF_ERROR(backend_->math().Divide(x, n, w));
  }
  // Non-finite results, for the telemetry.
  RETURN_IF_ERROR(backend_->codec().BeginRound(0, layers.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    RETURN_IF_ERROR(backend_->codec().FlagNonFinite(bucket + layers[i].offset,
                                                    layers[i].size(), i));
  }
  std::vector<kernels::QuantizeStats> unused;
  std::vector<uint8_t> flags;
  RETURN_IF_ERROR(backend_->codec().EndRound(&unused, &flags));
  for (size_t i = 0; i < layers.size(); ++i) {
    t->layers[i].nonfinite_result = flags[i] != 0;
    t->nonfinite_layers += t->layers[i].nonfinite_result;
  }
  return absl::OkStatus();
}

}  // namespace gift::client
