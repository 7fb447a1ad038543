// One rank's share of training: its model (a replica of the weights), its optimizer (whole, or a
// ZeRO shard) and the one training step every command runs (`seqpar train`, `seqpar fwdbwd`,
// `seqpar bench train`, through train/trainer.h):
//
//   forward_backward  the micro-batches of a step: forward over this rank's shard, backward with
//                     dloss = 1 / (good tokens of the whole step over dp), gradients summed over
//                     the world (dp × sp; layer by layer into this rank's shard under ZeRO-2/3);
//                     the loss token-weighted over the world (torchtitan's forward_backward_step)
//   optimizer_step    the global gradient norm, torch's clip coefficient, AdamW at a given lr and,
//                     under ZeRO, the all-gather of the updated weights (torchtitan's train_step)
//
// The memory levers of the optimizer and the weights (MemorySettings):
//   zero_stage 1/2     a flat AdamW over a contiguous 1/world of the weights' buffer; 2 partitions
//                      the gradients through the model's GradSink;
//   zero_stage 3       the decoder layers' weights leave the model (ShardedLayerWeights: 1/world of
//                      every layer per rank, gathered per layer), AdamW over the same pieces, the
//                      gradients partitioned; the embedding, final norm and LM head stay resident
//                      (all-gathered after each step);
//   offload_optimizer  the AdamW state in host memory, the step streamed (train/optimizer.h);
//   offload_param      (stage 3) the layers' pieces in host memory, copied in per layer.
//
// The trainer owns the loop, the data, evaluation, checkpoints and the metrics; this class
// knows one rank and its collectives only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attention/attention_policy.h"
#include "comm/mesh.h"
#include "data/sp_batch.h"
#include "model/llama.h"
#include "train/layer_weights.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"

namespace seqpar {

struct TrainConfig;

struct StepLoss {
  double loss = 0;          // Σ loss over the world's good tokens / their count (0 with none)
  int64_t good_tokens = 0;  // good tokens of the step over the dp group (the whole batch)
};

class TrainStep {
 public:
  // A rank's model with the config's activation policy and tiles, its weights copied from
  // `initial` (f32, HF names; rounded to bf16 on CUDA), and its optimizer (a ZeRO shard of the
  // world with zero_stage >= 1; partitioned gradients with >= 2).
  TrainStep(Communicator& world, const MeshShape& shape, Device device, const TrainConfig& config,
            const LlamaConfig& model_config, const LlamaParams& initial);
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Forward over this rank's shard of `batch` (loss sums of this rank's tokens; with `logits`, the
  // shard's whole logits [T, V]). The attention object lives until the next forward, since
  // backward must be given the same one.
  LossStats forward(const SpBatch& batch, Tensor* logits = nullptr);
  // One step's micro-batches of this dp rank. Gradients are zeroed first and hold the step's
  // sum over the world afterwards (or this rank's shard of it, under ZeRO-2). With `logits`, the
  // last micro-batch's logits of this rank's shard. With fp16 the backward starts from the loss
  // times the loss scaler's scale, so the gradients are scaled (grad_norm and apply_update unscale).
  StepLoss forward_backward(const std::vector<SpBatch>& micro, Tensor* logits = nullptr);
  // The global gradient norm of forward_backward's gradients before clipping, unscaled (divided by
  // the loss scale): the same value on every rank (computed from gradients already summed over the
  // world; a collective under ZeRO-2). Not finite when a gradient is not (an fp16 overflow).
  double grad_norm();
  // Clip with `norm` (grad_norm's) and AdamW at `lr` on the unscaled gradients, then, under ZeRO,
  // the all-gather of the updated weights. The trainer calls it only when every rank agreed the
  // step is finite. overlap: where the optimizer is offloaded and whole (no ZeRO sharding, no
  // ZeRO-3), its host step runs on while the next step's forward starts (each layer waits for its
  // new weights; the next backward for the whole update); finish_update() waits for it.
  void apply_update(float lr, double norm, bool overlap = false);
  void finish_update() { adamw_->finish(); }
  // fp16's loss scaler (train/loss_scaler.h; disabled, scale 1, otherwise). Every rank holds one and
  // updates it alike (the trainer agrees on the overflow first).
  LossScaler& loss_scaler() { return scaler_; }
  // Every rank's flags combined by max over the world (one all-reduce): a decision every rank then
  // takes the same way (the non-finite guard, a stop requested by a signal).
  std::vector<int32_t> agree(const std::vector<int32_t>& flags);
  // After the optimizer's state was loaded (a resume): the compute weights rewritten from its master
  // weights where the model's params() do not hold them all (ZeRO-3).
  void weights_restored();
  // The rounded weights (whole, f32, on the host) of this rank's model: a collective under ZeRO-3.
  LlamaParams whole_weights();

  // This rank's shard of a batch's logits [T, V] gathered over the SP group, in stream order
  // [padded_len, V] on the host (f32).
  Tensor gather_logits(const SpBatch& batch, const Tensor& logits);

  Communicator& world() { return world_; }
  Device device() const { return device_; }
  DeviceMesh& mesh() { return mesh_; }
  LlamaModel& model() { return model_; }
  AdamW& optimizer() { return *adamw_; }
  ShardedLayerWeights* layer_weights() { return layer_weights_.get(); }
  const LlamaConfig& model_config() const { return model_.config(); }

 private:
  struct Prepared {
    LlamaBatch batch;
    std::unique_ptr<Attention> attention;
  };
  Prepared prepare(const SpBatch& batch);
  void partition_gradients();
  void gather_edges();

  Communicator& world_;
  DeviceMesh mesh_;
  Device device_;
  const TrainConfig& config_;
  LlamaModel model_;
  LossScaler scaler_;
  std::unique_ptr<ShardedLayerWeights> layer_weights_;  // ZeRO-3
  std::unique_ptr<AdamW> adamw_;
  void add_from_device(Tensor& dst, const Tensor& src);

  bool partition_grads_ = false;
  // ZeRO-2/3, offload_gradients: this rank's pieces of the summed gradients, f32 [layout.shard_len]
  // (pinned host memory with offload_gradients).
  Tensor grad_shard_;
  bool host_grads_ = false;                  // offload_gradients
  std::unique_ptr<CopyStream> grad_copies_;  // offload_gradients: the layers' blocks to the host
  Tensor grad_staging_;                      // offload_gradients: a later micro-batch's block, pinned
  int64_t last_grad_copy_ = -1;              // the last copy's ticket
  bool first_micro_ = true;                  // the step's first micro-batch is being backpropagated
  int host_threads_ = 1;                     // CPU threads of the host work (norm, zeroing)
  AttentionPolicy attention_policy_;
  std::unique_ptr<Attention> attention_;
};

}  // namespace seqpar
