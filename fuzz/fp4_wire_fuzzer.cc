// libFuzzer target: the 4-bit decoder of what a rank writes on the wire
// (kernels/quantize_fp4.h, kernels/wire_format.h): a segment's packed E2M1
// codes, its block-scale bytes and (nvfp4) its tensor scale, all from the
// fuzzer, exactly as a chunk owner receives them from another rank.
// Input: byte 0 picks the format (bit 0: nvfp4 / mxfp4), bytes 1–2 the
// element count (little endian, < 2^16), bytes 3–6 the tensor scale's bits,
// then the codes and the block scales (zero-filled when the input is short).
// What it checks beyond "no crash, no sanitizer report":
//  * DequantizeFp4 and DequantizeAccumulateFp4 accept any bytes;
//  * a segment Fp4SegmentFlagged does not flag decodes to finite values only
//    (garbage from a rank ends as a flagged layer, never an unflagged Inf);
//  * one source accumulated onto zeros is 0 + DequantizeFp4 bit for bit, two
//    copies sum to x̂ + x̂ in float (an overflow there is the owner's
//    re-quantization's to flag);
//  * QuantizeFp4 of the decoded values (when unflagged) re-encodes without
//    error and its own output is never flagged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/fp4.h"
#include "kernels/quantize_fp4.h"
#include "kernels/wire_format.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_fp4_wire: invariant violated: %s\n", what);
    std::abort();
  }
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gift::kernels;
  if (size < 7) return 0;
  const Fp4Format f = (data[0] & 1) ? Fp4Format::kMxfp4 : Fp4Format::kNvfp4;
  const int64_t n = data[1] | (int64_t{data[2]} << 8);
  float tensor_scale;
  std::memcpy(&tensor_scale, data + 3, 4);
  const int64_t code_bytes = Fp4PackedBytes(n);
  const int64_t blocks = Fp4NumBlocks(n, f);
  std::vector<uint8_t> wire(code_bytes + blocks, 0);
  const size_t given = std::min<size_t>(size - 7, wire.size());
  if (given > 0) std::memcpy(wire.data(), data + 7, given);
  const uint8_t* codes = wire.data();
  const uint8_t* scales = wire.data() + code_bytes;

  std::vector<float> out(n);
  Check(DequantizeFp4(codes, scales, &tensor_scale, n, f, out.data()).ok(),
        "DequantizeFp4 refused a well-sized segment");
  const bool flagged = Fp4SegmentFlagged(scales, blocks, &tensor_scale, f);
  if (!flagged) {
    for (float v : out) {
      Check(std::isfinite(v), "an unflagged segment decoded to Inf or NaN");
    }
  }

  const Fp4Source src{codes, scales, &tensor_scale};
  std::vector<float> acc(n, 1.0f);
  Check(DequantizeAccumulateFp4(&src, 1, n, f, /*zero_first=*/true, acc.data())
            .ok(),
        "DequantizeAccumulateFp4 refused a well-sized segment");
  for (int64_t i = 0; i < n; ++i) {
    // 0 + x̂: a −0 sums to +0.
    Check(Bits(acc[i]) == Bits(0.0f + out[i]) ||
              (std::isnan(acc[i]) && std::isnan(out[i])),
          "accumulating one source differs from DequantizeFp4");
  }
  const Fp4Source two[2] = {src, src};
  Check(DequantizeAccumulateFp4(two, 2, n, f, true, acc.data()).ok(),
        "DequantizeAccumulateFp4 refused two sources");
  for (int64_t i = 0; i < n; ++i) {
    const float want = (0.0f + out[i]) + out[i];
    Check(
        Bits(acc[i]) == Bits(want) || (std::isnan(acc[i]) && std::isnan(want)),
        "two sources do not sum to x̂ + x̂");
  }

  if (!flagged) {
    std::vector<uint8_t> q(code_bytes), bs(blocks);
    float ts = 0;
    QuantizeStats st;
    Check(QuantizeFp4(out.data(), n, f, q.data(), bs.data(), &ts, nullptr, &st)
              .ok(),
          "QuantizeFp4 refused decoded values");
    Check(st.nonfinite == 0, "decoded values counted non-finite");
    Check(!Fp4SegmentFlagged(bs.data(), blocks, &ts, f),
          "QuantizeFp4 of finite values wrote a flagged segment");
  }
  return 0;
}
