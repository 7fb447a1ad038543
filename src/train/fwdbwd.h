// One forward + backward (and optionally one optimizer step) of a batch, on 1 or P ranks, with
// everything gathered back into HF's shapes: the numerics check users and tests run against
// Hugging Face transformers (`seqpar fwdbwd`).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "parallel/kernel_policy.h"
#include "parallel/sp_attention.h"
#include "train/job.h"
#include "train/optimizer.h"
#include "train/sp_batch.h"

namespace seqpar {

struct FwdBwdOptions {
  int sp_size = 1;
  SpMode sp_mode = SpMode::kUlysses;
  int ulysses_degree = 0;  // hybrid only
  SpLayout layout = SpLayout::kZigzag;
  bool optimizer_step = false;
  OptimizerConfig optimizer;
  Device device = Device::cpu();
  Transport transport = Transport::kAuto;  // local threads, or one process per rank over NCCL
  bool activation_checkpointing = false;   // keep only each layer's input; recompute in backward
  bool checkpoint_keep_attention = false;  // with checkpointing: also keep attention's output and context
  bool checkpoint_offload = false;         // with checkpointing: the kept inputs wait in host memory
  int64_t mlp_tile_tokens = 0;             // tiled MLP: tokens per tile (0: untiled)
  // The kernel choices (parallel/kernel_policy.h): the attention policy (its backend from
  // --attn-implementation) and the Ulysses head groups; the process-level parts are the caller's.
  KernelPolicy kernels;
};

// input_ids, labels: i32 [B, S] (HF convention: unshifted labels, -100 ignored).
// Returns, in HF shapes and f32: logits [B, S, V], loss [1], grad.<name> for every parameter,
// and with optimizer_step also grad_norm [1] and param.<name> after one AdamW step. Under the
// nccl transport only the leader process (world rank 0) gets them; the others get an empty list.
std::vector<std::pair<std::string, Tensor>> run_fwdbwd(const std::string& model_dir, const Tensor& input_ids,
                                                       const Tensor& labels, const FwdBwdOptions& options);

}  // namespace seqpar
