// The block order of the forward attention kernels (one block per (query tile, head) in a 1-D grid of
// tiles x heads blocks; attn_launch.h says why): heads in sections of `section` heads (whole KV groups, the
// last section possibly smaller), tile-major within a section, the sections one after the other. Header-only,
// host and device, free of CUDA headers, so the CPU tests check the mapping (tests/attention/test_tile_order.cpp).
#pragma once

#if defined(__CUDACC__)
#define SEQPAR_TILE_ORDER_HD __host__ __device__ __forceinline__
#else
#define SEQPAR_TILE_ORDER_HD inline
#endif

namespace seqpar::cuda_attn {

struct TileHead {
  int tile, head;
};

// Block `block` of the grid -> its (tile, head). Every (tile, head) pair is one block's.
SEQPAR_TILE_ORDER_HD TileHead tile_head_of(unsigned block, int tiles, int heads, int section) {
  const unsigned per = static_cast<unsigned>(tiles) * static_cast<unsigned>(section);  // a full section's blocks
  const int first = static_cast<int>(block / per) * section;
  const unsigned r = block % per;
  const int left = heads - first;
  const unsigned n = static_cast<unsigned>(left < section ? left : section);  // this section's heads
  return {static_cast<int>(r / n), first + static_cast<int>(r % n)};
}

}  // namespace seqpar::cuda_attn
