// ZeRO-3 and parameter offload: the decoder layers' compute weights are not resident in the model
// (LlamaModel::set_layer_weights); this rank stores its pieces of every layer (a shard buffer of the
// per_layer layout, train/zero_shard.h) on the device, or in host memory with parameter offload
// (DeepSpeed's offload_param.device=cpu), and rebuilds a layer in one of two device buffers when the
// model asks for it:
//   several ranks   an all-gather of the layer's pieces over the world (on the current stream,
//                   when the model asks: no prefetch across ranks yet);
//   one rank, host  a copy on a side stream (CopyStream), the next layer's prefetched while the
//                   model computes with this one, ordered by events;
//   one rank, GPU   views of the store itself (nothing moves: the same memory as stage 2).
// A buffer keeps its layer until it is needed for another, so the last layer of forward is still
// there for the first of backward. The optimizer writes the store (AdamW::step_flat's `out`);
// invalidate() then forgets what the buffers hold.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/offload.h"
#include "model/llama.h"
#include "train/zero_shard.h"

namespace seqpar {

class ShardedLayerWeights final : public LayerWeights {
 public:
  // The store is allocated zeroed (host: pinned when `pinned`); fill it (AdamW::write_weights)
  // before the first forward.
  ShardedLayerWeights(Communicator& world, const LlamaConfig& config, const ShardLayout& layout, DType dtype,
                      Device device, bool host, bool pinned);
  ShardedLayerWeights(const ShardedLayerWeights&) = delete;
  ShardedLayerWeights& operator=(const ShardedLayerWeights&) = delete;

  // This rank's pieces of every region, in the layout's order (the embedding's and the tail's too,
  // which the trainer gathers into the model's resident edges).
  const Tensor& store() const { return store_; }
  void invalidate();

  const LlamaLayerParams& acquire(int64_t l, int64_t next) override;
  void release(int64_t l) override;

  // Device bytes of the two layer buffers (0 when the layers are views of the store).
  int64_t buffer_bytes() const;

 private:
  int slot_of(int64_t l) const;
  void fetch(int64_t l, int slot);
  LlamaLayerParams views(int64_t l, const Tensor& region) const;

  Communicator& world_;
  LlamaConfig config_;
  ShardLayout layout_;
  Device device_;
  bool host_;
  Tensor store_;
  std::vector<LlamaLayerParams> store_views_;  // one rank, weights on the device: every layer's
  std::unique_ptr<CopyStream> copies_;         // one rank, host weights
  struct Slot {
    Tensor buffer;  // a layer's region, on the device
    int64_t layer = -1;
    int64_t ticket = -1;  // its copy (one rank, host)
    bool held = false;
    LlamaLayerParams params;
  };
  Slot slots_[2];
};

}  // namespace seqpar
