#include "tools/fidelity/codec.h"

#include "common/status_macros.h"
#include "kernels/accumulate.h"
#include "kernels/quantize_fp4.h"

namespace gift::fidelity {

absl::Status Encode(const float* x, int64_t n, const WireSpec& spec,
                    float* residual, Encoded* out) {
  if (spec.format.is_fp4()) {
    const kernels::Fp4Format f = spec.format.fp4();
    out->codes.assign(kernels::Fp4PackedBytes(n), 0);
    out->block_scales.assign(kernels::Fp4NumBlocks(n, f), 0);
    out->scales.clear();
    return kernels::QuantizeFp4(x, n, f, out->codes.data(),
                                out->block_scales.data(), &out->tensor_scale,
                                residual, nullptr);
  }
  out->codes.assign(n, 0);
  out->scales.assign(kernels::NumScales(n, spec.block_size), 0.0f);
  out->block_scales.clear();
  return kernels::Quantize(x, n, spec.Fp8Spec(), out->codes.data(),
                           out->scales.data(), residual, nullptr);
}

absl::Status Decode(const Encoded& e, int64_t n, const WireSpec& spec,
                    float* out) {
  if (spec.format.is_fp4()) {
    return kernels::DequantizeFp4(e.codes.data(), e.block_scales.data(),
                                  &e.tensor_scale, n, spec.format.fp4(), out);
  }
  return kernels::Dequantize(e.codes.data(), e.scales.data(), n, spec.Fp8Spec(),
                             out);
}

absl::Status DecodeAccumulate(const std::vector<const Encoded*>& in, int64_t n,
                              const WireSpec& spec, float* acc) {
  const int k = static_cast<int>(in.size());
  if (spec.format.is_fp4()) {
    std::vector<kernels::Fp4Source> sources(k);
    for (int i = 0; i < k; ++i) {
      sources[i] = {in[i]->codes.data(), in[i]->block_scales.data(),
                    &in[i]->tensor_scale};
    }
    return kernels::DequantizeAccumulateFp4(sources.data(), k, n,
                                            spec.format.fp4(), true, acc);
  }
  std::vector<kernels::Fp8Source> sources(k);
  for (int i = 0; i < k; ++i) {
    sources[i] = {in[i]->codes.data(), in[i]->scales.data()};
  }
  return kernels::DequantizeAccumulate(sources.data(), k, n, spec.Fp8Spec(),
                                       true, acc);
}

double EncodedBytes(int64_t n, const WireSpec& spec) {
  if (spec.format.is_fp4()) {
    const kernels::Fp4Format f = spec.format.fp4();
    return static_cast<double>(kernels::WireCodeBytes(spec.format, n)) +
           static_cast<double>(kernels::Fp4NumBlocks(n, f)) +
           (f == kernels::Fp4Format::kNvfp4 ? 4.0 : 0.0);
  }
  return static_cast<double>(n) +
         4.0 * static_cast<double>(kernels::NumScales(n, spec.block_size));
}

}  // namespace gift::fidelity
