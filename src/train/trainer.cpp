#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "attention/attention_backend.h"
#include "comm/communicator.h"
#include "comm/mesh.h"
#include "core/allocator.h"
#include "core/log.h"
#include "io/hf_config.h"
#include "kernels/ops.h"
#include "train/checkpoint.h"
#include "train/config_resolve.h"
#include "train/hf_model.h"
#include "train/memory_plan.h"
#include "train/plot.h"

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
  (void)parse_attn_implementation(attn_implementation);  // InputError for eager or an unknown name
  if (data_path.empty()) {
    task.validate();
    SEQPAR_INPUT_CHECK(eval_data_path.empty(),
                       "eval_data={} needs data (--data): the recall task evaluates its own accuracy", eval_data_path);
  } else {
    SEQPAR_INPUT_CHECK(task.seq_len >= 1, "seq_len={} must be >= 1", task.seq_len);
  }
  SEQPAR_INPUT_CHECK(micro_batch >= 1, "micro_batch={} must be >= 1", micro_batch);
  SEQPAR_INPUT_CHECK(grad_accum >= 1, "grad_accum={} must be >= 1", grad_accum);
  SEQPAR_INPUT_CHECK(steps >= 1, "steps={} must be >= 1", steps);
  SEQPAR_INPUT_CHECK(log_every >= 1, "log_every={} must be >= 1", log_every);
  SEQPAR_INPUT_CHECK(sp >= 1, "sp={} must be >= 1", sp);
  LlamaModel::policy_for(activation_checkpointing, checkpoint_keep_attention);  // checks the pair
  SEQPAR_INPUT_CHECK(activation_checkpointing || !checkpoint_offload,
                     "checkpoint_offload=true needs activation_checkpointing=true (--activation-checkpointing): it "
                     "moves the checkpointed layers' inputs to host memory");
  SEQPAR_INPUT_CHECK(mlp_tile_tokens >= 0, "tiled_mlp_tokens={} must be >= 0 (0 = untiled)", mlp_tile_tokens);
  SEQPAR_INPUT_CHECK(loss_tile_tokens >= 0, "tiled_loss_tokens={} must be >= 0 (0 = untiled)", loss_tile_tokens);
  SEQPAR_INPUT_CHECK(zero_stage >= 0 && zero_stage <= 3, "zero_stage={} must be 0, 1, 2 or 3", zero_stage);
  SEQPAR_INPUT_CHECK(dp_replicate >= 1 && dp_shard >= 1, "dp_replicate={} and dp_shard={} must be >= 1", dp_replicate,
                     dp_shard);
  SEQPAR_INPUT_CHECK(optimizer.adamw.lr > 0, "lr={} must be > 0", optimizer.adamw.lr);
  SEQPAR_INPUT_CHECK(save_every >= 0, "save_every={} must be >= 0", save_every);
  SEQPAR_INPUT_CHECK(keep_last >= 0, "keep_last={} must be >= 0 (0 keeps every checkpoint)", keep_last);
  SEQPAR_INPUT_CHECK(stop_at_step >= 0, "stop_at_step={} must be >= 0", stop_at_step);
  SEQPAR_INPUT_CHECK(save_every == 0 || !save_dir.empty(), "save_every={} needs save_dir (--save-dir)", save_every);
  SEQPAR_INPUT_CHECK((resume != "latest" && resume != "auto") || !save_dir.empty(),
                     "resume={} needs save_dir (--save-dir), the directory to take the newest checkpoint from", resume);
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

std::pair<int64_t, int64_t> token_data_position(int64_t num_sequences, int64_t sequences_per_step, int64_t steps_done) {
  const int64_t steps_per_epoch = num_sequences / sequences_per_step;
  return {steps_done / steps_per_epoch, (steps_done % steps_per_epoch) * sequences_per_step};
}

std::vector<Sequence> token_data_batch(const TokenDataset& data, const TrainConfig& c, int dp, int64_t step, int micro,
                                       int dp_rank) {
  const int64_t per_step = static_cast<int64_t>(c.micro_batch) * c.grad_accum * dp;
  SEQPAR_INPUT_CHECK(data.num_sequences() >= per_step,
                     "token file '{}': holds {} sequences of seq_len={}, fewer than one step reads (micro_batch × "
                     "grad_accum × dp = {} × {} × {} = {})",
                     data.file().path(), data.num_sequences(), data.seq_len(), c.micro_batch, c.grad_accum, dp,
                     per_step);
  auto [epoch, first] = token_data_position(data.num_sequences(), per_step, step - 1);
  first += (static_cast<int64_t>(micro) * dp + dp_rank) * c.micro_batch;
  std::vector<Sequence> rows;
  for (int j = 0; j < c.micro_batch; ++j) rows.push_back(data.get(epoch, first + j));
  return rows;
}

std::string metrics_plot_path(const std::string& metrics_out) {
  std::filesystem::path p(metrics_out);
  if (p.extension() == ".svg") return metrics_out + ".svg";
  return p.replace_extension(".svg").string();
}

namespace {

using json = nlohmann::json;

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v); }

// The metrics records of the run (kept for checkpoints and the plot) and, with a path, the JSONL
// file they are written to as they come. A resumed run starts the file again from the
// checkpoint's records, so the file reads as one run.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, std::vector<json> history) : records_(std::move(history)) {
    if (path.empty()) return;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    out_.open(path, std::ios::trunc);
    SEQPAR_INPUT_CHECK(out_.good(), "metrics_out={}: cannot open for writing", path);
    for (const json& r : records_) out_ << r.dump() << "\n";
    out_.flush();
  }
  void write(const json& record) {
    records_.push_back(record);
    if (!out_.is_open()) return;
    out_ << record.dump() << "\n";
    out_.flush();
  }
  const std::vector<json>& records() const { return records_; }

 private:
  std::vector<json> records_;
  std::ofstream out_;
};

// A token file opened for training or evaluation: every token checked against the vocabulary and
// every mask value against {0, 1} before the first step (reading the file once), so a file made
// for another tokenizer fails here, not in the middle of a run.
std::shared_ptr<const TokenFile> open_token_file(const std::string& path, const std::string& setting,
                                                 int64_t vocab_size) {
  auto file = std::make_shared<const TokenFile>(path);
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int32_t> tokens(static_cast<size_t>(kChunk));
  std::vector<uint8_t> mask(static_cast<size_t>(kChunk));
  try {
    for (int64_t begin = 0; begin < file->num_tokens(); begin += kChunk) {
      const int64_t end = std::min(file->num_tokens(), begin + kChunk);
      file->read_tokens(begin, end, tokens.data(), vocab_size);
      file->read_loss_mask(begin, end, mask.data());
    }
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}={}: {} (the model's vocab_size is {}; was the file tokenized for another model?)",
                                 setting, path, e.what(), vocab_size));
  }
  return file;
}

// What identifies a token file's contents (compared on resume): its counts and a fingerprint of
// its document offsets and of up to 4096 tokens spread over it.
json token_file_identity(const TokenFile& f, int64_t seq_len) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (int64_t d = 0; d <= f.num_docs(); ++d) mix(static_cast<uint64_t>(f.doc_begin(d)));
  const int64_t stride = std::max<int64_t>(1, f.num_tokens() / 4096);
  for (int64_t i = 0; i < f.num_tokens(); i += stride) {
    int32_t t;
    f.read_tokens(i, i + 1, &t);
    mix(static_cast<uint64_t>(t));
  }
  return {{"num_tokens", f.num_tokens()},
          {"num_docs", f.num_docs()},
          {"has_loss_mask", f.has_loss_mask()},
          {"num_sequences", f.num_tokens() / seq_len},
          {"fingerprint", fmt::format("{:016x}", h)}};
}

// The checkpoint a run resumes from (nullopt: start fresh), per TrainConfig::resume.
std::optional<Checkpoint> checkpoint_to_resume(const TrainConfig& cfg, bool talk) {
  if (cfg.resume.empty()) return std::nullopt;
  std::string dir;
  if (cfg.resume == "latest" || cfg.resume == "auto") {
    std::optional<std::string> latest = latest_checkpoint(cfg.save_dir);
    if (!latest) {
      SEQPAR_INPUT_CHECK(cfg.resume == "auto",
                         "resume=latest: save_dir={} holds no checkpoint (no {}/latest); use --resume auto to start "
                         "fresh when there is none",
                         cfg.save_dir, cfg.save_dir);
      if (talk) log_info("resume=auto: no checkpoint in {} yet: starting from step 1", cfg.save_dir);
      return std::nullopt;
    }
    dir = *latest;
  } else {
    dir = resolve_checkpoint_dir(cfg.resume);
  }
  return load_checkpoint(dir);
}

}  // namespace

MemoryPlanInput memory_plan_input(const TrainConfig& cfg, const LlamaConfig& model) {
  const MeshShape sp_shape = sp_mesh_shape(cfg.sp_mode, cfg.sp, cfg.ulysses_degree);
  MemoryPlanInput in;
  in.model = model;
  in.seq_len = cfg.task.seq_len;
  in.micro_batch = cfg.micro_batch;
  in.sp = cfg.sp;
  in.ulysses_degree = sp_shape.ulysses;
  in.world = cfg.sp * cfg.dp_replicate * cfg.dp_shard;
  in.cuda = cfg.device.is_cuda();
  in.activation_checkpointing = cfg.activation_checkpointing;
  in.checkpoint_keep_attention = cfg.checkpoint_keep_attention;
  in.checkpoint_offload = cfg.checkpoint_offload;
  in.mlp_tile_tokens = cfg.mlp_tile_tokens;
  in.loss_tile_tokens = cfg.loss_tile_tokens;
  in.zero_stage = cfg.zero_stage;
  in.ulysses_head_groups = cfg.kernels.ulysses_head_groups;
  return in;
}

TrainResult run_training(const TrainConfig& cfg) {
  cfg.validate();
  const MeshShape sp_shape = sp_mesh_shape(cfg.sp_mode, cfg.sp, cfg.ulysses_degree);
  MeshShape mesh_shape = sp_shape;
  mesh_shape.dp_replicate = cfg.dp_replicate;
  mesh_shape.dp_shard = cfg.dp_shard;
  const SpLayout layout = sp_shape.ring > 1 ? cfg.layout : SpLayout::kContiguous;
  const int dp = mesh_shape.dp();
  const int64_t seqs_per_step = static_cast<int64_t>(cfg.micro_batch) * cfg.grad_accum * dp;
  const int64_t seq_len = cfg.task.seq_len;
  const int64_t tokens_per_step = seqs_per_step * seq_len;
  const bool token_data = !cfg.data_path.empty();
  // Under NCCL every process runs this function; one of them (rank 0's) prints and writes the
  // metrics file and the plot.
  check_job(mesh_shape.world(), cfg.device, cfg.transport);
  const bool leads = hosts_leader(cfg.device, cfg.transport);
  const bool talk = !cfg.quiet && leads;

  // Everything is read and checked before any rank starts: the checkpoint, the model, the data.
  std::optional<Checkpoint> ckpt = checkpoint_to_resume(cfg, talk);
  const LlamaConfig mc = cfg.model_dir.empty() ? cfg.model : load_hf_llama_config(cfg.model_dir);
  validate_sp_heads(mc.num_heads, mc.num_kv_heads, sp_shape.ulysses);
  if (cfg.device.is_cuda()) {
    SEQPAR_INPUT_CHECK(cuda_built(), "device={}: this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF)",
                       cfg.device.str());
    SEQPAR_INPUT_CHECK(mc.head_dim == 64 || mc.head_dim == 128,
                       "device={}: head_dim={} is not supported by the CUDA attention kernels (64 or 128); the "
                       "built-in model takes --head-dim",
                       cfg.device.str(), mc.head_dim);
  }
  // The attention kernels of this run: the process's policy with attn_implementation's backend (the
  // CPU has one attention).
  AttentionPolicy attn_policy = cfg.kernels.attention;
  if (cfg.device.is_cuda()) attn_policy.backend = parse_attn_implementation(cfg.attn_implementation);
  if (!token_data)
    SEQPAR_INPUT_CHECK(cfg.task.vocab_size <= mc.vocab_size,
                       "the task's vocab_size={} exceeds the model's vocab_size={}", cfg.task.vocab_size,
                       mc.vocab_size);

  std::unique_ptr<TokenDataset> data, eval_data;
  json data_id = nullptr, eval_id = nullptr;
  int eval_batches = cfg.eval_batches;
  TrainResult result;
  if (token_data) {
    data = std::make_unique<TokenDataset>(open_token_file(cfg.data_path, "data", mc.vocab_size), seq_len, cfg.seed,
                                          cfg.shuffle, mc.vocab_size);
    data_id = token_file_identity(data->file(), seq_len);
    result.num_sequences = data->num_sequences();
    SEQPAR_INPUT_CHECK(
        result.num_sequences >= seqs_per_step,
        "data={}: holds {} sequences of seq_len={} ({} tokens), fewer than one step reads (micro_batch × "
        "grad_accum × dp = {} × {} × {} = {})",
        cfg.data_path, result.num_sequences, seq_len, data->file().num_tokens(), cfg.micro_batch, cfg.grad_accum, dp,
        seqs_per_step);
    result.steps_per_epoch = result.num_sequences / seqs_per_step;
    if (talk)
      log_info(
          "data: {}: {} tokens in {} documents -> {} sequences of {} tokens; {} sequences per step (micro_batch {} "
          "x grad_accum {} x dp {}) -> {} steps per epoch ({} sequences of each epoch unused); {} steps = {:.2f} "
          "epochs",
          cfg.data_path, data->file().num_tokens(), data->file().num_docs(), result.num_sequences, seq_len,
          seqs_per_step, cfg.micro_batch, cfg.grad_accum, dp, result.steps_per_epoch,
          result.num_sequences - result.steps_per_epoch * seqs_per_step, cfg.steps,
          static_cast<double>(cfg.steps) / result.steps_per_epoch);
    if (!cfg.eval_data_path.empty()) {
      eval_data = std::make_unique<TokenDataset>(open_token_file(cfg.eval_data_path, "eval_data", mc.vocab_size),
                                                 seq_len, cfg.seed, /*shuffle=*/false, mc.vocab_size);
      eval_id = token_file_identity(eval_data->file(), seq_len);
      eval_id["path"] = cfg.eval_data_path;
      const int64_t per_batch = static_cast<int64_t>(cfg.micro_batch) * dp;
      SEQPAR_INPUT_CHECK(
          eval_data->num_sequences() >= per_batch,
          "eval_data={}: holds {} sequences of seq_len={}, fewer than one evaluation batch (micro_batch × "
          "dp = {})",
          cfg.eval_data_path, eval_data->num_sequences(), seq_len, per_batch);
      eval_batches =
          static_cast<int>(std::min<int64_t>(std::max(1, cfg.eval_batches), eval_data->num_sequences() / per_batch));
      if (talk)
        log_info("eval data: {}: the first {} sequences, {} batch(es) of {}", cfg.eval_data_path,
                 eval_batches * per_batch, eval_batches, per_batch);
    }
  }

  // The run's configuration, recorded in checkpoints and compared with the checkpoint's on resume.
  const json config = train_config_json(cfg, mc, data_id, eval_id);
  if (ckpt) {
    for (const std::string& w : check_resume_config(ckpt->state.config, config, ckpt->dir)) log_warn("{}", w);
    if (token_data) {
      const auto want = token_data_position(result.num_sequences, seqs_per_step, ckpt->state.step);
      SEQPAR_INPUT_CHECK(ckpt->state.data_epoch == want.first && ckpt->state.data_index == want.second,
                         "checkpoint '{}': trainer_state.json data position (epoch {}, index {}) is not where step {} "
                         "leaves the data (epoch {}, index {}): a corrupt checkpoint",
                         ckpt->dir, ckpt->state.data_epoch, ckpt->state.data_index, ckpt->state.step, want.first,
                         want.second);
    }
    result.losses = ckpt->state.losses;
    result.eval_accuracy = ckpt->state.eval_accuracy;
    result.eval_loss = ckpt->state.eval_loss;
    result.resumed_from = ckpt->dir;
    result.first_step = ckpt->state.step + 1;
    if (talk) log_info("resuming from {} (step {})", ckpt->dir, ckpt->state.step);
  }

  // The model every rank starts from (weights are replicated over the mesh).
  std::unique_ptr<LlamaModel> initial;
  if (ckpt) {
    initial = std::make_unique<LlamaModel>(ckpt->model_config);
    load_params_from(initial->params(), ckpt->model_config, ckpt->model, ckpt->dir);
  } else if (!cfg.model_dir.empty()) {
    initial = load_hf_model(cfg.model_dir);
  } else {
    initial = std::make_unique<LlamaModel>(mc);
    init_llama_params(initial->params(), cfg.seed, cfg.init_std);
  }

  const int64_t first_step = result.first_step;
  const int64_t last_step = cfg.stop_at_step > 0 ? std::min(cfg.steps, cfg.stop_at_step) : cfg.steps;
  if (talk)
    log_info(
        "train: {} layers, C={}, H={}, Hkv={}, V={} | world {} = dp {} x sp {} ({} ulysses x {} ring, {} layout) | "
        "{} sequences x {} tokens per step, steps {}..{} of {}",
        mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads, mc.vocab_size, mesh_shape.world(), dp, cfg.sp,
        sp_shape.ulysses, sp_shape.ring, sp_layout_name(layout), seqs_per_step, seq_len, first_step, last_step,
        cfg.steps);

  // What a rank will hold at the step's peak (train/memory_plan.h), said before any GPU work.
  const MemoryPlan plan = plan_memory(memory_plan_input(cfg, mc));
  const double plan_gib = static_cast<double>(plan.peak_bytes) / (1ll << 30);
  if (talk)
    log_info("memory plan: {:.3f} GiB per rank at the step's peak ({}); `seqpar plan` gives the breakdown", plan_gib,
             plan.peak_phase);
  // Ranks that share one GPU: all of them as threads of this process, else one per process.
  const int ranks_per_device = job_transport(cfg.transport, cfg.device) == Transport::kLocal ? mesh_shape.world() : 1;

  MetricsLog metrics(leads ? cfg.metrics_out : std::string(), ckpt ? ckpt->state.metrics : std::vector<json>{});
  auto write_plot = [&] {
    if (cfg.metrics_out.empty() || !leads) return;
    const std::string plot = metrics_plot_path(cfg.metrics_out);
    write_metrics_svg(plot, metrics.records(), "seqpar train: " + (token_data ? cfg.data_path : "recall task"));
    if (talk) log_info("metrics: {}, plot: {}", cfg.metrics_out, plot);
  };
  if (first_step > last_step) {
    if (talk)
      log_info("the checkpoint is at step {}: nothing left to train (last step {})", first_step - 1, last_step);
    result.steps_run = first_step - 1;
    if (token_data)
      std::tie(result.data_epoch, result.data_index) =
          token_data_position(result.num_sequences, seqs_per_step, result.steps_run);
    write_plot();
    return result;
  }
  std::mutex result_mu;
  const std::string hash = config_hash(config);

  if (mesh_shape.world() > 1) set_cpu_gemm_threads(1);
  auto t_start = std::chrono::steady_clock::now();
  run_job(mesh_shape.world(), cfg.device, cfg.transport, config.dump(), [&](JobRank& job) {
    Communicator& world = job.world;
    const Device device = job.device;
    DeviceMesh mesh(world, mesh_shape);
    const int sp_rank = mesh.sp_rank(), dp_rank = mesh.dp_rank();
    const bool leader = job.leader;
    if (leader && device.is_cuda()) {
      const int64_t total = device_total_bytes(device);
      if (total > 0 && plan.peak_bytes * ranks_per_device > total)
        log_warn("the memory plan needs {:.2f} GiB on {} ({} rank(s) of {:.2f} GiB) but it has {:.2f} GiB: expect out "
                 "of memory; more GPUs (--sp), --activation-checkpointing, --tiled-mlp-tokens / --tiled-loss-tokens "
                 "or --zero-stage 1 lower it (seqpar plan, docs/memory.md)",
                 plan_gib * ranks_per_device, device.str(), ranks_per_device, plan_gib,
                 static_cast<double>(total) / (1ll << 30));
    }
    LlamaModel model(mc, device, device.is_cuda() ? DType::kBF16 : DType::kF32);
    model.set_activation_policy(LlamaModel::policy_for(cfg.activation_checkpointing, cfg.checkpoint_keep_attention));
    model.set_checkpoint_offload(cfg.checkpoint_offload);
    model.set_mlp_tile_tokens(cfg.mlp_tile_tokens);
    model.set_loss_tile_tokens(cfg.loss_tile_tokens);
    {
      auto dst = model.params().named();
      auto src = initial->params().named();
      for (size_t i = 0; i < dst.size(); ++i) dst[i].second->copy_from(src[i].second->to_dtype(dst[i].second->dtype()));
    }
    // ZeRO stages 1-3 shard the optimizer state over every rank (all hold the same weights); stages
    // 2-3 also partition the gradients (below); weights stay whole (stage 3 runs as 2, with a
    // warning from the config).
    const ZeroShard shard = cfg.zero_stage >= 1 ? ZeroShard{world.rank(), world.size()} : ZeroShard{};
    AdamW adamw(mc, cfg.optimizer, model.params(), device, shard);
    // Partitioned gradients: each layer's are summed over the world as soon as its backward is done
    // and only this rank's shard of the gradient buffer is kept, accumulated over micro-batches;
    // the embedding, final norm and LM head gradients likewise once the backward is done.
    const bool partition_grads = cfg.zero_stage >= 2 && adamw.sharded();
    Tensor grad_shard;
    if (partition_grads) {
      grad_shard = Tensor::zeros({adamw.shard_len()}, DType::kF32, device);
      const LlamaParams::FlatLayout at = LlamaParams::flat_layout(mc);  // where each part sits
      const int64_t begin = adamw.shard_begin(), end = adamw.shard_end();
      // The part of `t` (at `at` in the whole buffer) inside this rank's shard, added to it.
      auto take = [&grad_shard, begin, end](const Tensor& t, int64_t at) {
        const int64_t lo = std::max(begin, at), hi = std::min(end, at + t.numel());
        if (lo >= hi) return;
        Tensor dst = grad_shard.rows(lo - begin, hi - begin);
        add_inplace(dst, t.view({t.numel()}).rows(lo - at, hi - at));
      };
      model.set_grad_sink([&, take, at](int64_t l, const Tensor& block) {
        if (l >= 0) {
          Tensor b = block;
          world.all_reduce(b, ReduceOp::kSum);
          take(b, at.layers + l * at.layer_elems);
          return;
        }
        LlamaParams& g = model.grads();
        for (auto [t, offset] : {std::pair<Tensor*, int64_t>{&g.embed_tokens, 0}, {&g.final_norm, at.final_norm},
                                 {&g.lm_head, at.lm_head}}) {
          if (!t->defined()) continue;
          world.all_reduce(*t, ReduceOp::kSum);
          take(*t, offset);
        }
      });
    }
    if (ckpt) restore_from_checkpoint(*ckpt, model.params(), adamw);
    // Every rank of this process holds its weights now: free the host copies they came from (a
    // whole model, and a checkpoint's weights and optimizer state).
    world.barrier();
    {
      std::lock_guard<std::mutex> lock(result_mu);
      initial.reset();
      ckpt.reset();
    }

    auto attention_for = [&](const SpBatch& b) -> std::unique_ptr<Attention> {
      std::vector<TokenMeta> meta;
      for (const Shard& sh : b.shards) meta.push_back(shard_token_meta(sh));
      if (cfg.sp == 1) return std::make_unique<LocalAttention>(meta[0], attn_policy);
      return make_sp_attention(mesh, meta, mc.num_heads, mc.num_kv_heads, attn_policy, cfg.kernels.ulysses_head_groups);
    };
    // Forward over this rank's shard. The attention object lives until the next forward, since
    // backward must be given the same one.
    std::unique_ptr<Attention> attn;
    auto forward = [&](const SpBatch& b, Tensor* logits = nullptr) {
      const Shard& sh = b.shards[sp_rank];
      attn = attention_for(b);
      return model.forward({i32(sh.input_ids).to(device), i32(sh.position_ids).to(device),
                            i32(sh.targets).to(device)},
                           *attn, logits);
    };

    // The recall task: accuracy of the answers, from the logits gathered over the SP group.
    auto evaluate_recall = [&](int64_t step) {
      int64_t correct = 0, total = 0;
      for (int e = 0; e < cfg.eval_batches; ++e) {
        std::vector<Sequence> rows = make_recall_batch(cfg.task, cfg.seed + 0x5eed, e, cfg.micro_batch);
        SpBatch b = make_sp_batch(rows, cfg.sp, layout);
        Tensor logits;
        forward(b, &logits);
        Tensor all = Tensor::empty({b.padded_len, mc.vocab_size}, logits.dtype(), logits.device());
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

    // --eval-data: the token-weighted mean loss over the first eval_batches × micro_batch × dp
    // sequences of the file (file order), each dp rank its own micro-batches.
    auto evaluate_loss = [&](int64_t step) {
      double loss_sum = 0;
      int64_t good = 0;
      for (int e = 0; e < eval_batches; ++e) {
        std::vector<Sequence> rows;
        const int64_t first = (static_cast<int64_t>(e) * dp + dp_rank) * cfg.micro_batch;
        for (int j = 0; j < cfg.micro_batch; ++j) rows.push_back(eval_data->get(0, first + j));
        SpBatch b = make_sp_batch(rows, cfg.sp, layout);
        loss_sum += forward(b).loss_sum;
        if (sp_rank == 0) good += b.good_tokens;  // the whole batch's count, once per SP group
      }
      Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(loss_sum)});
      Tensor good_t = Tensor::from_vector<int64_t>({1}, {good});
      world.all_reduce(loss_t, ReduceOp::kSum);
      world.all_reduce(good_t, ReduceOp::kSum);
      const int64_t g = good_t.data<int64_t>()[0];
      const double loss = g > 0 ? loss_t.data<float>()[0] / g : 0.0;
      if (leader) {
        if (!cfg.quiet) log_info("eval step {:>5} | eval loss {:.4f} ({} tokens)", step, loss, g);
        metrics.write({{"step", step}, {"eval_loss", loss}});
        std::lock_guard<std::mutex> lock(result_mu);
        result.eval_loss.emplace_back(step, loss);
      }
    };

    // state: the whole optimizer state assembled from a sharded optimizer's shards (null: the
    // optimizer holds it whole).
    auto save = [&](int64_t step, AdamW::FullState* state) {
      TrainerState st;
      st.step = step;
      st.seed = cfg.seed;
      st.data_source = token_data ? "tokens" : "recall";
      if (token_data) {
        std::tie(st.data_epoch, st.data_index) = token_data_position(result.num_sequences, seqs_per_step, step);
      } else {
        st.data_index = step * cfg.grad_accum * dp;  // the next recall batch index
      }
      st.config = config;
      st.config_hash = hash;
      st.config_text = cfg.config_text;
      {
        std::lock_guard<std::mutex> lock(result_mu);
        st.losses = result.losses;
        st.eval_accuracy = result.eval_accuracy;
        st.eval_loss = result.eval_loss;
      }
      st.metrics = metrics.records();
      const bool has_master = adamw.has_master();
      LlamaParams& weights = state ? (has_master ? state->master : model.params()) : adamw.weights(model.params());
      CheckpointContents c{&mc,
                           &weights,
                           state ? &state->exp_avg : &adamw.exp_avg(),
                           state ? &state->exp_avg_sq : &adamw.exp_avg_sq(),
                           has_master ? &weights : nullptr,
                           adamw.step_count(),
                           std::move(st)};
      const std::string path = save_checkpoint(cfg.save_dir, c, cfg.keep_last);
      if (!cfg.quiet) log_info("saved checkpoint {}", path);
      std::lock_guard<std::mutex> lock(result_mu);
      result.checkpoints.push_back(path);
    };

    int64_t last_logged = first_step - 1;
    int64_t line_peak = 0;  // the largest step peak since the last progress line
    auto t_log = std::chrono::steady_clock::now();
    int64_t step = first_step;
    const int64_t profile_from = last_step > first_step ? first_step + 1 : first_step;
    const bool profile_rank = cfg.profile && leader;
    for (; step <= last_step; ++step) {
      if (profile_rank && step >= profile_from) set_thread_profiling(true);
      const auto t_step = std::chrono::steady_clock::now();
      // This dp rank's micro-batches, and the global count of good tokens they hold.
      std::vector<SpBatch> micro;
      int64_t local_good = 0;
      for (int m = 0; m < cfg.grad_accum; ++m) {
        std::vector<Sequence> rows;
        if (token_data) {
          rows = token_data_batch(*data, cfg, dp, step, m, dp_rank);
        } else {
          const int64_t index = ((step - 1) * cfg.grad_accum + m) * dp + dp_rank;
          rows = make_recall_batch(cfg.task, cfg.seed, index, cfg.micro_batch);
        }
        micro.push_back(make_sp_batch(rows, cfg.sp, layout));
        local_good += micro.back().good_tokens;
      }
      Tensor good_t = Tensor::from_vector<int64_t>({1}, {local_good});
      mesh.dp().all_reduce(good_t, ReduceOp::kSum);
      const int64_t global_good = good_t.data<int64_t>()[0];
      const float dloss = global_good > 0 ? static_cast<float>(1.0 / global_good) : 0.f;

      model.zero_grads();
      if (partition_grads) grad_shard.zero();
      double loss_sum = 0;
      for (const SpBatch& b : micro) {
        loss_sum += forward(b).loss_sum;
        model.backward(dloss);
      }
      // Weights are replicated over dp × sp: sum every rank's gradient contribution (partitioned
      // gradients were summed layer by layer during backward).
      if (!partition_grads) all_reduce_grads(world, model.grads());
      Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(loss_sum)});
      world.all_reduce(loss_t, ReduceOp::kSum);
      const double loss = global_good > 0 ? loss_t.data<float>()[0] / global_good : 0.0;

      double norm = 0;
      if (partition_grads) {
        // Σ over the shards of their squares, the double carried as two f32 (high and low part).
        const double ss = sum_squares(grad_shard);
        const float hi = static_cast<float>(ss), lo = static_cast<float>(ss - static_cast<double>(hi));
        Tensor parts = Tensor::from_vector<float>({2}, {hi, lo});
        world.all_reduce(parts, ReduceOp::kSum);
        norm = std::sqrt(static_cast<double>(parts.data<float>()[0]) + static_cast<double>(parts.data<float>()[1]));
      } else {
        norm = AdamW::grad_norm(model.grads());
      }
      adamw.set_lr(lr_at(cfg, step));
      if (partition_grads) {
        adamw.step_shard(model.params(), grad_shard, norm);
      } else {
        adamw.step(model.params(), model.grads(), norm);
      }
      adamw.gather_params(world, model.params());

      if (cfg.time_steps || cfg.profile) synchronize_device(device);
      if (leader) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();
        const bool profiled = profile_rank && step >= profile_from;
        if (profiled) set_thread_profiling(false);  // evaluation and checkpoints are not the step
        // This step's peak; the allocator then counts the next step's from here.
        Allocator& mem = allocator_for(device);
        const int64_t peak = static_cast<int64_t>(mem.peak_bytes());
        mem.reset_peak();
        line_peak = std::max(line_peak, peak);
        std::lock_guard<std::mutex> lock(result_mu);
        if (profiled) {
          result.profile_steps += 1;
          result.profile_seconds += secs;
        }
        result.losses.push_back(loss);
        result.step_seconds.push_back(secs);
        result.step_peak_bytes.push_back(peak);
        result.peak_mem_bytes = std::max(result.peak_mem_bytes, peak);
      }
      // A metrics record at the steps that do not depend on where a run was stopped or resumed
      // (so a resumed run's records are the uninterrupted run's); a progress line also at the first
      // and last step of this call.
      const bool record_step = step == 1 || step % cfg.log_every == 0 || step == cfg.steps;
      if (leader && (record_step || step == first_step || step == last_step)) {
        auto now = std::chrono::steady_clock::now();
        const double secs = std::chrono::duration<double>(now - t_log).count();
        // The device allocator's peak since the last progress line (every rank of this process on
        // that device: with ranks as threads on one GPU, all of them).
        const double peak_gib = static_cast<double>(line_peak) / (1024.0 * 1024.0 * 1024.0);
        line_peak = 0;
        const double tps = static_cast<double>(tokens_per_step * (step - last_logged)) / std::max(secs, 1e-9);
        t_log = now;
        last_logged = step;
        if (!cfg.quiet)
          log_info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tokens/s | peak {}", step,
                   cfg.steps, loss, lr_at(cfg, step), norm, tps,
                   peak_gib >= 1 ? fmt::format("{:.2f} GiB", peak_gib) : fmt::format("{:.1f} MiB", peak_gib * 1024));
        json record = {{"step", step},          {"loss", loss},          {"tokens_per_s", tps},
                       {"lr", lr_at(cfg, step)}, {"grad_norm", norm},    {"peak_mem_gib", peak_gib}};
        if (token_data) record["epoch"] = (step - 1) / result.steps_per_epoch;
        if (record_step) metrics.write(record);
      }
      bool stop = step == last_step;
      if ((cfg.eval_every > 0 && step % cfg.eval_every == 0) || step == cfg.steps) {
        if (!token_data) {
          const double acc = evaluate_recall(step);
          // Every rank must stop at the same step: take the decision of any rank that reached it
          // (they all evaluate the same batches, but nothing else guarantees bit-equal accuracies).
          Tensor reached = Tensor::from_vector<int32_t>({1}, {cfg.stop_at_accuracy > 0 && acc >= cfg.stop_at_accuracy});
          world.all_reduce(reached, ReduceOp::kMax);
          if (reached.data<int32_t>()[0]) {
            if (leader && !cfg.quiet) log_info("reached {:.1f}% >= stop_at_accuracy; stopping", 100 * acc);
            stop = true;
          }
        } else if (eval_data) {
          evaluate_loss(step);
        }
      }
      if (!cfg.save_dir.empty() && ((cfg.save_every > 0 && step % cfg.save_every == 0) || stop)) {
        std::optional<AdamW::FullState> state;
        if (adamw.sharded()) state = adamw.full_state(world, mc);  // a collective: every rank
        if (leader) save(step, state ? &*state : nullptr);
        // Every rank waits for the save: a run that stops here is resumable once it returns.
        world.barrier();
      }
      if (stop) break;
    }
    if (profile_rank) {
      std::vector<ProfileEntry> profile = take_profile();
      std::lock_guard<std::mutex> lock(result_mu);
      result.profile = std::move(profile);
    }
    if (leader) {
      const int64_t done = step;  // the loop always leaves by `stop`
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      std::lock_guard<std::mutex> lock(result_mu);
      result.steps_run = done;
      result.tokens_per_s = static_cast<double>(tokens_per_step * (done - first_step + 1)) / std::max(secs, 1e-9);
      if (token_data)
        std::tie(result.data_epoch, result.data_index) = token_data_position(result.num_sequences, seqs_per_step, done);
    }
  });
  write_plot();
  return result;
}

}  // namespace seqpar
