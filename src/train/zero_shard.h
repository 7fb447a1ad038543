// Which elements of the weights' one buffer (LlamaParams::flat_layout) a rank's optimizer keeps,
// and copies between that buffer's coordinates and named tensors that live apart.
//
// A layout cuts regions of the buffer into `world` pieces of `cap` elements each (the last pieces
// shorter or empty); rank r keeps piece r of every region, back to back in its shard buffer (each
// piece at a fixed offset, padded to cap, so every rank's shard has the same layout and one
// all-gather of a region's pieces rebuilds the region):
//   whole       one region, one rank: the optimizer keeps everything (optimizer offload, stage 0)
//   contiguous  one region cut into world pieces (ZeRO-1/2: each rank a contiguous 1/world)
//   per_layer   the embedding, each decoder layer and the tail (final norm, LM head) each cut into
//               world pieces (ZeRO-3: a layer is rebuilt by one all-gather of its region)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/llama.h"

namespace seqpar {

struct ShardLayout {
  struct Region {
    int64_t flat_begin = 0;   // first element in the one buffer
    int64_t len = 0;          // elements
    int64_t cap = 0;          // elements per rank's piece (kFlatAlign multiple)
    int64_t shard_begin = 0;  // where this region's piece starts in a rank's shard buffer
  };
  std::vector<Region> regions;
  int rank = 0, world = 1;
  int64_t total = 0;      // elements of the one buffer
  int64_t shard_len = 0;  // elements of a shard buffer (the sum of the caps)

  static ShardLayout whole(int64_t total);
  static ShardLayout contiguous(int64_t total, int rank, int world);
  static ShardLayout per_layer(const LlamaConfig& config, int rank, int world);

  // Rank r's piece of region k in buffer coordinates [first, second) (empty: first == second).
  std::pair<int64_t, int64_t> piece(size_t k, int r) const;
  std::pair<int64_t, int64_t> piece(size_t k) const { return piece(k, rank); }
  // The region of decoder layer l (per_layer layouts only).
  size_t layer_region(int64_t l) const { return static_cast<size_t>(l + 1); }
};

// A tensor seen through a layout: the whole one buffer (`whole`: element i of the buffer at i), or
// a shard buffer in the layout's order.
struct FlatRef {
  Tensor t;
  bool whole = true;
  // Elements [lo, hi) of the buffer, which lie in this rank's piece of region k.
  Tensor range(const ShardLayout& layout, size_t k, int64_t lo, int64_t hi) const;
};

// The buffer offset of every parameter (LlamaParams::shapes order, each padded to kFlatAlign).
std::vector<std::pair<std::string, int64_t>> flat_offsets(const LlamaConfig& config);
// dst [hi - lo] <- the elements [lo, hi) of `src` seen as the one buffer (gaps zero), converted to
// dst's dtype and device; src's tensors may live apart (undefined ones read as zeros).
void read_flat_range(Tensor& dst, const LlamaParams& src, const LlamaConfig& config, int64_t lo, int64_t hi);
// The reverse: the defined tensors of dst that overlap [lo, hi) take their elements from src.
void write_flat_range(LlamaParams& dst, const Tensor& src, const LlamaConfig& config, int64_t lo, int64_t hi);

}  // namespace seqpar
