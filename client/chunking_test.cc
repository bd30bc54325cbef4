#include "client/chunking.h"

#include <gtest/gtest.h>

#include "common/status_matchers.h"

namespace gift::client {
namespace {

TEST(ChunkingTest, BalancedChunksTileTheRangeAndDifferByAtMostOne) {
  for (int64_t n : {0, 1, 5, 7, 100, 1001}) {
    for (int w : {1, 2, 3, 4, 8, 13}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int j = 0; j < w; ++j) {
        const Range r = BalancedChunk(n, w, j);
        EXPECT_EQ(r.begin, next) << n << " " << w << " " << j;
        EXPECT_GE(r.size(), 0);
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      EXPECT_EQ(next, n) << n << " " << w;
      EXPECT_LE(hi - lo, 1) << n << " " << w;
    }
  }
  // More ranks than elements: the last chunks are empty.
  EXPECT_EQ(BalancedChunk(3, 8, 2).size(), 1);
  EXPECT_EQ(BalancedChunk(3, 8, 3).size(), 0);
  EXPECT_EQ(BalancedChunk(3, 8, 7).begin, 3);
}

TEST(ChunkingTest, PiecesCoverTheBucket) {
  EXPECT_TRUE(SplitIntoPieces(0, 4).empty());
  const std::vector<Range> p = SplitIntoPieces(10, 4);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].begin, 0);
  EXPECT_EQ(p[1].begin, 4);
  EXPECT_EQ(p[2].begin, 8);
  EXPECT_EQ(p[2].end, 10);
  EXPECT_EQ(SplitIntoPieces(8, 4).size(), 2u);
}

EpochPlan Plan() {
  return *EpochPlan::Create(
      0, 40,
      {{.name = "a", .shape = {10}, .offset = 0},
       {.name = "empty", .shape = {0}, .offset = 10},
       {.name = "b", .shape = {2, 7}, .offset = 12, .block_size = 3},
       {.name = "one", .shape = {1}, .offset = 30},
       {.name = "c", .shape = {5}, .offset = 35}});
}

TEST(ChunkingTest, SegmentsAreChunkTimesLayerWithTheirOwnScales) {
  const EpochPlan plan = Plan();
  ASSERT_EQ(plan.communicated_elements(), 30);
  // A piece [3, 30) split 4 ways: 7, 7, 7, 6 elements.
  const PieceLayout piece = LayoutPiece(plan, 3, 30, 4);
  ASSERT_EQ(piece.chunks.size(), 4u);
  // Chunk 0 = packed [3, 10): all in layer a.
  const ChunkLayout& c0 = piece.chunks[0];
  ASSERT_EQ(c0.segments.size(), 1u);
  EXPECT_EQ(c0.segments[0].layer, 0);
  EXPECT_EQ(c0.segments[0].layer_begin, 3);
  EXPECT_EQ(c0.segments[0].count, 7);
  EXPECT_EQ(c0.num_scales, 1);
  // Chunk 1 = packed [10, 17): b elements 0..6, block 3 -> 3 scales; the
  // empty layer contributes nothing.
  const ChunkLayout& c1 = piece.chunks[1];
  ASSERT_EQ(c1.segments.size(), 1u);
  EXPECT_EQ(c1.segments[0].layer, 2);
  EXPECT_EQ(c1.segments[0].num_scales, 3);
  // Chunk 2 = packed [17, 24): b elements 7..13 (3 scales).
  const ChunkLayout& c2 = piece.chunks[2];
  ASSERT_EQ(c2.segments.size(), 1u);
  EXPECT_EQ(c2.segments[0].layer_begin, 7);
  EXPECT_EQ(c2.num_scales, 3);
  // Chunk 3 = packed [24, 30): "one" (1 element) then c (5), one scale each.
  const ChunkLayout& c3 = piece.chunks[3];
  ASSERT_EQ(c3.segments.size(), 2u);
  EXPECT_EQ(c3.segments[0].layer, 3);
  EXPECT_EQ(c3.segments[1].layer, 4);
  EXPECT_EQ(c3.segments[1].code_offset, 1);
  EXPECT_EQ(c3.segments[1].scale_offset, 1);
  EXPECT_EQ(c3.segments[1].count, 5);
  EXPECT_EQ(c3.num_scales, 2);
  EXPECT_EQ(c3.wire_bytes(), 8 + 8);
  int64_t covered = 0;
  for (const ChunkLayout& c : piece.chunks) {
    for (const Segment& s : c.segments) covered += s.count;
    EXPECT_EQ(c.scales_byte_offset() % 4, 0);
    EXPECT_EQ(c.wire_bytes(), c.scales_byte_offset() + 4 * c.num_scales);
  }
  EXPECT_EQ(covered, 27);
}

TEST(ChunkingTest, MoreRanksThanElementsGivesEmptyChunks) {
  const EpochPlan plan = Plan();
  const PieceLayout piece = LayoutPiece(plan, 29, 30, 8);
  EXPECT_EQ(piece.chunks[0].segments.size(), 1u);
  for (int j = 1; j < 8; ++j) {
    EXPECT_TRUE(piece.chunks[j].segments.empty());
    EXPECT_EQ(piece.chunks[j].wire_bytes(), 0);
  }
}

// FP8 "a" (per layer), nvfp4 "nv" (ragged: 37 = 2 blocks + 5), mxfp4 "mx"
// (70 = 2 blocks + 6), and a one-element nvfp4 layer.
EpochPlan MixedPlan() {
  return *EpochPlan::Create(0, 120,
                            {{.name = "a", .shape = {9}, .offset = 0},
                             {.name = "nv",
                              .shape = {37},
                              .offset = 9,
                              .format = kernels::Fp4Format::kNvfp4},
                             {.name = "mx",
                              .shape = {7, 10},
                              .offset = 46,
                              .format = kernels::Fp4Format::kMxfp4},
                             {.name = "one",
                              .shape = {1},
                              .offset = 116,
                              .format = kernels::Fp4Format::kNvfp4}});
}

TEST(ChunkingTest, FourBitSegmentsPackCodesAndByteScales) {
  const EpochPlan plan = MixedPlan();
  ASSERT_EQ(plan.communicated_elements(), 117);
  const PieceLayout whole = LayoutPiece(plan, 0, 117, 1);
  const ChunkLayout& c = whole.chunks[0];
  ASSERT_EQ(c.segments.size(), 4u);
  const Segment &a = c.segments[0], &nv = c.segments[1], &mx = c.segments[2],
                &one = c.segments[3];
  // Codes: 9 + ceil(37/2) + 70/2 + ceil(1/2) bytes, each segment's own.
  EXPECT_EQ(a.code_offset, 0);
  EXPECT_EQ(a.code_bytes, 9);
  EXPECT_EQ(nv.code_offset, 9);
  EXPECT_EQ(nv.code_bytes, 19);
  EXPECT_EQ(mx.code_offset, 28);
  EXPECT_EQ(mx.code_bytes, 35);
  EXPECT_EQ(one.code_offset, 63);
  EXPECT_EQ(one.code_bytes, 1);
  EXPECT_EQ(c.code_bytes, 64);
  // Element offsets stay those of the chunk's FP32 staging.
  EXPECT_EQ(nv.elem_offset, 9);
  EXPECT_EQ(mx.elem_offset, 46);
  EXPECT_EQ(one.elem_offset, 116);
  // Float scales: a's one, nv's tensor scale, none for mx, one's tensor
  // scale.
  EXPECT_EQ(a.num_scales, 1);
  EXPECT_EQ(nv.num_scales, 1);
  EXPECT_EQ(nv.scale_offset, 1);
  EXPECT_EQ(mx.num_scales, 0);
  EXPECT_EQ(one.scale_offset, 2);
  EXPECT_EQ(c.num_scales, 3);
  // Block scales: ceil(37/16) = 3, ceil(70/32) = 3, 1.
  EXPECT_EQ(a.num_block_scales, 0);
  EXPECT_EQ(nv.num_block_scales, 3);
  EXPECT_EQ(mx.block_scale_offset, 3);
  EXPECT_EQ(mx.num_block_scales, 3);
  EXPECT_EQ(one.block_scale_offset, 6);
  EXPECT_EQ(c.num_block_scales, 7);
  // 64 code bytes, 3 floats, 7 scale bytes, padded to 4: 84.
  EXPECT_EQ(c.scales_byte_offset(), 64);
  EXPECT_EQ(c.block_scales_byte_offset(), 76);
  EXPECT_EQ(c.wire_bytes(), 84);
  EXPECT_EQ(nv.payload_bytes(), 19 + 4 + 3);
  EXPECT_EQ(mx.payload_bytes(), 35 + 3);
  // The parts' pointers.
  alignas(4) uint8_t wire[84];
  const SegmentWire w = WireOf(wire, c, mx);
  EXPECT_EQ(w.codes, wire + 28);
  EXPECT_EQ(w.scales, nullptr);
  EXPECT_EQ(w.block_scales, wire + 79);
  const SegmentWire wn = WireOf(wire, c, nv);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(wn.scales), wire + 68);
  EXPECT_EQ(wn.block_scales, wire + 76);
  EXPECT_EQ(WireOf(wire, c, a).block_scales, nullptr);
}

TEST(ChunkingTest, FourBitChunksAreExactAlignedAndRaggedAtSegmentStarts) {
  const EpochPlan plan = MixedPlan();
  for (int w : {1, 2, 3, 4, 7, 200}) {
    const PieceLayout piece = LayoutPiece(plan, 5, 117, w);
    int64_t covered = 0;
    for (const ChunkLayout& c : piece.chunks) {
      int64_t codes = 0, floats = 0, blocks = 0, payload = 0;
      for (const Segment& s : c.segments) {
        const kernels::WireFormat f = plan.layers()[s.layer].format;
        EXPECT_EQ(s.code_offset, codes);
        EXPECT_EQ(s.code_bytes, f.is_fp4() ? (s.count + 1) / 2 : s.count);
        if (f.is_fp4()) {
          // Blocks start at the segment's start: the last one is ragged.
          const int64_t b = kernels::Fp4BlockSize(f.fp4());
          EXPECT_EQ(s.num_block_scales, (s.count + b - 1) / b);
          EXPECT_EQ(s.num_scales,
                    f.fp4() == kernels::Fp4Format::kNvfp4 ? 1 : 0);
        }
        codes += s.code_bytes;
        floats += s.num_scales;
        blocks += s.num_block_scales;
        payload += s.payload_bytes();
        covered += s.count;
      }
      EXPECT_EQ(c.code_bytes, codes);
      const int64_t exact = (codes + 3) / 4 * 4 + 4 * floats + blocks;
      EXPECT_EQ(c.wire_bytes(), (exact + 3) / 4 * 4) << w;
      EXPECT_EQ(c.wire_bytes() % 4, 0);
      EXPECT_LE(c.wire_bytes() - payload, 6);  // at most 3 + 3 padding
      if (c.segments.empty()) EXPECT_EQ(c.wire_bytes(), 0);
    }
    EXPECT_EQ(covered, 112) << w;
  }
}

TEST(ChunkingTest, Fp8ChunksKeepTheirLayout) {
  // The FP8-only layout: codes at their element offsets, scales after the
  // codes padded to 4, nothing else.
  const EpochPlan plan = Plan();
  for (int w : {1, 3, 4, 8}) {
    for (const ChunkLayout& c : LayoutPiece(plan, 0, 30, w).chunks) {
      EXPECT_EQ(c.scales_byte_offset(), (c.packed.size() + 3) / 4 * 4);
      EXPECT_EQ(c.wire_bytes(), c.scales_byte_offset() + 4 * c.num_scales);
      EXPECT_EQ(c.num_block_scales, 0);
      for (const Segment& s : c.segments) {
        EXPECT_EQ(s.code_offset, s.elem_offset);
        EXPECT_EQ(s.code_bytes, s.count);
      }
    }
  }
}

}  // namespace
}  // namespace gift::client
