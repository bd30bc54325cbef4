// Fp8Backend on host memory: the CPU kernels (kernels/*.cc) and the
// GiftTransformer; the backend of the Gloo communicator. Each part of
// fp8_backend.h is a small class here, usable on its own (e.g. as the
// reference the device backend is tested against); HostFp8Backend bundles
// them. Create through CreateFp8Backend (fp8_backend.h).
//
//   HostFp8Backend host(comm);
//   RETURN_IF_ERROR(host.math().Divide(x, n, 4.0f));
//
// Thread safety: not thread-safe.
#ifndef GIFT_CLIENT_HOST_FP8_BACKEND_H_
#define GIFT_CLIENT_HOST_FP8_BACKEND_H_

#include <memory>
#include <vector>

#include "client/fp8_backend.h"
#include "client/gift_transform.h"

namespace gift::client {

class HostMemory : public BackendMemory {
 public:
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  std::unique_ptr<Fp8Buffer> NewBuffer() override;
  absl::Status Zero(void* p, size_t bytes) override;
};

class HostFp8Codec : public Fp8Codec {
 public:
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
  absl::Status FlagNonFinite(const float* x, int64_t n, int flag) override;
  absl::Status QuantizeFp4(const float* x, int64_t n, kernels::Fp4Format f,
                           uint8_t* codes, uint8_t* block_scales,
                           float* tensor_scale, float* residual,
                           int stat_slot) override;
  absl::Status DequantizeFp4(const uint8_t* codes, const uint8_t* block_scales,
                             const float* tensor_scale, int64_t n,
                             kernels::Fp4Format f, float* out) override;
  absl::Status AccumulateFp4(const kernels::Fp4Source* sources, int num_sources,
                             int64_t n, kernels::Fp4Format f,
                             float* acc) override;
  absl::Status FlagNonFiniteFp4(const uint8_t* block_scales, int64_t n,
                                const float* tensor_scale, kernels::Fp4Format f,
                                int flag) override;
  absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                        std::vector<uint8_t>* flags) override;

 private:
  absl::Status CheckSlot(const char* what, int stat_slot) const;
  absl::Status CheckFlag(const char* what, int flag) const;

  std::vector<kernels::QuantizeStats> stats_;
  std::vector<uint8_t> flags_;
};

class HostVectorMath : public VectorMath {
 public:
  absl::Status AddInPlace(float* acc, const float* x, int64_t n) override;
  absl::Status AddCapped(float* acc, const float* res, int64_t n, float cap,
                         float* keep) override;
  absl::Status Divide(float* x, int64_t n, float w) override;
  absl::Status FillNaN(float* x, int64_t n) override;
  absl::Status ToBf16(const float* x, int64_t n, uint16_t* out) override;
  absl::Status FromBf16(const uint16_t* x, int64_t n, float* out) override;
};

// ProbeLayer (probe.h) with a transformer's scratch.
class HostLayerProbe : public LayerProbe {
 public:
  // REQUIRES: transformer not null, outlives this.
  explicit HostLayerProbe(GiftTransformer* transformer)
      : transformer_(transformer) {}
  absl::Status Probe(const float* grad, const BucketLayer& layer,
                     const LayerFactor& factor, ProbeResult* result) override;

 private:
  GiftTransformer* const transformer_;
};

class HostComparator : public Comparator {
 public:
  absl::Status BeginCompare(int slots) override;
  absl::Status Compare(const float* ref, const float* x, int64_t n,
                       int slot) override;
  absl::Status EndCompare(std::vector<kernels::QuantizeStats>* sums) override;

 private:
  std::vector<kernels::QuantizeStats> compare_;
};

class HostFp8Backend : public Fp8Backend {
 public:
  // REQUIRES: comm has host memory and outlives this.
  explicit HostFp8Backend(Transport* comm) : comm_(comm) {}

  absl::Status BeginStep() override { return absl::OkStatus(); }
  absl::Status EndStep() override { return absl::OkStatus(); }
  Transport* control() override { return comm_; }

  BackendMemory& memory() override { return memory_; }
  Fp8Codec& codec() override { return codec_; }
  VectorMath& math() override { return math_; }
  GiftTransforms& transforms() override { return transformer_; }
  LayerProbe& probe() override { return probe_; }
  Comparator& compare() override { return compare_; }

 private:
  Transport* const comm_;
  HostMemory memory_;
  HostFp8Codec codec_;
  HostVectorMath math_;
  GiftTransformer transformer_;  // also the probe's
  HostLayerProbe probe_{&transformer_};
  HostComparator compare_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_HOST_FP8_BACKEND_H_
