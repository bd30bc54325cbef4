// Fp8Backend on host memory: the CPU kernels (kernels/*.cc) and the
// GiftTransformer; the backend of the Gloo communicator. Create through
// CreateFp8Backend (fp8_backend.h).
//
// Thread safety: not thread-safe.
#ifndef GIFT_CLIENT_HOST_FP8_BACKEND_H_
#define GIFT_CLIENT_HOST_FP8_BACKEND_H_

#include <memory>
#include <vector>

#include "client/fp8_backend.h"
#include "client/gift_transform.h"

namespace gift::client {

class HostFp8Backend : public Fp8Backend {
 public:
  // REQUIRES: comm has host memory and outlives this.
  explicit HostFp8Backend(Communicator* comm) : comm_(comm) {}

  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  std::unique_ptr<Fp8Buffer> NewBuffer() override;
  absl::Status BeginStep() override { return absl::OkStatus(); }
  absl::Status EndStep() override { return absl::OkStatus(); }
  Communicator* control() override { return comm_; }

  absl::Status BeginRound(int stat_slots, int flags) override;
  absl::Status Quantize(const float* x, int64_t n,
                        const kernels::QuantizeSpec& spec, uint8_t* codes,
                        float* scales, float* residual, int stat_slot) override;
  absl::Status Dequantize(const uint8_t* codes, const float* scales, int64_t n,
                          const kernels::QuantizeSpec& spec,
                          float* out) override;
  absl::Status Accumulate(const kernels::Fp8Source* sources, int num_sources,
                          int64_t n, const kernels::QuantizeSpec& spec,
                          float* acc) override;
  absl::Status AddInPlace(float* acc, const float* x, int64_t n) override;
  absl::Status Divide(float* x, int64_t n, float w) override;
  absl::Status FlagNonFinite(const float* x, int64_t n, int flag) override;
  absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                        std::vector<uint8_t>* flags) override;

  absl::Status Zero(void* p, size_t bytes) override;
  absl::Status FillNaN(float* x, int64_t n) override;
  absl::Status ToBf16(const float* x, int64_t n, uint16_t* out) override;
  absl::Status FromBf16(const uint16_t* x, int64_t n, float* out) override;

  absl::Status Forward(const GiftFactor& f, const float* x, int64_t rows,
                       const float* add, float* out) override;
  absl::Status Inverse(const GiftFactor& f, const float* x, int64_t rows,
                       float* out) override;
  absl::Status Reproject(const GiftFactor& old_f, const GiftFactor& new_f,
                         float* residual, int64_t rows) override;
  absl::Status Probe(const float* grad, const LayerSpec& layer,
                     const GiftFactor& factor, ProbeResult* result) override;

  absl::Status BeginCompare(int slots) override;
  absl::Status Compare(const float* ref, const float* x, int64_t n,
                       int slot) override;
  absl::Status EndCompare(std::vector<kernels::QuantizeStats>* sums) override;

 private:
  Communicator* const comm_;
  std::vector<kernels::QuantizeStats> stats_;
  std::vector<kernels::QuantizeStats> compare_;
  std::vector<uint8_t> flags_;
  GiftTransformer transformer_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_HOST_FP8_BACKEND_H_
