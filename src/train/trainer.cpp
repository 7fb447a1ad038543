#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "core/log.h"
#include "train/config_resolve.h"
#include "kernels/ops.h"
#include "train/hf_model.h"

namespace seqpar {

LlamaConfig demo_model_config() {
  LlamaConfig c;
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 4096;
  c.rope.theta = 10000.0;
  return c;
}

void TrainConfig::validate() const {
  if (model_dir.empty()) model.validate();
  task.validate();
  SEQPAR_INPUT_CHECK(micro_batch >= 1, "micro_batch={} must be >= 1", micro_batch);
  SEQPAR_INPUT_CHECK(grad_accum >= 1, "grad_accum={} must be >= 1", grad_accum);
  SEQPAR_INPUT_CHECK(steps >= 1, "steps={} must be >= 1", steps);
  SEQPAR_INPUT_CHECK(sp >= 1, "sp={} must be >= 1", sp);
  SEQPAR_INPUT_CHECK(dp_replicate >= 1 && dp_shard >= 1, "dp_replicate={} and dp_shard={} must be >= 1", dp_replicate,
                     dp_shard);
  SEQPAR_INPUT_CHECK(optimizer.adamw.lr > 0, "lr={} must be > 0", optimizer.adamw.lr);
  MeshShape m = sp_mesh_shape(sp_mode, sp, ulysses_degree);
  const int64_t multiple = sp_layout_multiple(m.ring > 1 ? layout : SpLayout::kContiguous, sp);
  SEQPAR_INPUT_CHECK(task.seq_len >= multiple,
                     "seq_len={} is too short for sp={} with the {} layout: each rank needs at least {} token(s)",
                     task.seq_len, sp, m.ring > 1 ? sp_layout_name(layout) : "contiguous", multiple / sp);
}

void init_llama_params(LlamaParams& params, uint64_t seed, float std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, std);
  for (auto& [name, t] : params.named()) {
    float* p = t->data<float>();
    const bool is_norm = t->ndim() == 1;
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = is_norm ? 1.f : normal(rng);
  }
}

float lr_at(const TrainConfig& c, int64_t step) { return scheduled_lr(lr_schedule_of(c), step); }

namespace {

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v); }

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    SEQPAR_INPUT_CHECK(out_.good(), "metrics_out={}: cannot open for writing", path);
  }
  void write(const nlohmann::json& record) {
    if (!out_.is_open()) return;
    out_ << record.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

}  // namespace

TrainResult run_training(const TrainConfig& cfg) {
  cfg.validate();
  const MeshShape sp_shape = sp_mesh_shape(cfg.sp_mode, cfg.sp, cfg.ulysses_degree);
  MeshShape mesh_shape = sp_shape;
  mesh_shape.dp_replicate = cfg.dp_replicate;
  mesh_shape.dp_shard = cfg.dp_shard;
  const SpLayout layout = sp_shape.ring > 1 ? cfg.layout : SpLayout::kContiguous;

  // The model every rank starts from (weights are replicated over the mesh).
  std::unique_ptr<LlamaModel> initial;
  if (!cfg.model_dir.empty()) {
    initial = load_hf_model(cfg.model_dir);
  } else {
    initial = std::make_unique<LlamaModel>(cfg.model);
    init_llama_params(initial->params(), cfg.seed, cfg.init_std);
  }
  const LlamaConfig& mc = initial->config();
  validate_sp_heads(mc.num_heads, mc.num_kv_heads, sp_shape.ulysses);
  SEQPAR_INPUT_CHECK(cfg.task.vocab_size <= mc.vocab_size, "the task's vocab_size={} exceeds the model's vocab_size={}",
                     cfg.task.vocab_size, mc.vocab_size);

  const int dp = mesh_shape.dp();
  const int64_t seqs_per_step = static_cast<int64_t>(cfg.micro_batch) * cfg.grad_accum * dp;
  const int64_t tokens_per_step = seqs_per_step * cfg.task.seq_len;
  if (!cfg.quiet)
    log_info("train: {} layers, C={}, H={}, Hkv={}, V={} | world {} = dp {} x sp {} ({} ulysses x {} ring, {} layout) | "
             "{} sequences x {} tokens per step, {} steps",
             mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads, mc.vocab_size, mesh_shape.world(), dp,
             cfg.sp, sp_shape.ulysses, sp_shape.ring, sp_layout_name(layout), seqs_per_step, cfg.task.seq_len,
             cfg.steps);

  TrainResult result;
  MetricsWriter metrics(cfg.metrics_out);
  std::mutex result_mu;

  if (mesh_shape.world() > 1) set_cpu_gemm_threads(1);
  run_local_ranks(mesh_shape.world(), [&](Communicator& world) {
    DeviceMesh mesh(world, mesh_shape);
    const int sp_rank = mesh.sp_rank(), dp_rank = mesh.dp_rank();
    const bool leader = world.rank() == 0;
    LlamaModel model(mc);
    {
      auto dst = model.params().named();
      auto src = initial->params().named();
      for (size_t i = 0; i < dst.size(); ++i) dst[i].second->copy_from(*src[i].second);
    }
    AdamW adamw(mc, cfg.optimizer, model.params(), Device::cpu());

    auto attention_for = [&](const SpBatch& b) -> std::unique_ptr<Attention> {
      std::vector<TokenMeta> meta;
      for (const Shard& sh : b.shards) meta.push_back(shard_token_meta(sh));
      if (cfg.sp == 1) return std::make_unique<LocalAttention>(meta[0]);
      return make_sp_attention(mesh, meta, mc.num_heads, mc.num_kv_heads);
    };

    auto evaluate = [&](int64_t step) {
      int64_t correct = 0, total = 0;
      for (int e = 0; e < cfg.eval_batches; ++e) {
        std::vector<Sequence> rows = make_recall_batch(cfg.task, cfg.seed + 0x5eed, e, cfg.micro_batch);
        SpBatch b = make_sp_batch(rows, cfg.sp, layout);
        const Shard& sh = b.shards[sp_rank];
        auto attn = attention_for(b);
        Tensor logits;
        model.forward({i32(sh.input_ids), i32(sh.position_ids), i32(sh.targets)}, *attn, &logits);
        Tensor all = Tensor::empty({b.padded_len, mc.vocab_size}, DType::kF32);
        mesh.sp().all_gather(all, logits);
        std::vector<Tensor> per_rank;
        for (int p = 0; p < cfg.sp; ++p) per_rank.push_back(all.rows(p * b.shard_len(), (p + 1) * b.shard_len()));
        std::vector<float> stream = b.gather(per_rank).to_f32_vector();
        auto [c, t] = recall_accuracy(rows, stream, mc.vocab_size);
        correct += c;
        total += t;
      }
      const double acc = total ? static_cast<double>(correct) / total : 0.0;
      if (leader) {
        if (!cfg.quiet) log_info("eval step {:>5} | recall accuracy {:.1f}% ({}/{})", step, 100 * acc, correct, total);
        metrics.write({{"step", step}, {"eval_accuracy", acc}});
        std::lock_guard<std::mutex> lock(result_mu);
        result.eval_accuracy.emplace_back(step, acc);
      }
      return acc;
    };

    auto t_start = std::chrono::steady_clock::now();
    auto t_log = t_start;
    int64_t step = 1;
    for (; step <= cfg.steps; ++step) {
      // This dp rank's micro-batches, and the global count of good tokens they hold.
      std::vector<SpBatch> micro;
      int64_t local_good = 0;
      for (int m = 0; m < cfg.grad_accum; ++m) {
        const int64_t index = ((step - 1) * cfg.grad_accum + m) * dp + dp_rank;
        micro.push_back(make_sp_batch(make_recall_batch(cfg.task, cfg.seed, index, cfg.micro_batch), cfg.sp, layout));
        local_good += micro.back().good_tokens;
      }
      Tensor good_t = Tensor::from_vector<int64_t>({1}, {local_good});
      mesh.dp().all_reduce(good_t, ReduceOp::kSum);
      const int64_t global_good = good_t.data<int64_t>()[0];
      const float dloss = global_good > 0 ? static_cast<float>(1.0 / global_good) : 0.f;

      model.zero_grads();
      double loss_sum = 0;
      for (const SpBatch& b : micro) {
        const Shard& sh = b.shards[sp_rank];
        auto attn = attention_for(b);
        LossStats s = model.forward({i32(sh.input_ids), i32(sh.position_ids), i32(sh.targets)}, *attn);
        model.backward(dloss);
        loss_sum += s.loss_sum;
      }
      // Weights are replicated over dp × sp: sum every rank's gradient contribution.
      for (auto& [name, g] : model.grads().named()) world.all_reduce(*g, ReduceOp::kSum);
      Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(loss_sum)});
      world.all_reduce(loss_t, ReduceOp::kSum);
      const double loss = global_good > 0 ? loss_t.data<float>()[0] / global_good : 0.0;

      const double norm = AdamW::grad_norm(model.grads());
      adamw.set_lr(lr_at(cfg, step));
      adamw.step(model.params(), model.grads(), norm);

      if (leader) {
        std::lock_guard<std::mutex> lock(result_mu);
        result.losses.push_back(loss);
      }
      if (leader && (step % cfg.log_every == 0 || step == 1 || step == cfg.steps)) {
        auto now = std::chrono::steady_clock::now();
        const int64_t steps_in_window = step == 1 ? 1 : (step % cfg.log_every == 0 ? cfg.log_every : step % cfg.log_every);
        const double secs = std::chrono::duration<double>(now - t_log).count();
        const double tps = tokens_per_step * steps_in_window / std::max(secs, 1e-9);
        t_log = now;
        if (!cfg.quiet)
          log_info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tokens/s", step, cfg.steps, loss,
                   lr_at(cfg, step), norm, tps);
        metrics.write({{"step", step}, {"loss", loss}, {"tokens_per_s", tps}, {"lr", lr_at(cfg, step)},
                       {"grad_norm", norm}});
      }
      if ((cfg.eval_every > 0 && step % cfg.eval_every == 0) || step == cfg.steps) {
        double acc = evaluate(step);
        if (cfg.stop_at_accuracy > 0 && acc >= cfg.stop_at_accuracy) {
          if (leader && !cfg.quiet) log_info("reached {:.1f}% >= stop_at_accuracy; stopping", 100 * acc);
          ++step;
          break;
        }
      }
    }
    if (leader) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      std::lock_guard<std::mutex> lock(result_mu);
      result.steps_run = step - 1;
      result.tokens_per_s = tokens_per_step * (step - 1) / std::max(secs, 1e-9);
    }
  });
  return result;
}

}  // namespace seqpar
