#include "client/chunking.h"

#include <algorithm>

#include "kernels/quantize.h"
#include "kernels/quantize_fp4.h"

namespace gift::client {

Range BalancedChunk(int64_t n, int w, int j) {
  const int64_t base = n / w, rem = n % w;
  const int64_t begin = j * base + std::min<int64_t>(j, rem);
  return {begin, begin + base + (j < rem ? 1 : 0)};
}

std::vector<Range> SplitIntoPieces(int64_t n, int64_t piece_elements) {
  std::vector<Range> pieces;
  for (int64_t b = 0; b < n; b += piece_elements) {
    pieces.push_back({b, std::min(n, b + piece_elements)});
  }
  return pieces;
}

namespace {

ChunkLayout LayoutChunk(const EpochPlan& plan, Range packed) {
  ChunkLayout chunk;
  chunk.packed = packed;
  const std::vector<BucketLayer>& layers = plan.layers();
  // First layer that ends after the chunk begins (packed offsets ascend).
  int i = 0;
  while (i < static_cast<int>(layers.size()) &&
         plan.packed_offset(i) + layers[i].size() <= packed.begin) {
    ++i;
  }
  for (; i < static_cast<int>(layers.size()); ++i) {
    const int64_t lb = plan.packed_offset(i);
    const int64_t le = lb + layers[i].size();
    if (lb >= packed.end) break;
    const int64_t b = std::max(lb, packed.begin), e = std::min(le, packed.end);
    if (e <= b) continue;  // empty layer
    const kernels::WireFormat f = layers[i].format;
    Segment s;
    s.layer = i;
    s.layer_begin = b - lb;
    s.count = e - b;
    s.elem_offset = b - packed.begin;
    s.code_offset = chunk.code_bytes;
    s.code_bytes = kernels::WireCodeBytes(f, s.count);
    s.scale_offset = chunk.num_scales;
    s.block_scale_offset = chunk.num_block_scales;
    if (f.is_fp4()) {
      s.num_scales = f.fp4() == kernels::Fp4Format::kNvfp4 ? 1 : 0;
      s.num_block_scales = kernels::Fp4NumBlocks(s.count, f.fp4());
    } else {
      s.num_scales = kernels::NumScales(s.count, layers[i].block_size);
    }
    chunk.code_bytes += s.code_bytes;
    chunk.num_scales += s.num_scales;
    chunk.num_block_scales += s.num_block_scales;
    chunk.segments.push_back(s);
  }
  return chunk;
}

}  // namespace

SegmentWire WireOf(uint8_t* chunk, const ChunkLayout& c, const Segment& s) {
  SegmentWire w;
  w.codes = chunk + s.code_offset;
  if (s.num_scales > 0) {
    w.scales = reinterpret_cast<float*>(chunk + c.scales_byte_offset()) +
               s.scale_offset;
  }
  if (s.num_block_scales > 0) {
    w.block_scales =
        chunk + c.block_scales_byte_offset() + s.block_scale_offset;
  }
  return w;
}

PieceLayout LayoutPiece(const EpochPlan& plan, int64_t begin, int64_t end,
                        int w) {
  PieceLayout piece;
  piece.packed = {begin, end};
  piece.chunks.reserve(w);
  for (int j = 0; j < w; ++j) {
    Range r = BalancedChunk(end - begin, w, j);
    piece.chunks.push_back(LayoutChunk(plan, {begin + r.begin, begin + r.end}));
  }
  return piece;
}

}  // namespace gift::client
