#include "train/fwdbwd.h"

#include <mutex>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "train/hf_model.h"

namespace seqpar {

namespace {

Tensor i32_tensor(const std::vector<int32_t>& v) {
  return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v);
}

// Every input problem is found here, before any model work.
std::vector<Sequence> batch_rows(const Tensor& input_ids, const Tensor& labels, int64_t vocab_size) {
  SEQPAR_INPUT_CHECK(input_ids.ndim() == 2, "input_ids must be [B, S], got shape {}", shape_str(input_ids.shape()));
  SEQPAR_INPUT_CHECK(labels.shape() == input_ids.shape(), "labels has shape {} but input_ids has shape {}",
                     shape_str(labels.shape()), shape_str(input_ids.shape()));
  SEQPAR_INPUT_CHECK(input_ids.dtype() == DType::kI32 || input_ids.dtype() == DType::kI64,
                     "input_ids must be int32 or int64, got {}", dtype_name(input_ids.dtype()));
  SEQPAR_INPUT_CHECK(labels.dtype() == DType::kI32 || labels.dtype() == DType::kI64,
                     "labels must be int32 or int64, got {}", dtype_name(labels.dtype()));
  const int64_t B = input_ids.dim(0), S = input_ids.dim(1);
  SEQPAR_INPUT_CHECK(B > 0 && S > 0, "input_ids must not be empty (shape {})", shape_str(input_ids.shape()));
  auto as_i64 = [](const Tensor& t) {
    std::vector<int64_t> v(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i)
      v[i] = t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
    return v;
  };
  std::vector<int64_t> ids = as_i64(input_ids), lab = as_i64(labels);
  std::vector<Sequence> rows(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      int64_t id = ids[b * S + s], l = lab[b * S + s];
      SEQPAR_INPUT_CHECK(id >= 0 && id < vocab_size, "input_ids[{}, {}] = {} is outside the vocabulary [0, {})", b,
                         s, id, vocab_size);
      SEQPAR_INPUT_CHECK(l == kIgnoreIndex || (l >= 0 && l < vocab_size),
                         "labels[{}, {}] = {} is outside the vocabulary [0, {}) and is not -100", b, s, l,
                         vocab_size);
      rows[b].input_ids.push_back(static_cast<int32_t>(id));
      rows[b].labels.push_back(static_cast<int32_t>(l));
    }
  }
  return rows;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> run_fwdbwd(const std::string& model_dir, const Tensor& input_ids,
                                                       const Tensor& labels, const FwdBwdOptions& opt) {
  // Load and validate everything first.
  std::unique_ptr<LlamaModel> reference = load_hf_model(model_dir, Device::cpu());
  const LlamaConfig& config = reference->config();
  std::vector<Sequence> rows = batch_rows(input_ids, labels, config.vocab_size);
  const int P = opt.sp_size;
  SEQPAR_INPUT_CHECK(P >= 1, "--sp={} must be >= 1", P);
  MeshShape mesh_shape = sp_mesh_shape(opt.sp_mode, P, opt.ulysses_degree);
  if (P > 1) validate_sp_heads(config.num_heads, config.num_kv_heads, mesh_shape.ulysses);
  const SpLayout layout = mesh_shape.ring > 1 ? opt.layout : SpLayout::kContiguous;
  SpBatch batch = make_sp_batch(rows, P, layout);
  const int64_t B = input_ids.dim(0), S = input_ids.dim(1), V = config.vocab_size;

  std::vector<TokenMeta> sp_meta;
  for (const Shard& sh : batch.shards) sp_meta.push_back(shard_token_meta(sh));
  const LlamaModel::ActivationPolicy policy =
      LlamaModel::policy_for(opt.activation_checkpointing, opt.checkpoint_keep_attention);
  SEQPAR_INPUT_CHECK(opt.activation_checkpointing || !opt.checkpoint_offload,
                     "--checkpoint-offload needs --activation-checkpointing: it moves the checkpointed layers' inputs "
                     "to host memory");

  std::vector<std::pair<std::string, Tensor>> out;
  std::mutex out_mu;
  std::vector<std::pair<std::string, Tensor>> params_after;
  if (P > 1) set_cpu_gemm_threads(1);
  const std::string config_text =
      fmt::format("fwdbwd model={} batch={} sp={} mode={} ulysses={} layout={} step={} lr={} clip={}", model_dir,
                  shape_str(input_ids.shape()), P, sp_mode_name(opt.sp_mode), opt.ulysses_degree,
                  sp_layout_name(opt.layout), opt.optimizer_step, opt.optimizer.adamw.lr, opt.optimizer.clip);
  run_job(P, opt.device, opt.transport, config_text, [&](JobRank& job) {
    Communicator& world = job.world;
    const Device device = job.device;
    DeviceMesh mesh(world, mesh_shape);
    const int r = mesh.sp_rank();
    const Shard& shard = batch.shards[r];
    LlamaModel model(config, device, device.is_cuda() ? DType::kBF16 : DType::kF32);
    model.set_activation_policy(policy);
    model.set_checkpoint_offload(opt.checkpoint_offload);
    model.set_mlp_tile_tokens(opt.mlp_tile_tokens);
    auto dst = model.params().named();
    auto src = reference->params().named();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].second->copy_from(src[i].second->to_dtype(dst[i].second->dtype()));

    LlamaBatch lb{i32_tensor(shard.input_ids).to(device), i32_tensor(shard.position_ids).to(device),
                  i32_tensor(shard.targets).to(device)};
    std::unique_ptr<Attention> attention;
    if (P == 1) {
      attention = std::make_unique<LocalAttention>(sp_meta[0], opt.kernels.attention);
    } else {
      attention = make_sp_attention(mesh, sp_meta, config.num_heads, config.num_kv_heads, opt.kernels.attention,
                                    opt.kernels.ulysses_head_groups);
    }
    Tensor logits;
    LossStats stats = model.forward(lb, *attention, &logits);

    // loss = Σ loss_sum / Σ good_tokens over the SP group (a rank with no good token adds 0 / 0).
    Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(stats.loss_sum)});
    Tensor good_t = Tensor::from_vector<int64_t>({1}, {stats.good_tokens});
    world.all_reduce(loss_t, ReduceOp::kSum);
    world.all_reduce(good_t, ReduceOp::kSum);
    const double loss_sum = loss_t.data<float>()[0];
    const int64_t good = good_t.data<int64_t>()[0];
    if (good == 0 && r == 0) log_warn("the batch has no token with a label: loss and gradients are 0");
    const float dloss = good > 0 ? static_cast<float>(1.0 / static_cast<double>(good)) : 0.f;
    model.zero_grads();
    model.backward(dloss);
    all_reduce_grads(world, model.grads());

    // Gather the logits of every rank (rank order), then put them back in stream order.
    Tensor all_logits = Tensor::empty({batch.padded_len, V}, logits.dtype(), device);
    world.all_gather(all_logits, logits);
    double total_norm = 0;
    if (opt.optimizer_step) {
      AdamW adamw(config, opt.optimizer, model.params(), device);
      total_norm = AdamW::grad_norm(model.grads());
      adamw.step(model.params(), model.grads(), total_norm);
      if (job.leader) {  // the f32 weights (the master copy on bf16 models)
        std::lock_guard<std::mutex> lock(out_mu);
        for (auto& [name, p] : adamw.weights(model.params()).named())
          params_after.emplace_back("param." + name, p->to(Device::cpu()));
      }
    }
    if (!job.leader) return;
    std::vector<Tensor> per_rank;
    for (int p = 0; p < P; ++p) per_rank.push_back(all_logits.rows(p * batch.shard_len(), (p + 1) * batch.shard_len()));
    Tensor stream = batch.gather(per_rank).to_dtype(DType::kF32);  // [S_padded, V] host
    std::lock_guard<std::mutex> lock(out_mu);
    out.emplace_back("logits", stream.rows(0, B * S).clone().view({B, S, V}));
    out.emplace_back("loss", Tensor::from_vector<float>({1}, {good > 0 ? static_cast<float>(loss_sum / good) : 0.f}));
    for (auto& [name, g] : model.grads().named()) out.emplace_back("grad." + name, g->to(Device::cpu()));
    if (opt.optimizer_step) {
      out.emplace_back("grad_norm", Tensor::from_vector<float>({1}, {static_cast<float>(total_norm)}));
      for (auto& named : params_after) out.push_back(std::move(named));
    }
  });
  return out;
}

}  // namespace seqpar
