#include "train/step.h"

#include <algorithm>
#include <cmath>

#include "attention/attention_backend.h"
#include "kernels/ops.h"
#include "parallel/sp_attention.h"
#include "train/trainer.h"

namespace seqpar {

namespace {

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v); }

// The model's memory levers from the config, and its weights from `initial`; returns its weights
// (what the optimizer starts from).
const LlamaParams& prepare_model(LlamaModel& model, const TrainConfig& cfg, const LlamaParams& initial) {
  model.set_activation_policy(
      LlamaModel::policy_for(cfg.memory.activation_checkpointing, cfg.memory.checkpoint_keep_attention));
  model.set_checkpoint_offload(cfg.memory.checkpoint_offload);
  model.set_mlp_tile_tokens(cfg.memory.mlp_tile_tokens);
  model.set_loss_tile_tokens(cfg.memory.loss_tile_tokens);
  auto dst = model.params().named();
  auto src = initial.named();
  for (size_t i = 0; i < dst.size(); ++i) dst[i].second->copy_from(src[i].second->to_dtype(dst[i].second->dtype()));
  return model.params();
}

}  // namespace

// ZeRO stages 1-3 shard the optimizer state over every rank (all hold the same weights); stages
// 2-3 also partition the gradients; weights stay whole (stage 3 runs as 2, with a warning from
// the config).
TrainStep::TrainStep(Communicator& world, const MeshShape& shape, Device device, const TrainConfig& cfg,
                     const LlamaConfig& mc, const LlamaParams& initial)
    : world_(world),
      mesh_(world, shape),
      device_(device),
      config_(cfg),
      model_(mc, device, device.is_cuda() ? DType::kBF16 : DType::kF32),
      adamw_(mc, cfg.optimizer, prepare_model(model_, cfg, initial), device,
             cfg.memory.zero_stage >= 1 ? ZeroShard{world.rank(), world.size()} : ZeroShard{}) {
  // The attention kernels of this run: the process's policy, with attn_implementation's backend on
  // CUDA (the CPU has one attention).
  attention_policy_ = cfg.kernels.attention;
  if (device.is_cuda()) attention_policy_.backend = attention_backend_for(cfg.attn_implementation);
  partition_grads_ = cfg.memory.zero_stage >= 2 && adamw_.sharded();
  if (partition_grads_) partition_gradients();
}

// Partitioned gradients: each layer's are summed over the world as soon as its backward is done
// and only this rank's shard of the gradient buffer is kept, accumulated over micro-batches; the
// embedding, final norm and LM head gradients likewise once the backward is done.
void TrainStep::partition_gradients() {
  grad_shard_ = Tensor::zeros({adamw_.shard_len()}, DType::kF32, device_);
  const LlamaParams::FlatLayout at = LlamaParams::flat_layout(model_.config());  // where each part sits
  const int64_t begin = adamw_.shard_begin(), end = adamw_.shard_end();
  // The part of `t` (at `at` in the whole buffer) inside this rank's shard, added to it.
  auto take = [this, begin, end](const Tensor& t, int64_t offset) {
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + t.numel());
    if (lo >= hi) return;
    Tensor dst = grad_shard_.rows(lo - begin, hi - begin);
    add_inplace(dst, t.view({t.numel()}).rows(lo - offset, hi - offset));
  };
  model_.set_grad_sink([this, take, at](int64_t l, const Tensor& block) {
    if (l >= 0) {
      Tensor b = block;
      world_.all_reduce(b, ReduceOp::kSum);
      take(b, at.layers + l * at.layer_elems);
      return;
    }
    LlamaParams& g = model_.grads();
    for (auto [t, offset] :
         {std::pair<Tensor*, int64_t>{&g.embed_tokens, 0}, {&g.final_norm, at.final_norm}, {&g.lm_head, at.lm_head}}) {
      if (!t->defined()) continue;
      world_.all_reduce(*t, ReduceOp::kSum);
      take(*t, offset);
    }
  });
}

// A micro-batch ready on this rank's device: its tokens uploaded and its attention made, with the
// mask metadata copied to the device (uploads from host memory make the host wait for the device,
// so a step makes all of them before its first forward).
TrainStep::Prepared TrainStep::prepare(const SpBatch& b) {
  const int sp = static_cast<int>(b.shards.size());
  const Shard& sh = b.shards[mesh_.sp_rank()];
  std::vector<TokenMeta> meta;
  for (const Shard& s : b.shards) meta.push_back(shard_token_meta(s));
  const LlamaConfig& mc = model_.config();
  Prepared p;
  if (sp == 1) {
    p.attention = std::make_unique<LocalAttention>(meta[0], attention_policy_);
  } else {
    p.attention = make_sp_attention(mesh_, meta, mc.num_heads, mc.num_kv_heads, attention_policy_,
                                    config_.kernels.ulysses_head_groups);
  }
  p.attention->prepare(device_);
  p.batch = {i32(sh.input_ids).to(device_), i32(sh.position_ids).to(device_), i32(sh.targets).to(device_)};
  return p;
}

LossStats TrainStep::forward(const SpBatch& b, Tensor* logits) {
  Prepared p = prepare(b);
  attention_ = std::move(p.attention);
  LossStats stats = model_.forward(p.batch, *attention_, logits);
  check_device_errors(device_);
  return stats;
}

StepLoss TrainStep::forward_backward(const std::vector<SpBatch>& micro, Tensor* logits) {
  // Every micro-batch uses dloss = 1 / (good tokens of the whole step over the dp group), so the
  // gradients are those of the step's token-weighted mean loss.
  int64_t local_good = 0;
  for (const SpBatch& b : micro) local_good += b.good_tokens;
  Tensor good_t = Tensor::from_vector<int64_t>({1}, {local_good});
  mesh_.dp().all_reduce(good_t, ReduceOp::kSum);
  const int64_t global_good = good_t.data<int64_t>()[0];
  const float dloss = global_good > 0 ? static_cast<float>(1.0 / global_good) : 0.f;

  std::vector<Prepared> ready;
  for (const SpBatch& b : micro) ready.push_back(prepare(b));
  model_.zero_grads();
  if (partition_grads_) grad_shard_.zero();
  std::vector<PendingLoss> losses;
  for (size_t m = 0; m < micro.size(); ++m) {
    losses.push_back(model_.forward_pending(ready[m].batch, *ready[m].attention,
                                            m + 1 == micro.size() ? logits : nullptr));
    model_.backward(dloss);
  }
  // The host reads what the device computed once the whole backward is queued: the bad ids and
  // targets the kernels met (an InputError, before any weight changes), then the losses.
  check_device_errors(device_);
  double loss_sum = 0;
  for (PendingLoss& l : losses) loss_sum += l.get().loss_sum;
  // Weights are replicated over dp × sp: sum every rank's gradient contribution (partitioned
  // gradients were summed layer by layer during backward).
  if (!partition_grads_) all_reduce_grads(world_, model_.grads());
  Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(loss_sum)});
  world_.all_reduce(loss_t, ReduceOp::kSum);
  return {global_good > 0 ? loss_t.data<float>()[0] / global_good : 0.0, global_good};
}

double TrainStep::grad_norm() {
  if (!partition_grads_) return AdamW::grad_norm(model_.grads());
  // Σ over the shards of their squares, the double carried as two f32 (high and low part).
  const double ss = sum_squares(grad_shard_);
  const float hi = static_cast<float>(ss), lo = static_cast<float>(ss - static_cast<double>(hi));
  Tensor parts = Tensor::from_vector<float>({2}, {hi, lo});
  world_.all_reduce(parts, ReduceOp::kSum);
  return std::sqrt(static_cast<double>(parts.data<float>()[0]) + static_cast<double>(parts.data<float>()[1]));
}

double TrainStep::optimizer_step(float lr) {
  const double norm = grad_norm();
  apply_update(lr, norm);
  return norm;
}

std::vector<int32_t> TrainStep::agree(const std::vector<int32_t>& flags) {
  Tensor t = Tensor::from_vector<int32_t>({static_cast<int64_t>(flags.size())}, flags);
  world_.all_reduce(t, ReduceOp::kMax);
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

void TrainStep::apply_update(float lr, double norm) {
  adamw_.set_lr(lr);
  if (partition_grads_) {
    adamw_.step_shard(model_.params(), grad_shard_, norm);
  } else {
    adamw_.step(model_.params(), model_.grads(), norm);
  }
  adamw_.gather_params(world_, model_.params());
}

Tensor TrainStep::gather_logits(const SpBatch& b, const Tensor& logits) {
  const int sp = static_cast<int>(b.shards.size());
  Tensor all = Tensor::empty({b.padded_len, model_.config().vocab_size}, logits.dtype(), logits.device());
  mesh_.sp().all_gather(all, logits);
  std::vector<Tensor> per_rank;
  for (int p = 0; p < sp; ++p) per_rank.push_back(all.rows(p * b.shard_len(), (p + 1) * b.shard_len()));
  return b.gather(per_rank).to_dtype(DType::kF32);
}

}  // namespace seqpar
