// One forward + backward (and optionally one optimizer step) of a batch, on 1 or P ranks, with
// everything gathered back into HF's shapes: the numerics check users and tests run against
// Hugging Face transformers (`seqpar fwdbwd`). It is the trainer's step (train/trainer.h,
// Trainer::run_batch) on one given batch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "train/trainer.h"

namespace seqpar {

// input_ids, labels: i32 or i64 [B, S] (HF convention: unshifted labels, -100 ignored); every
// value is checked against the model's vocabulary before any model work. position_ids (optional,
// i32 or i64 [B, S]): packed documents as HF packs them (DataCollatorWithFlattening, what
// flash_attention_2 reads): each document's positions count 0, 1, ..., so a document starts at each
// 0. Documents attend only within themselves and restart their positions (RoPE, GPT-2's wpe rows);
// the target of a document's last token is ignored (HF's packed labels hold -100 at each document's
// first token for the same effect).
// `config` gives the mesh (sp, sp_mode, ulysses_degree, layout; dp 1), the device and transport,
// the memory levers, ZeRO and the optimizer (its lr, no schedule); model_dir, the data source,
// seq_len and micro_batch come from here.
// Returns, in HF shapes and f32: logits [B, S, V], loss [1], grad.<name> for every parameter,
// and with optimizer_step also grad_norm [1] and param.<name> after one AdamW step. Under the
// nccl transport only the leader process (world rank 0) gets them; the others get an empty list.
std::vector<std::pair<std::string, Tensor>> run_fwdbwd(const std::string& model_dir, const Tensor& input_ids,
                                                       const Tensor& labels, const TrainConfig& config,
                                                       bool optimizer_step, const Tensor* position_ids = nullptr);

}  // namespace seqpar
