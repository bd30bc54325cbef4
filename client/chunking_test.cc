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

}  // namespace
}  // namespace gift::client
