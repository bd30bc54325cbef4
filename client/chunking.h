// How a bucket is cut for the two-phase quantized allreduce (DESIGN §3), and
// the wire layout of one chunk.
//
// The communicated elements of a bucket (its layers concatenated, gaps
// dropped: the "packed" index space) are processed in pieces of at most
// `piece_elements`; each piece is one full two-phase round. A piece is split
// into W balanced chunks (sizes differ by at most one element, the first
// n mod W chunks one longer; chunks are empty when W > n); chunk j is owned
// by rank j. Each chunk ∩ layer is a segment with its own scales: one for
// per-layer granularity, one per block of B elements of the segment for
// block granularity.
//
// Wire format of a chunk (the same in both phases, so the owner re-quantizes
// in place and all-gathers what it received the shape of):
//   [ codes: one byte per element, segments in layer order ]
//   [ zero padding to a multiple of 4 bytes ]
//   [ scales: float32, segments in layer order, blocks in element order ]
// A NaN scale is the non-finite flag of its block (kernels/quantize.h).
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
  // Offsets within the chunk: codes (bytes = elements) and scales (floats).
  int64_t code_offset = 0;
  int64_t scale_offset = 0;
  int64_t num_scales = 0;
};

struct ChunkLayout {
  Range packed;  // within the whole bucket's packed space
  std::vector<Segment> segments;
  int64_t num_scales = 0;

  // Bytes on the wire: codes, padding, scales.
  int64_t scales_byte_offset() const { return (packed.size() + 3) / 4 * 4; }
  int64_t wire_bytes() const { return scales_byte_offset() + 4 * num_scales; }
};

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
