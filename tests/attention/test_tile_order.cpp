// The forward attention kernels' block order (attention/cuda/tile_order.h): every (tile, head) pair is exactly
// one block's; within a section of heads every head's tile t comes before any head's tile t + 1; the sections
// follow each other, the last one possibly smaller.
#include <gtest/gtest.h>

#include <vector>

#include "attention/cuda/tile_order.h"

namespace seqpar {
namespace {

using cuda_attn::tile_head_of;
using cuda_attn::TileHead;

TEST(TileOrder, EveryTileAndHeadOnceTileMajorWithinSections) {
  struct Case {
    int tiles, heads, section;
  };
  for (const Case c : {Case{86, 32, 24}, Case{86, 32, 32}, Case{342, 32, 4}, Case{5, 12, 12}, Case{7, 12, 6},
                       Case{1, 3, 3}, Case{9, 10, 4}, Case{128, 16, 16}}) {
    SCOPED_TRACE(::testing::Message() << c.tiles << " tiles, " << c.heads << " heads, sections of " << c.section);
    std::vector<int> seen(static_cast<size_t>(c.tiles) * c.heads, 0);
    int last_section = -1, last_tile = -1;
    for (unsigned b = 0; b < static_cast<unsigned>(c.tiles * c.heads); ++b) {
      const TileHead th = tile_head_of(b, c.tiles, c.heads, c.section);
      ASSERT_GE(th.tile, 0);
      ASSERT_LT(th.tile, c.tiles);
      ASSERT_GE(th.head, 0);
      ASSERT_LT(th.head, c.heads);
      ++seen[static_cast<size_t>(th.tile) * c.heads + th.head];
      const int section = th.head / c.section;
      ASSERT_GE(section, last_section) << "sections one after the other";
      if (section == last_section) {
        ASSERT_GE(th.tile, last_tile) << "tile-major within a section";
      }
      last_section = section;
      last_tile = th.tile;
    }
    for (const int n : seen) ASSERT_EQ(n, 1);
  }
  // One section of all heads: block b is tile b / heads of head b % heads.
  const TileHead th = tile_head_of(70, 10, 8, 8);
  EXPECT_EQ(th.tile, 8);
  EXPECT_EQ(th.head, 6);
}

}  // namespace
}  // namespace seqpar
