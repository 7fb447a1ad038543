#include "train/step.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <thread>

#include "attention/attention_backend.h"
#include "kernels/ops.h"
#include "parallel/sp_attention.h"
#include "train/job.h"
#include "train/trainer.h"

namespace seqpar {

namespace {

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v); }

// The model's memory levers from the config, and its weights from `initial` (the edges only when
// the layers' weights are not resident).
void prepare_model(LlamaModel& model, const TrainConfig& cfg, const LlamaParams& initial) {
  model.set_activation_policy(
      LlamaModel::policy_for(cfg.memory.activation_checkpointing, cfg.memory.checkpoint_keep_attention));
  const std::string& placement = cfg.memory.checkpoint_placement;
  if (placement.empty()) {
    model.set_checkpoint_offload(cfg.memory.checkpoint_offload);
  } else {
    SEQPAR_CHECK(placement != "auto", "checkpoint_placement=auto reached the model unresolved (Trainer::setup resolves it)");
    std::vector<InputPlace> places;
    for (const char ch : expand_checkpoint_placement(placement, model.config().num_layers))
      places.push_back(ch == 'g'   ? InputPlace::kDevice
                       : ch == 'h' ? InputPlace::kHost
                       : ch == 'f' ? InputPlace::kFull
                                   : InputPlace::kRecompute);
    model.set_input_placement(std::move(places));
  }
  model.set_mlp_tile_tokens(cfg.memory.mlp_tile_tokens);
  model.set_loss_tile_tokens(cfg.memory.loss_tile_tokens);
  // By name: without resident layers the model lists its edges only (and a family's optional edge
  // tensors, e.g. gpt2's position embedding and final norm bias, sit among them).
  std::map<std::string, const Tensor*> src;
  for (const auto& [name, t] : initial.named()) src[name] = t;
  for (auto& [name, t] : model.params().named())
    if (t->defined()) t->copy_from(src.at(name)->to_dtype(t->dtype()));
}

// CPU threads of one rank's offloaded optimizer step: the machine's cores shared by the ranks of
// this process (ranks as threads share them; one process per GPU has them all).
int optimizer_threads(const Communicator& world, const TrainConfig& cfg) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int local_ranks = job_transport(cfg.parallel.transport, cfg.parallel.device) == Transport::kLocal ? world.size() : 1;
  return std::max(1, cores / local_ranks);
}

}  // namespace

// The per-tensor AdamW for stage 0 (and one rank's ZeRO-1/2, which shard nothing); a flat one
// otherwise (ZeRO over several ranks, ZeRO-3, optimizer offload), over the layout the stage implies.
TrainStep::TrainStep(Communicator& world, const MeshShape& shape, Device device, const TrainConfig& cfg,
                     const LlamaConfig& mc, const LlamaParams& initial)
    : world_(world),
      mesh_(world, shape),
      device_(device),
      config_(cfg),
      model_(mc, device, cfg.precision.compute_dtype(device)),
      scaler_(cfg.precision.scaler, cfg.precision.fp16()) {
  const MemorySettings& mem = cfg.memory;
  const bool stage3 = mem.zero_stage >= 3;
  const bool offload = mem.offload_optimizer == OffloadDevice::kCpu;
  const bool sharded = mem.zero_stage >= 1 && world.size() > 1;
  const DType compute = model_.dtype();
  if (stage3) {
    layer_weights_ = std::make_unique<ShardedLayerWeights>(
        world, mc, ShardLayout::per_layer(mc, world.rank(), world.size()), compute, device,
        mem.offload_param == OffloadDevice::kCpu, mem.offload_param_pin_memory);
    model_.set_layer_weights(layer_weights_.get());
  }
  prepare_model(model_, cfg, initial);
  if (!stage3 && !offload && !sharded) {
    adamw_ = std::make_unique<AdamW>(mc, cfg.optimizer, model_.params(), device);
  } else {
    OptimizerPlacement place;
    place.layout = stage3    ? ShardLayout::per_layer(mc, world.rank(), world.size())
                   : sharded ? ShardLayout::contiguous(LlamaParams::flat_layout(mc).total, world.rank(), world.size())
                             : ShardLayout::whole(LlamaParams::flat_layout(mc).total);
    place.host = offload;
    place.threads = optimizer_threads(world, cfg);
    place.chunk = AdamW::stream_chunk_for(mc);
    place.force_master = stage3;
    adamw_ = std::make_unique<AdamW>(mc, cfg.optimizer, initial, compute, device, place);
  }
  if (stage3) adamw_->write_weights(FlatRef{layer_weights_->store(), false});
  // An overlapped update (apply_update) writes the weights in buffer order: each part of the next
  // forward waits for its own.
  if (offload && !stage3 && !sharded) {
    const LlamaParams::FlatLayout at = LlamaParams::flat_layout(mc);
    model_.set_weights_gate([this, at, layers = mc.num_layers](int64_t part) {
      adamw_->wait_weights(at.part_end(part, layers));
    });
  }
  // The attention kernels of this run: the process's policy, with attn_implementation's backend on
  // CUDA (the CPU has one attention).
  attention_policy_ = cfg.kernels.attention;
  if (device.is_cuda()) attention_policy_.backend = attention_backend_for(cfg.model.attn_implementation);
  host_threads_ = optimizer_threads(world, cfg);
  partition_grads_ = stage3 || (mem.zero_stage >= 2 && sharded) || mem.offload_gradients;
  if (partition_grads_) partition_gradients();
}

// Partitioned gradients: each layer's are summed over the world as soon as its backward is done
// and only this rank's pieces are kept (in the optimizer's layout), accumulated over micro-batches;
// the embedding, final norm and LM head gradients likewise once the backward is done.
//
// offload_gradients: the pieces live in pinned host memory. The first micro-batch of a step copies
// each layer's summed block there on a copy stream (the compute stream then waits for the copy
// before the model reuses the block for the layer below); a later micro-batch's pieces go through a
// pinned staging buffer and are added on the host (the host waits for each: accumulation is the
// slow path). Every element of the pieces is written by the first micro-batch (the blocks carry
// their zero padding), so the host buffer is zeroed once, not every step.
void TrainStep::partition_gradients() {
  const ShardLayout& layout = adamw_->layout();
  host_grads_ = config_.memory.offload_gradients;
  if (host_grads_) {
    grad_shard_ = host_gradient_buffer(layout.shard_len, device_, host_threads_);
    grad_copies_ = std::make_unique<CopyStream>(device_);
  } else {
    grad_shard_ = Tensor::zeros({layout.shard_len}, DType::kF32, device_);
  }
  const LlamaParams::FlatLayout at = LlamaParams::flat_layout(model_.config());  // where each part sits
  // The part of `t` (at `offset` in the whole buffer) inside this rank's pieces, added to them.
  auto take = [this, &layout](const Tensor& t, int64_t offset) {
    const FlatRef shard{grad_shard_, false};
    for (size_t k = 0; k < layout.regions.size(); ++k) {
      const auto [begin, end] = layout.piece(k);
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + t.numel());
      if (lo >= hi) continue;
      Tensor dst = shard.range(layout, k, lo, hi);
      const Tensor src = t.view({t.numel()}).rows(lo - offset, hi - offset);
      if (!host_grads_) {
        add_inplace(dst, src);
      } else if (first_micro_) {
        last_grad_copy_ = grad_copies_->copy(dst, src);
      } else {
        add_from_device(dst, src);
      }
    }
    // The model rewrites the block (and the next backward the edges) after the copies.
    if (host_grads_ && last_grad_copy_ >= 0) grad_copies_->stream_wait(last_grad_copy_);
  };
  std::map<std::string, int64_t> offset;  // every tensor's offset in the whole buffer
  for (const auto& [name, where] : flat_offsets(model_.config())) offset[name] = where;
  model_.set_grad_sink([this, take, at, offset](int64_t l, const Tensor& block) {
    if (l >= 0) {
      Tensor b = block;
      world_.all_reduce(b, ReduceOp::kSum);
      take(b, at.layers + l * at.layer_elems);
      return;
    }
    // The edges (embedding, position embedding, final norm and its bias, LM head), each at its
    // offset in the buffer's layout.
    for (auto& [name, t] : model_.grads().named()) {
      if (name.rfind("model.layers.", 0) == 0) continue;
      world_.all_reduce(*t, ReduceOp::kSum);
      take(*t, offset.at(name));
    }
  });
}

// offload_gradients, a later micro-batch: dst (host) += src (device), through the pinned staging
// in chunks of one layer's block.
void TrainStep::add_from_device(Tensor& dst, const Tensor& src) {
  if (!grad_staging_.defined())
    grad_staging_ = host_gradient_buffer(LlamaParams::flat_layout(model_.config()).layer_elems, device_, 1);
  const int64_t n = src.numel(), chunk = grad_staging_.numel();
  for (int64_t a = 0; a < n; a += chunk) {
    const int64_t e = std::min(n, a + chunk);
    Tensor stage = grad_staging_.rows(0, e - a);
    const int64_t ticket = grad_copies_->copy(stage, src.rows(a, e));
    grad_copies_->host_wait(ticket);
    Tensor d = dst.rows(a, e);
    add_inplace(d, stage);
  }
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
  p.batch = {i32(sh.input_ids).to(device_), i32(sh.position_ids).to(device_), i32(sh.targets).to(device_), b.rope_len};
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
  // fp16: the loss scaled before backward (a power of two while dynamic: every gradient exactly
  // scale times the unscaled one, until one overflows).
  const float scaled_dloss = dloss * static_cast<float>(scaler_.scale());

  std::vector<Prepared> ready;
  for (const SpBatch& b : micro) ready.push_back(prepare(b));
  std::vector<PendingLoss> losses;
  // The gradients are zeroed once the first forward is at its end, which an overlapped update of the
  // step before runs beside (it reads the gradients until it is done): after that forward, or where
  // the forward runs the loss backward itself (a tiled loss), just before it writes the LM head's.
  bool zeroed = false;
  auto zero_grads = [&] {
    if (zeroed) return;
    zeroed = true;
    adamw_->finish();
    model_.zero_grads();
    if (partition_grads_ && !host_grads_) grad_shard_.zero();  // (host pieces: overwritten by the first micro-batch)
  };
  for (size_t m = 0; m < micro.size(); ++m) {
    LlamaModel::LossBackward loss_backward{scaled_dloss, zero_grads};
    losses.push_back(model_.forward_pending(ready[m].batch, *ready[m].attention,
                                            m + 1 == micro.size() ? logits : nullptr, &loss_backward));
    zero_grads();
    first_micro_ = m == 0;
    model_.backward(scaled_dloss);
  }
  // The host reads what the device computed once the whole backward is queued: the bad ids and
  // targets the kernels met (an InputError, before any weight changes), then the losses.
  check_device_errors(device_);
  if (host_grads_ && last_grad_copy_ >= 0) grad_copies_->host_wait(last_grad_copy_);  // the gradients are home
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
  // The norm of the scaled gradients, divided by the scale (exact for a power of two).
  if (!partition_grads_) return AdamW::grad_norm(model_.grads()) / scaler_.scale();
  // Σ over the shards of their squares, the double carried as two f32 (high and low part), unscaled
  // first (a scaled sum could pass f32's range).
  const double scale = scaler_.scale();
  const double ss = (host_grads_ ? host_sum_squares(grad_shard_, host_threads_) : sum_squares(grad_shard_)) /
                    (scale * scale);
  // A replicated layout (offload_gradients without ZeRO sharding: every rank holds every piece) is
  // the whole norm already.
  if (adamw_->layout().world == 1) return std::sqrt(ss);
  const float hi = static_cast<float>(ss), lo = static_cast<float>(ss - static_cast<double>(hi));
  Tensor parts = Tensor::from_vector<float>({2}, {hi, lo});
  world_.all_reduce(parts, ReduceOp::kSum);
  return std::sqrt(static_cast<double>(parts.data<float>()[0]) + static_cast<double>(parts.data<float>()[1]));
}

std::vector<int32_t> TrainStep::agree(const std::vector<int32_t>& flags) {
  Tensor t = Tensor::from_vector<int32_t>({static_cast<int64_t>(flags.size())}, flags);
  world_.all_reduce(t, ReduceOp::kMax);
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

void TrainStep::apply_update(float lr, double norm, bool overlap) {
  adamw_->finish();
  adamw_->set_lr(lr);
  const float unscale = static_cast<float>(1.0 / scaler_.scale());  // 1 without fp16
  if (!adamw_->flat()) {
    adamw_->step(model_.params(), model_.grads(), norm, unscale);
    return;
  }
  const FlatRef grads = partition_grads_ ? FlatRef{grad_shard_, false} : FlatRef{model_.grads().flat, true};
  if (layer_weights_) {
    adamw_->step_flat(grads, FlatRef{layer_weights_->store(), false}, norm, unscale);
    layer_weights_->invalidate();
    gather_edges();
    return;
  }
  LlamaParams& params = model_.params();
  SEQPAR_CHECK(params.all_in_flat(), "TrainStep: the weights in one buffer");
  const FlatRef out{params.flat, true};
  if (overlap && adamw_->overlappable(out)) {
    adamw_->step_flat_overlapped(grads, out, norm, unscale);
    return;
  }
  adamw_->step_flat(grads, out, norm, unscale);
  // ZeRO: every rank's updated part to every rank (nothing to do when this rank updated all).
  if (adamw_->sharded())
    all_gather_region(world_, adamw_->layout(), 0, FlatRef{params.flat, true}, params.flat, device_);
}

// ZeRO-3: the resident embedding, final norm and LM head from every rank's updated pieces.
void TrainStep::gather_edges() {
  const ShardLayout& layout = adamw_->layout();
  const Tensor& store = layer_weights_->store();
  for (size_t k : {size_t{0}, layout.regions.size() - 1}) {
    const ShardLayout::Region& g = layout.regions[k];
    Tensor region = Tensor::empty({g.len}, store.dtype(), device_);
    all_gather_region(world_, layout, k, FlatRef{store, false}, region, device_);
    write_flat_range(model_.params(), region, model_.config(), g.flat_begin, g.flat_begin + g.len);
  }
}

void TrainStep::weights_restored() {
  if (!layer_weights_) return;
  adamw_->write_weights(FlatRef{layer_weights_->store(), false});
  layer_weights_->invalidate();
  gather_edges();
}

LlamaParams TrainStep::whole_weights() {
  adamw_->finish();
  const LlamaConfig& mc = model_.config();
  LlamaParams out = LlamaParams::zeros(mc, DType::kF32, Device::cpu(), /*one_buffer=*/true);
  if (!layer_weights_) {
    auto dst = out.named();
    auto src = model_.params().named();
    for (size_t i = 0; i < dst.size(); ++i)
      dst[i].second->copy_from(src[i].second->to(Device::cpu()).to_dtype(DType::kF32));
    return out;
  }
  const ShardLayout& layout = adamw_->layout();
  const Tensor& store = layer_weights_->store();
  for (size_t k = 0; k < layout.regions.size(); ++k) {
    const ShardLayout::Region& g = layout.regions[k];
    Tensor region = Tensor::empty({g.len}, store.dtype(), device_);
    all_gather_region(world_, layout, k, FlatRef{store, false}, region, device_);
    Tensor host = region.to(Device::cpu()).to_dtype(DType::kF32);
    out.flat.rows(g.flat_begin, g.flat_begin + g.len).copy_from(host);
  }
  return out;
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
