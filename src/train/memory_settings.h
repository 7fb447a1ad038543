// The memory levers of a training step, one group of settings (train/config.h declares each): what
// forward keeps of each layer, where the kept inputs wait, the tiles, ZeRO. The trainer applies
// them (train/step.cpp) and the memory plan (train/memory_plan.h) takes the same group whole.
#pragma once

#include <cstdint>

namespace seqpar {

struct MemorySettings {
  // Keep only each decoder layer's input in forward and recompute the layer in backward
  // (HF's gradient_checkpointing; the same gradients, the activations of one layer at a time).
  bool activation_checkpointing = false;
  // With activation_checkpointing: also keep each layer's attention output and context (q, k, v,
  // the LSE; O(tokens)), so backward recomputes the norms, projections' residual and MLP but not
  // attention or its communication (the costliest part of the recompute at long sequences).
  bool checkpoint_keep_attention = false;
  // With activation_checkpointing: each layer's kept input waits in host memory (pinned) between
  // its forward and backward (LlamaModel::set_checkpoint_offload; ALST's checkpoint offload).
  bool checkpoint_offload = false;
  // Tiled MLP (ALST's TiledMLP): each layer's MLP over tiles of this many tokens of a rank's shard,
  // its [tokens, intermediate] tensors one tile at a time, recomputed in backward. 0: untiled.
  int64_t mlp_tile_tokens = 0;
  // Tiled loss: the LM head and cross-entropy over tiles of this many tokens, never a [tokens,
  // vocab] logits tensor in training steps (evaluation of the recall task still takes whole
  // logits). 0: untiled.
  int64_t loss_tile_tokens = 0;
  // ZeRO (DeepSpeed's zero_optimization.stage): >= 1 shards the AdamW state (moments, f32 master
  // weights) over the world's ranks, each updating its shard of the weights, which are then
  // all-gathered; >= 2 also partitions the gradients (each layer's summed over the world as its
  // backward ends, only the rank's shard kept). Weights are not partitioned (3 runs as 2).
  int zero_stage = 0;

  // InputError naming the setting, the value and the rule (train/config.cpp).
  void validate() const;
};

}  // namespace seqpar
