#include "client/device_fp8_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/device_ops.h"
#include "client/staging_communicator.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "kernels/whiten.h"

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

// A factor's arrays on the device.
struct DeviceFactor {
  int64_t version = -1;
  int64_t used = 0;               // the step that last used it
  const float* host_u = nullptr;  // identity of the uploaded arrays
  const float* host_t = nullptr;
  std::unique_ptr<Fp8Buffer> u, c, c_inv, t, t_inv;
};

class DeviceFp8Backend : public Fp8Backend {
 public:
  DeviceFp8Backend(Communicator* comm, std::unique_ptr<gpu::Context> ctx)
      : comm_(comm),
        ctx_(std::move(ctx)),
        stream_(static_cast<cudaStream_t>(ctx_->stream())),
        control_(comm, ctx_->stream()) {
    stats_ = NewBuffer();
    flags_ = NewBuffer();
    scratch_ = NewBuffer();
    tmp_ = NewBuffer();
    probe_codes_ = NewBuffer();
    probe_scales_ = NewBuffer();
    probe_a_ = NewBuffer();
    probe_b_ = NewBuffer();
    sums_ = NewBuffer();
    compare_ = NewBuffer();
  }

  ~DeviceFp8Backend() override {
    // Leave no dangling stream in the communicator; work is complete (every
    // step ends with EndStep), and a later backend sets its own stream.
    (void)ctx_->Synchronize();
    (void)comm_->SetStream(nullptr);
  }

  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  // Also drops the device copies of factors the previous step did not use
  // (replaced versions, and the copies a switch re-projected from).
  absl::Status BeginStep() override {
    ++steps_;
    bool stale = false;
    for (const auto& [key, d] : factors_) stale |= d.used < steps_ - 1;
    if (stale) {
      RETURN_IF_ERROR(ctx_->Synchronize());  // a failed step may be in flight
      std::erase_if(factors_,
                    [&](const auto& e) { return e.second.used < steps_ - 1; });
    }
    return comm_->SetStream(stream_);
  }
  absl::Status EndStep() override { return ctx_->Synchronize(); }
  void* stream() const override { return stream_; }
  Communicator* control() override { return &control_; }
  std::unique_ptr<Fp8Buffer> NewBuffer() override {
    return std::make_unique<DeviceBuffer>(stream_);
  }

  absl::Status BeginRound(int stat_slots, int flags) override {
    num_stats_ = stat_slots;
    num_flags_ = flags;
    RETURN_IF_ERROR(Grow(*stats_, stat_slots * sizeof(kernels::QuantizeStats)));
    RETURN_IF_ERROR(Grow(*flags_, flags));
    RETURN_IF_ERROR(
        Zero(stats_->data(), stat_slots * sizeof(kernels::QuantizeStats)));
    return Zero(flags_->data(), flags);
  }

  absl::Status Quantize(const float* x, int64_t n,
                        const kernels::QuantizeSpec& spec, uint8_t* codes,
                        float* scales, float* residual,
                        int stat_slot) override {
    if (stat_slot >= num_stats_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Quantize: stat slot ", stat_slot, " of ", num_stats_));
    }
    kernels::QuantizeStats* st =
        stat_slot < 0
            ? nullptr
            : static_cast<kernels::QuantizeStats*>(stats_->data()) + stat_slot;
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

  absl::Status AddInPlace(float* acc, const float* x, int64_t n) override {
    return device::AddInPlace(*ctx_, acc, x, n);
  }

  absl::Status Divide(float* x, int64_t n, float w) override {
    return device::Divide(*ctx_, x, n, w);
  }

  absl::Status FlagNonFinite(const float* x, int64_t n, int flag) override {
    if (flag < 0 || flag >= num_flags_) {
      return absl::InvalidArgumentError(
          absl::StrCat("FlagNonFinite: flag ", flag, " of ", num_flags_));
    }
    return device::FlagNonFinite(*ctx_, x, n, flags_->u8() + flag);
  }

  absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                        std::vector<uint8_t>* flags) override {
    stats->resize(num_stats_);
    flags->resize(num_flags_);
    if (num_stats_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(stats->data(), stats_->data(),
                          num_stats_ * sizeof(kernels::QuantizeStats),
                          cudaMemcpyDeviceToHost, stream_));
    }
    if (num_flags_ > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(flags->data(), flags_->data(), num_flags_,
                          cudaMemcpyDeviceToHost, stream_));
    }
    return ctx_->Synchronize();
  }

  absl::Status Zero(void* p, size_t bytes) override {
    if (bytes > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, stream_));
    }
    return absl::OkStatus();
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

  absl::Status Forward(const GiftFactor& f, const float* x, int64_t rows,
                       const float* add, float* out) override {
    ASSIGN_OR_RETURN(DeviceFactor * d, Upload(f));
    if (f.kind == GiftTransform::kFull) {
      return kernels::cuda::ApplyDense(*ctx_, x, rows, f.d_in, d->t->floats(),
                                       add, out);
    }
    ASSIGN_OR_RETURN(float* ws, Scratch(rows, f.d_in, f.r));
    return kernels::cuda::ApplyLowRank(*ctx_, x, rows, View(*d, f, false), add,
                                       out, ws);
  }

  absl::Status Inverse(const GiftFactor& f, const float* x, int64_t rows,
                       float* out) override {
    ASSIGN_OR_RETURN(DeviceFactor * d, Upload(f));
    if (f.kind == GiftTransform::kFull) {
      return kernels::cuda::ApplyDense(*ctx_, x, rows, f.d_in,
                                       d->t_inv->floats(), nullptr, out);
    }
    ASSIGN_OR_RETURN(float* ws, Scratch(rows, f.d_in, f.r));
    return kernels::cuda::ApplyLowRank(*ctx_, x, rows, View(*d, f, true),
                                       nullptr, out, ws);
  }

  // The same steps as GiftTransformer::Reproject.
  absl::Status Reproject(const GiftFactor& old_f, const GiftFactor& new_f,
                         float* residual, int64_t rows) override {
    if (old_f.kind == GiftTransform::kLowRank &&
        new_f.kind == GiftTransform::kLowRank) {
      ASSIGN_OR_RETURN(DeviceFactor * o, Upload(old_f));
      ASSIGN_OR_RETURN(DeviceFactor * n, Upload(new_f));
      ASSIGN_OR_RETURN(float* ws,
                       Scratch(rows, old_f.d_in, std::max(old_f.r, new_f.r)));
      return kernels::cuda::ReprojectResidual(*ctx_, residual, rows,
                                              View(*o, old_f, true),
                                              View(*n, new_f, false), ws);
    }
    const size_t bytes = static_cast<size_t>(rows * old_f.d_in) * sizeof(float);
    RETURN_IF_ERROR(Grow(*tmp_, bytes));
    RETURN_IF_ERROR(Inverse(old_f, residual, rows, tmp_->floats()));
    if (new_f.kind == GiftTransform::kFull) {
      return Forward(new_f, tmp_->floats(), rows, nullptr, residual);
    }
    if (bytes > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          residual, tmp_->data(), bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    return Forward(new_f, residual, rows, nullptr, residual);
  }

  // ProbeLayer's steps on the device; RelL2 sums in double.
  absl::Status Probe(const float* grad, const LayerSpec& layer,
                     const GiftFactor& factor, ProbeResult* result) override {
    RETURN_IF_ERROR(factor.Validate(layer.d_in()));
    const int64_t n = layer.size(), rows = layer.d_out();
    const kernels::QuantizeSpec spec{layer.format, layer.block_size};
    RETURN_IF_ERROR(Grow(*probe_codes_, n));
    RETURN_IF_ERROR(
        Grow(*probe_scales_, kernels::NumScales(n, spec.block_size) * 4));
    RETURN_IF_ERROR(Grow(*probe_a_, n * 4));
    RETURN_IF_ERROR(Grow(*probe_b_, n * 4));
    RETURN_IF_ERROR(Grow(*sums_, 4 * sizeof(double)));
    RETURN_IF_ERROR(sums_->Zero());
    uint8_t* q = probe_codes_->u8();
    float* s = probe_scales_->floats();
    float* a = probe_a_->floats();
    float* b = probe_b_->floats();
    auto* sums = static_cast<double*>(sums_->data());
    RETURN_IF_ERROR(
        kernels::cuda::Quantize(*ctx_, grad, n, spec, q, s, nullptr, nullptr));
    RETURN_IF_ERROR(kernels::cuda::Dequantize(*ctx_, q, s, n, spec, a));
    RETURN_IF_ERROR(device::AddSquaredError(*ctx_, grad, a, n, sums));
    RETURN_IF_ERROR(Forward(factor, grad, rows, nullptr, a));
    RETURN_IF_ERROR(
        kernels::cuda::Quantize(*ctx_, a, n, spec, q, s, nullptr, nullptr));
    RETURN_IF_ERROR(kernels::cuda::Dequantize(*ctx_, q, s, n, spec, a));
    RETURN_IF_ERROR(Inverse(factor, a, rows, b));
    RETURN_IF_ERROR(device::AddSquaredError(*ctx_, grad, b, n, sums + 2));
    double h[4];
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h, sums, sizeof(h), cudaMemcpyDeviceToHost, stream_));
    RETURN_IF_ERROR(ctx_->Synchronize());
    result->euclid_rel_l2 = h[1] > 0 ? std::sqrt(h[0] / h[1]) : 0.0;
    result->gift_rel_l2 = h[3] > 0 ? std::sqrt(h[2] / h[3]) : 0.0;
    return absl::OkStatus();
  }

  absl::Status BeginCompare(int slots) override {
    if (slots < 0) return absl::InvalidArgumentError("BeginCompare: slots < 0");
    num_compare_ = slots;
    RETURN_IF_ERROR(Grow(*compare_, std::max(slots, 1) * 3 * sizeof(double)));
    return Zero(compare_->data(), slots * 3 * sizeof(double));
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
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(h.data(), compare_->data(), h.size() * sizeof(double),
                          cudaMemcpyDeviceToHost, stream_));
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
  // Capacity-only growth for scratch (keeps the allocation when smaller).
  absl::Status Grow(Fp8Buffer& b, size_t bytes) {
    if (b.data() != nullptr && b.bytes() >= bytes) return absl::OkStatus();
    return b.Resize(bytes);
  }

  absl::StatusOr<float*> Scratch(int64_t rows, int64_t d, int64_t r) {
    const int64_t floats = kernels::WhitenWorkspaceFloats(rows, d, r);
    RETURN_IF_ERROR(Grow(*scratch_, std::max<int64_t>(floats, 1) * 4));
    return scratch_->floats();
  }

  static kernels::LowRankView View(DeviceFactor& d, const GiftFactor& f,
                                   bool inverse) {
    return {d.u->floats(), inverse ? d.c_inv->floats() : d.c->floats(), f.d_in,
            f.r};
  }

  absl::Status Put(std::unique_ptr<Fp8Buffer>& dst,
                   const std::vector<float>& src) {
    dst = NewBuffer();
    RETURN_IF_ERROR(dst->Resize(src.size() * sizeof(float)));
    if (!src.empty()) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst->data(), src.data(), src.size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream_));
    }
    return absl::OkStatus();
  }

  // The device copy of f, uploaded on first use. Keyed by the factor object
  // and checked against its version and array addresses, so a factor object
  // that was replaced is uploaded again. Entries live until a step does not
  // use them (BeginStep), so pointers stay valid within a step.
  absl::StatusOr<DeviceFactor*> Upload(const GiftFactor& f) {
    auto it = factors_.find(&f);
    if (it != factors_.end() && it->second.version == f.version &&
        it->second.host_u == f.u.data() && it->second.host_t == f.t.data()) {
      it->second.used = steps_;
      return &it->second;
    }
    if (it != factors_.end()) {
      // A different factor at a recycled address: its arrays may still be
      // read by queued work.
      RETURN_IF_ERROR(ctx_->Synchronize());
      factors_.erase(it);
    }
    DeviceFactor& d = factors_[&f];
    d.used = steps_;
    d.version = f.version;
    d.host_u = f.u.data();
    d.host_t = f.t.data();
    RETURN_IF_ERROR(Put(d.u, f.u));
    RETURN_IF_ERROR(Put(d.c, f.c));
    RETURN_IF_ERROR(Put(d.c_inv, f.c_inv));
    RETURN_IF_ERROR(Put(d.t, f.t));
    RETURN_IF_ERROR(Put(d.t_inv, f.t_inv));
    return &d;
  }

  Communicator* const comm_;
  std::unique_ptr<gpu::Context> ctx_;
  cudaStream_t stream_;
  StagingCommunicator control_;
  std::unique_ptr<Fp8Buffer> stats_, flags_, scratch_, tmp_;
  std::unique_ptr<Fp8Buffer> probe_codes_, probe_scales_, probe_a_, probe_b_,
      sums_;
  std::unique_ptr<Fp8Buffer> compare_;  // 3 doubles per comparison slot
  int num_compare_ = 0;
  int num_stats_ = 0;
  int num_flags_ = 0;
  int64_t steps_ = 0;
  // Node-based: entries keep their addresses while others come and go.
  std::map<const GiftFactor*, DeviceFactor> factors_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateDeviceFp8Backend(
    Communicator* comm) {
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
