#include "client/host_fp8_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/probe.h"
#include "kernels/wire_format.h"

namespace gift::client {
namespace {

class HostBuffer : public Fp8Buffer {
 public:
  absl::Status Resize(size_t bytes) override {
    if (bytes != bytes_) data_.resize((bytes + 3) / 4);
    bytes_ = bytes;
    return absl::OkStatus();
  }
  absl::Status Zero() override {
    std::fill(data_.begin(), data_.end(), 0.0f);
    return absl::OkStatus();
  }
  void* data() override { return data_.data(); }
  size_t bytes() const override { return bytes_; }

 private:
  std::vector<float> data_;  // floats keep the buffer 4-byte aligned
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<Fp8Buffer> HostMemory::NewBuffer() {
  return std::make_unique<HostBuffer>();
}

absl::Status HostMemory::Zero(void* p, size_t bytes) {
  if (bytes > 0) std::memset(p, 0, bytes);
  return absl::OkStatus();
}

absl::Status HostFp8Codec::BeginRound(int stat_slots, int flags) {
  stats_.assign(stat_slots, kernels::QuantizeStats());
  flags_.assign(flags, 0);
  return absl::OkStatus();
}

absl::Status HostFp8Codec::CheckSlot(const char* what, int stat_slot) const {
  if (stat_slot >= static_cast<int>(stats_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": stat slot ", stat_slot, " of ", stats_.size()));
  }
  return absl::OkStatus();
}

absl::Status HostFp8Codec::CheckFlag(const char* what, int flag) const {
  if (flag < 0 || flag >= static_cast<int>(flags_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": flag ", flag, " of ", flags_.size()));
  }
  return absl::OkStatus();
}

absl::Status HostFp8Codec::Quantize(const float* x, int64_t n,
                                    const kernels::QuantizeSpec& spec,
                                    uint8_t* codes, float* scales,
                                    float* residual, int stat_slot) {
  if (absl::Status s = CheckSlot("Quantize", stat_slot); !s.ok()) return s;
  return kernels::Quantize(x, n, spec, codes, scales, residual,
                           stat_slot < 0 ? nullptr : &stats_[stat_slot]);
}

absl::Status HostFp8Codec::Dequantize(const uint8_t* codes, const float* scales,
                                      int64_t n,
                                      const kernels::QuantizeSpec& spec,
                                      float* out) {
  return kernels::Dequantize(codes, scales, n, spec, out);
}

absl::Status HostFp8Codec::Accumulate(const kernels::Fp8Source* sources,
                                      int num_sources, int64_t n,
                                      const kernels::QuantizeSpec& spec,
                                      float* acc) {
  return kernels::DequantizeAccumulate(sources, num_sources, n, spec, true,
                                       acc);
}

absl::Status HostFp8Codec::FlagNonFinite(const float* x, int64_t n, int flag) {
  if (absl::Status s = CheckFlag("FlagNonFinite", flag); !s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      flags_[flag] = 1;
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status HostFp8Codec::QuantizeFp4(const float* x, int64_t n,
                                       kernels::Fp4Format f, uint8_t* codes,
                                       uint8_t* block_scales,
                                       float* tensor_scale, float* residual,
                                       int stat_slot) {
  if (absl::Status s = CheckSlot("QuantizeFp4", stat_slot); !s.ok()) return s;
  return kernels::QuantizeFp4(x, n, f, codes, block_scales, tensor_scale,
                              residual,
                              stat_slot < 0 ? nullptr : &stats_[stat_slot]);
}

absl::Status HostFp8Codec::DequantizeFp4(const uint8_t* codes,
                                         const uint8_t* block_scales,
                                         const float* tensor_scale, int64_t n,
                                         kernels::Fp4Format f, float* out) {
  return kernels::DequantizeFp4(codes, block_scales, tensor_scale, n, f, out);
}

absl::Status HostFp8Codec::AccumulateFp4(const kernels::Fp4Source* sources,
                                         int num_sources, int64_t n,
                                         kernels::Fp4Format f, float* acc) {
  return kernels::DequantizeAccumulateFp4(sources, num_sources, n, f, true,
                                          acc);
}

absl::Status HostFp8Codec::FlagNonFiniteFp4(const uint8_t* block_scales,
                                            int64_t n,
                                            const float* tensor_scale,
                                            kernels::Fp4Format f, int flag) {
  if (absl::Status s = CheckFlag("FlagNonFiniteFp4", flag); !s.ok()) return s;
  if (f == kernels::Fp4Format::kNvfp4 && tensor_scale == nullptr) {
    return absl::InvalidArgumentError(
        "FlagNonFiniteFp4: nvfp4 needs its "
        "tensor scale");
  }
  if (kernels::Fp4SegmentFlagged(block_scales, n, tensor_scale, f)) {
    flags_[flag] = 1;
  }
  return absl::OkStatus();
}

absl::Status HostFp8Codec::EndRound(std::vector<kernels::QuantizeStats>* stats,
                                    std::vector<uint8_t>* flags) {
  *stats = stats_;
  *flags = flags_;
  return absl::OkStatus();
}

absl::Status HostVectorMath::AddInPlace(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
  return absl::OkStatus();
}

absl::Status HostVectorMath::AddCapped(float* acc, const float* res, int64_t n,
                                       float cap, float* keep) {
  double sa = 0, sr = 0;
  for (int64_t i = 0; i < n; ++i) {
    sa += static_cast<double>(acc[i]) * acc[i];
    sr += static_cast<double>(res[i]) * res[i];
  }
  const float f = ReleaseFactor(sa, sr, cap);
  for (int64_t i = 0; i < n; ++i) {
    const float r = f * res[i];
    acc[i] = acc[i] + r;
    keep[i] = res[i] - r;
  }
  return absl::OkStatus();
}

absl::Status HostVectorMath::Divide(float* x, int64_t n, float w) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / w;
  return absl::OkStatus();
}

absl::Status HostVectorMath::FillNaN(float* x, int64_t n) {
  std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
  return absl::OkStatus();
}

absl::Status HostVectorMath::ToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    uint32_t u;
    std::memcpy(&u, &x[k], 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
      out[k] = static_cast<uint16_t>((u >> 16) | 0x40);
      continue;
    }
    u += 0x7FFFu + ((u >> 16) & 1u);
    out[k] = static_cast<uint16_t>(u >> 16);
  }
  return absl::OkStatus();
}

absl::Status HostVectorMath::FromBf16(const uint16_t* x, int64_t n,
                                      float* out) {
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t u = static_cast<uint32_t>(x[k]) << 16;
    std::memcpy(&out[k], &u, 4);
  }
  return absl::OkStatus();
}

absl::Status HostLayerProbe::Probe(const float* grad, const BucketLayer& layer,
                                   const LayerFactor& factor,
                                   ProbeResult* result) {
  return ProbeLayer(grad, layer, factor, transformer_, result);
}

absl::Status HostComparator::BeginCompare(int slots) {
  if (slots < 0) return absl::InvalidArgumentError("BeginCompare: slots < 0");
  compare_.assign(slots, kernels::QuantizeStats());
  return absl::OkStatus();
}

absl::Status HostComparator::Compare(const float* ref, const float* x,
                                     int64_t n, int slot) {
  if (slot < 0 || slot >= static_cast<int>(compare_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Compare: slot ", slot, " of ", compare_.size()));
  }
  double err = 0, ref_sq = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], v = x[i], d = v - r;
    err += d * d;
    ref_sq += r * r;
    dot += v * r;
  }
  kernels::QuantizeStats& s = compare_[slot];
  s.err_sq += err;
  s.x_sq += ref_sq;
  s.xhat_x += dot;
  return absl::OkStatus();
}

absl::Status HostComparator::EndCompare(
    std::vector<kernels::QuantizeStats>* sums) {
  *sums = compare_;
  return absl::OkStatus();
}

}  // namespace gift::client
