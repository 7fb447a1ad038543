// The memory levers of a training step, one group of settings (train/config.h declares each): what
// forward keeps of each layer, where the kept inputs wait, the tiles, ZeRO. The trainer applies
// them (train/step.cpp) and the memory plan (train/memory_plan.h) takes the same group whole.
#pragma once

#include <cstdint>
#include <string>

namespace seqpar {

// checkpoint_placement's per-layer form: one of 'g', 'h', 'r' per decoder layer, from a spec as the
// setting takes it (counts expanded, spaces and commas ignored). layers < 0: the syntax only.
// InputError naming the setting, the value and the rule (a count of layers other than `layers`
// included). "" and "auto" are not per-layer forms (the caller resolves them).
std::string expand_checkpoint_placement(const std::string& spec, int64_t layers);
// The short form of an expanded placement ("gggrr" -> "3g2r"), for people and the config.
std::string compact_checkpoint_placement(const std::string& expanded);

// Where offloaded state lives (DeepSpeed's offload_optimizer.device / offload_param.device; its
// "nvme" is refused by the config readers).
enum class OffloadDevice { kNone, kCpu };
const char* offload_device_name(OffloadDevice d);
OffloadDevice parse_offload_device(const std::string& text, const std::string& flag);

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
  // With activation_checkpointing: where each layer's kept input waits, layer by layer
  // (LlamaModel::set_input_placement): "" = all on the GPU (or all in host memory with
  // checkpoint_offload); "auto" = the memory plan chooses for the run's length and its GPU and host
  // memory before the run starts (GPU first, then host, then recompute, the fewest recomputed
  // layers; where every input fits on the GPU, the most top layers not checkpointed that fit in 95%
  // of it); or one letter per decoder layer from the bottom, each optionally after a count: g (GPU),
  // h (host memory), r (not kept: recomputed from the nearest kept input below, or the embedding),
  // f (not checkpointed: the layer keeps everything and its backward recomputes nothing; Megatron's
  // --recompute-num-layers), e.g. "grgrgr...", "16g8h8r", "20g8f". r needs plain checkpointing (not
  // checkpoint_keep_attention).
  std::string checkpoint_placement;
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
  // backward ends, only the rank's shard kept); 3 also partitions the decoder layers' weights (each
  // rank stores 1/world of every layer; a layer is all-gathered before its forward, recompute and
  // backward and dropped after; the embedding, final norm and LM head stay whole).
  int zero_stage = 0;
  // Optimizer offload: the f32 master weights and AdamW moments (this rank's ZeRO share) in host
  // memory, the step run on the CPU layer by layer, streamed through pinned staging buffers.
  OffloadDevice offload_optimizer = OffloadDevice::kNone;
  // With optimizer offload: each decoder layer's f32 gradients go to pinned host memory as its
  // backward ends (summed over the world first), where the CPU step reads them: the GPU keeps one
  // layer's block and the embedding / final norm / LM head gradients instead of the whole f32
  // buffer (4 bytes a parameter: 30 GiB for 8B), at 4 bytes a parameter of host memory.
  bool offload_gradients = false;
  // Parameter offload (needs zero_stage 3): the decoder layers' compute weights (this rank's pieces)
  // in host memory, copied to the GPU per layer, the next one prefetched.
  OffloadDevice offload_param = OffloadDevice::kNone;
  // With offload_param: the host weights pinned (page-locked: asynchronous copies).
  bool offload_param_pin_memory = true;
  // Host memory the run may use (GiB): the plan's host bytes (offload buffers, host optimizer state,
  // host weights, staging) are checked against it before training starts. 0: the machine's
  // MemAvailable (/proc/meminfo; some machines grow their memory lazily, so this is a default).
  double host_memory_gib = 0;

  // InputError naming the setting, the value and the rule (train/config.cpp).
  void validate() const;
};

}  // namespace seqpar
