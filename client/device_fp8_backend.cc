#include "client/device_fp8_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/device_fp8_backend_transforms.h"
#include "client/device_ops.h"
#include "client/staging_transport.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"

namespace gift::client {
namespace {

// cudaMalloc'd bytes, reallocated when the size changes; Zero is queued on
// the backend's stream.
class DeviceBuffer : public Fp8Buffer {
 public:
  explicit DeviceBuffer(cudaStream_t stream) : stream_(stream) {}
  ~DeviceBuffer() override {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  // Reallocates only to grow: pieces and runs of different sizes reuse one
  // allocation.
  absl::Status Resize(size_t bytes) override {
    if (ptr_ == nullptr || bytes > capacity_) {
      if (ptr_ != nullptr) {
        // Work queued on the stream may still use the old allocation.
        GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
        GIFT_CUDA_RETURN_IF_ERROR(cudaFree(ptr_));
        ptr_ = nullptr;
      }
      capacity_ = std::max<size_t>(bytes, 4);
      GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, capacity_));
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }
  absl::Status Zero() override {
    if (bytes_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr_, 0, bytes_, stream_));
    }
    return absl::OkStatus();
  }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;
};

class DeviceMemory : public BackendMemory {
 public:
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream) {}

  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  std::unique_ptr<Fp8Buffer> NewBuffer() override {
    return std::make_unique<DeviceBuffer>(stream_);
  }
  absl::Status Zero(void* p, size_t bytes) override {
    if (bytes > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, stream_));
    }
    return absl::OkStatus();
  }

 private:
  cudaStream_t stream_;
};

// Per-round statistics and non-finite flags stay on the device until
// EndRound reads them back.
class DeviceFp8Codec : public Fp8Codec {
 public:
  DeviceFp8Codec(gpu::Context* ctx, BackendMemory* memory)
      : ctx_(ctx),
        memory_(memory),
        stats_(memory->NewBuffer()),
        flags_(memory->NewBuffer()) {}

  absl::Status BeginRound(int stat_slots, int flags) override {
    num_stats_ = stat_slots;
    num_flags_ = flags;
    RETURN_IF_ERROR(stats_->Grow(stat_slots * sizeof(kernels::QuantizeStats)));
    RETURN_IF_ERROR(flags_->Grow(flags));
    RETURN_IF_ERROR(memory_->Zero(stats_->data(),
                                  stat_slots * sizeof(kernels::QuantizeStats)));
    return memory_->Zero(flags_->data(), flags);
  }

  absl::Status Quantize(const float* x, int64_t n,
                        const kernels::QuantizeSpec& spec, uint8_t* codes,
                        float* scales, float* residual,
                        int stat_slot) override {
    ASSIGN_OR_RETURN(kernels::QuantizeStats * st,
                     StatSlot("Quantize", stat_slot));
    return kernels::cuda::Quantize(*ctx_, x, n, spec, codes, scales, residual,
                                   st);
  }

  absl::Status Dequantize(const uint8_t* codes, const float* scales, int64_t n,
                          const kernels::QuantizeSpec& spec,
                          float* out) override {
    return kernels::cuda::Dequantize(*ctx_, codes, scales, n, spec, out);
  }

  absl::Status Accumulate(const kernels::Fp8Source* sources, int num_sources,
                          int64_t n, const kernels::QuantizeSpec& spec,
                          float* acc) override {
    return kernels::cuda::DequantizeAccumulate(*ctx_, sources, num_sources, n,
                                               spec, true, acc);
  }

  absl::Status FlagNonFinite(const float* x, int64_t n, int flag) override {
    RETURN_IF_ERROR(CheckFlag("FlagNonFinite", flag));
    return device::FlagNonFinite(*ctx_, x, n, flags_->u8() + flag);
  }

  absl::Status QuantizeFp4(const float* x, int64_t n, kernels::Fp4Format f,
                           uint8_t* codes, uint8_t* block_scales,
                           float* tensor_scale, float* residual,
                           int stat_slot) override {
    ASSIGN_OR_RETURN(kernels::QuantizeStats * st,
                     StatSlot("QuantizeFp4", stat_slot));
    return kernels::cuda::QuantizeFp4(*ctx_, x, n, f, codes, block_scales,
                                      tensor_scale, residual, st);
  }

  absl::Status DequantizeFp4(const uint8_t* codes, const uint8_t* block_scales,
                             const float* tensor_scale, int64_t n,
                             kernels::Fp4Format f, float* out) override {
    return kernels::cuda::DequantizeFp4(*ctx_, codes, block_scales,
                                        tensor_scale, n, f, out);
  }

  absl::Status AccumulateFp4(const kernels::Fp4Source* sources, int num_sources,
                             int64_t n, kernels::Fp4Format f,
                             float* acc) override {
    return kernels::cuda::DequantizeAccumulateFp4(*ctx_, sources, num_sources,
                                                  n, f, true, acc);
  }

  absl::Status FlagNonFiniteFp4(const uint8_t* block_scales, int64_t n,
                                const float* tensor_scale, kernels::Fp4Format f,
                                int flag) override {
    RETURN_IF_ERROR(CheckFlag("FlagNonFiniteFp4", flag));
    return device::FlagNonFiniteFp4(*ctx_, block_scales, n, tensor_scale, f,
                                    flags_->u8() + flag);
  }

  absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                        std::vector<uint8_t>* flags) override {
    const cudaStream_t stream = static_cast<cudaStream_t>(ctx_->stream());
    stats->resize(num_stats_);
    flags->resize(num_flags_);
    if (num_stats_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(stats->data(), stats_->data(),
                          num_stats_ * sizeof(kernels::QuantizeStats),
                          cudaMemcpyDeviceToHost, stream));
    }
    if (num_flags_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(flags->data(), flags_->data(), num_flags_,
                          cudaMemcpyDeviceToHost, stream));
    }
    return ctx_->Synchronize();
  }

 private:
  // The device statistics of `stat_slot` (null for -1).
  absl::StatusOr<kernels::QuantizeStats*> StatSlot(const char* what,
                                                   int stat_slot) {
    if (stat_slot >= num_stats_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": stat slot ", stat_slot, " of ", num_stats_));
    }
    if (stat_slot < 0) return static_cast<kernels::QuantizeStats*>(nullptr);
    return static_cast<kernels::QuantizeStats*>(stats_->data()) + stat_slot;
  }
  absl::Status CheckFlag(const char* what, int flag) const {
    if (flag < 0 || flag >= num_flags_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": flag ", flag, " of ", num_flags_));
    }
    return absl::OkStatus();
  }

  gpu::Context* const ctx_;
  BackendMemory* const memory_;
  std::unique_ptr<Fp8Buffer> stats_, flags_;
  int num_stats_ = 0;
  int num_flags_ = 0;
};

class DeviceVectorMath : public VectorMath {
 public:
  DeviceVectorMath(gpu::Context* ctx, BackendMemory* memory)
      : ctx_(ctx), sums_(memory->NewBuffer()) {}

  absl::Status AddInPlace(float* acc, const float* x, int64_t n) override {
    return device::AddInPlace(*ctx_, acc, x, n);
  }
  absl::Status AddCapped(float* acc, const float* res, int64_t n, float cap,
                         float* keep) override {
    RETURN_IF_ERROR(sums_->Grow(4 * sizeof(double)));
    return device::AddCapped(*ctx_, acc, res, n, cap,
                             static_cast<double*>(sums_->data()), keep);
  }
  absl::Status Divide(float* x, int64_t n, float w) override {
    return device::Divide(*ctx_, x, n, w);
  }
  absl::Status FillNaN(float* x, int64_t n) override {
    return device::FillNaN(*ctx_, x, n);
  }
  absl::Status ToBf16(const float* x, int64_t n, uint16_t* out) override {
    return device::ToBf16(*ctx_, x, n, out);
  }
  absl::Status FromBf16(const uint16_t* x, int64_t n, float* out) override {
    return device::FromBf16(*ctx_, x, n, out);
  }

 private:
  gpu::Context* const ctx_;
  std::unique_ptr<Fp8Buffer> sums_;  // AddCapped's 4 doubles
};

// 3 doubles per comparison slot on the device, read back at EndCompare.
class DeviceComparator : public Comparator {
 public:
  DeviceComparator(gpu::Context* ctx, BackendMemory* memory)
      : ctx_(ctx), memory_(memory), compare_(memory->NewBuffer()) {}

  absl::Status BeginCompare(int slots) override {
    if (slots < 0) return absl::InvalidArgumentError("BeginCompare: slots < 0");
    num_compare_ = slots;
    RETURN_IF_ERROR(compare_->Grow(std::max(slots, 1) * 3 * sizeof(double)));
    return memory_->Zero(compare_->data(), slots * 3 * sizeof(double));
  }

  absl::Status Compare(const float* ref, const float* x, int64_t n,
                       int slot) override {
    if (slot < 0 || slot >= num_compare_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Compare: slot ", slot, " of ", num_compare_));
    }
    return device::AddComparison(
        *ctx_, ref, x, n, static_cast<double*>(compare_->data()) + 3 * slot);
  }

  absl::Status EndCompare(std::vector<kernels::QuantizeStats>* sums) override {
    std::vector<double> h(3 * num_compare_);
    if (num_compare_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          h.data(), compare_->data(), h.size() * sizeof(double),
          cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(ctx_->stream())));
    }
    RETURN_IF_ERROR(ctx_->Synchronize());
    sums->assign(num_compare_, kernels::QuantizeStats());
    for (int i = 0; i < num_compare_; ++i) {
      (*sums)[i].err_sq = h[3 * i];
      (*sums)[i].x_sq = h[3 * i + 1];
      (*sums)[i].xhat_x = h[3 * i + 2];
    }
    return absl::OkStatus();
  }

 private:
  gpu::Context* const ctx_;
  BackendMemory* const memory_;
  std::unique_ptr<Fp8Buffer> compare_;
  int num_compare_ = 0;
};

// The parts above on one gpu::Context, whose stream is also the
// communicator's.
class DeviceFp8Backend : public Fp8Backend {
 public:
  DeviceFp8Backend(Transport* comm, std::unique_ptr<gpu::Context> ctx)
      : comm_(comm),
        ctx_(std::move(ctx)),
        stream_(static_cast<cudaStream_t>(ctx_->stream())),
        control_(comm, ctx_->stream()),
        memory_(stream_),
        codec_(ctx_.get(), &memory_),
        math_(ctx_.get(), &memory_),
        transforms_(ctx_.get(), &memory_),
        probe_(ctx_.get(), &memory_, &transforms_),
        compare_(ctx_.get(), &memory_) {}

  ~DeviceFp8Backend() override {
    // Leave no dangling stream in the communicator; work is complete (every
    // step ends with EndStep), and a later backend sets its own stream.
    (void)ctx_->Synchronize();
    (void)comm_->SetStream(nullptr);
  }

  absl::Status BeginStep() override {
    RETURN_IF_ERROR(transforms_.BeginStep());
    return comm_->SetStream(stream_);
  }
  absl::Status EndStep() override { return ctx_->Synchronize(); }
  void* stream() const override { return stream_; }
  Transport* control() override { return &control_; }

  BackendMemory& memory() override { return memory_; }
  Fp8Codec& codec() override { return codec_; }
  VectorMath& math() override { return math_; }
  GiftTransforms& transforms() override { return transforms_; }
  LayerProbe& probe() override { return probe_; }
  Comparator& compare() override { return compare_; }

 private:
  Transport* const comm_;
  std::unique_ptr<gpu::Context> ctx_;
  cudaStream_t stream_;
  StagingTransport control_;
  DeviceMemory memory_;
  DeviceFp8Codec codec_;
  DeviceVectorMath math_;
  DeviceGiftTransforms transforms_;
  DeviceLayerProbe probe_;
  DeviceComparator compare_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateDeviceFp8Backend(
    Transport* comm) {
  if (comm == nullptr || comm->memory_kind() != MemoryKind::kDevice) {
    return absl::InvalidArgumentError(
        "CreateDeviceFp8Backend: needs a device-memory communicator");
  }
  int device = 0;
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  ASSIGN_OR_RETURN(std::unique_ptr<gpu::Context> ctx,
                   gpu::Context::Create(device));
  RETURN_IF_ERROR(comm->SetStream(ctx->stream()));
  return std::unique_ptr<Fp8Backend>(
      new DeviceFp8Backend(comm, std::move(ctx)));
}

}  // namespace gift::client
