// How a bucket is cut for the two-phase quantized allreduce (DESIGN §3), and
// the wire layout of one chunk.
//
// The communicated elements of a bucket (its layers concatenated, gaps
// dropped: the "packed" index space) are processed in pieces of at most
// `piece_elements`; each piece is one full two-phase round. A piece is split
// into W balanced chunks (sizes differ by at most one element, the first
// n mod W chunks one longer; chunks are empty when W > n); chunk j is owned
// by rank j. Each chunk ∩ layer is a segment with its own scales: FP8 one
// for per-layer granularity, one per block of B elements of the segment for
// block granularity; 4-bit one per block of the format's size, plus (nvfp4)
// the segment's tensor scale. The padding makes every chunk a multiple of 4
// bytes, so each chunk's float scales stay aligned in the staging buffers;
// wire_bytes() is exactly what goes on the wire for the chunk.
//
// Wire format of a chunk (the same in both phases, so the owner re-quantizes
// in place and all-gathers what it received the shape of):
//   [ codes: segments in layer order; FP8 one byte per element, 4-bit
//     ceil(count / 2) bytes (two codes per byte, low nibble first) ]
//   [ zero padding to a multiple of 4 bytes ]
//   [ float scales: segments in layer order; FP8 one per block (blocks in
//     element order), nvfp4 one tensor scale, mxfp4 none ]
//   [ 4-bit block scales: one byte per block, 4-bit segments in layer order ]
//   [ zero padding to a multiple of 4 bytes ]
// A chunk of FP8 layers only is therefore byte-identical to the FP8-only
// layout (codes, padding, float scales; the last two parts are empty). The
// blocks of a 4-bit segment (16 elements for nvfp4, 32 for mxfp4) start at
// the segment's first element, like FP8 blocks; its last block may be
// ragged. A NaN scale (FP8), E4M3 0x7F (nvfp4) or E8M0 0xFF (mxfp4) block
// scale is the non-finite flag of its block (kernels/quantize.h,
// kernels/quantize_fp4.h).
//
//   PieceLayout piece = LayoutPiece(plan, /*begin=*/0, /*end=*/n, world);
//   for (const Segment& s : piece.chunks[j].segments) ...
//
// Thread safety: pure functions.
#ifndef GIFT_CLIENT_CHUNKING_H_
#define GIFT_CLIENT_CHUNKING_H_

#include <cstdint>
#include <vector>

#include "client/epoch_plan.h"

namespace gift::client {

// Half-open range of packed elements.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Chunk j of n elements split W ways. REQUIRES: n >= 0, 0 <= j < w.
Range BalancedChunk(int64_t n, int w, int j);

// Pieces of at most piece_elements covering [0, n); none when n == 0.
// REQUIRES: piece_elements >= 1.
std::vector<Range> SplitIntoPieces(int64_t n, int64_t piece_elements);

// One chunk ∩ layer.
struct Segment {
  int layer = 0;
  // First element of the segment within its layer, and its length (> 0).
  int64_t layer_begin = 0;
  int64_t count = 0;
  // First element of the segment within the chunk (FP32 staging: the
  // owner's sums and residuals).
  int64_t elem_offset = 0;
  // Offsets within the chunk: codes (bytes) and float scales (floats).
  int64_t code_offset = 0;
  int64_t code_bytes = 0;
  int64_t scale_offset = 0;
  int64_t num_scales = 0;
  // 4-bit block scales (bytes, within the block-scale part); 0 for FP8.
  int64_t block_scale_offset = 0;
  int64_t num_block_scales = 0;

  // The segment's payload: codes and scales, without padding.
  int64_t payload_bytes() const {
    return code_bytes + 4 * num_scales + num_block_scales;
  }
};

struct ChunkLayout {
  Range packed;  // within the whole bucket's packed space
  std::vector<Segment> segments;
  int64_t code_bytes = 0;
  int64_t num_scales = 0;        // float scales
  int64_t num_block_scales = 0;  // 4-bit block scale bytes

  // Byte offsets of the parts, and the bytes on the wire (a multiple of 4).
  int64_t scales_byte_offset() const { return (code_bytes + 3) / 4 * 4; }
  int64_t block_scales_byte_offset() const {
    return scales_byte_offset() + 4 * num_scales;
  }
  int64_t wire_bytes() const {
    return (block_scales_byte_offset() + num_block_scales + 3) / 4 * 4;
  }
};

// Pointers to one segment's parts in a chunk's wire bytes (`chunk`: the
// chunk's first byte, 4-byte aligned). scales: the FP8 block scales or the
// nvfp4 tensor scale (null for mxfp4); block_scales: null for FP8.
struct SegmentWire {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  uint8_t* block_scales = nullptr;
};
SegmentWire WireOf(uint8_t* chunk, const ChunkLayout& c, const Segment& s);

struct PieceLayout {
  Range packed;
  std::vector<ChunkLayout> chunks;  // one per rank
};

// Layout of the piece [begin, end) of the plan's packed space for W ranks.
// REQUIRES: 0 <= begin <= end <= plan.communicated_elements(), w >= 1.
PieceLayout LayoutPiece(const EpochPlan& plan, int64_t begin, int64_t end,
                        int w);

}  // namespace gift::client

#endif  // GIFT_CLIENT_CHUNKING_H_
