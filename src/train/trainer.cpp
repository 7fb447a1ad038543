#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "attention/attention_backend.h"
#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "comm/mesh.h"
#include "core/allocator.h"
#include "core/log.h"
#include "io/hf_config.h"
#include "kernels/ops.h"
#include "report/plot.h"
#include "train/checkpoint.h"
#include "train/config_resolve.h"
#include "train/hf_model.h"
#include "train/memory_plan.h"
#include "train/stop_signals.h"

namespace seqpar {

namespace {

// What one rank plans against. Every process must choose the same placement (a recomputed layer repeats its
// attention's collectives), so these are fixed figures, not what happens to be free: the device's total memory
// (less auto_placement_capacity's margin), and --host-memory-gib or the host's MemTotal shared by the ranks of
// the host (the process's threads, or LOCAL_WORLD_SIZE processes under a launcher).
// whole_card: the device's whole memory instead, what a run that names its placement is held against (as seqpar plan
// holds it).
struct RankCapacity {
  int64_t gpu = 0, host = 0;
};
RankCapacity rank_capacity(const TrainConfig& cfg, int ranks_per_device, bool whole_card = false) {
  const Device device = cfg.parallel.device;
  const int ranks = std::max(1, ranks_per_device);
  const bool threads = job_transport(cfg.parallel.transport, device) == Transport::kLocal;
  const int per_host = threads ? ranks : std::max(1, read_dist_env(process_env()).local_world_size);
  const int64_t card = device.is_cuda() ? device_total_bytes(device) : 0;
  const int64_t device_bytes =
      !device.is_cuda() ? host_memory_bytes() : whole_card ? card : auto_placement_capacity(card);
  const int64_t gpu = device_bytes / ranks;
  const int64_t host_total = cfg.memory.host_memory_gib > 0 ? static_cast<int64_t>(cfg.memory.host_memory_gib * (1ll << 30))
                                                            : host_memory_total_bytes();
  return {gpu, host_total / per_host};
}

// For the error of a run that does not fit: the levers that make it fit at its length (seqpar plan's: within the card
// less auto's margin for a run whose placement auto chooses, else within the whole card).
std::string levers_hint(const TrainConfig& cfg, const LlamaConfig& model, int ranks_per_device, bool auto_placement) {
  const RankCapacity c = rank_capacity(cfg, ranks_per_device, /*whole_card=*/!auto_placement);
  const MemoryPlanInput in = memory_plan_input(cfg, model);
  return describe_levers_to_fit(in, levers_to_fit(in, c.gpu, c.host));
}

}  // namespace

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

namespace {

// SplitMix64's finaliser (the tensor keys; the draws' own mix is in kernels/normal_draw.h).
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The process's host memory for the setup's progress lines.
std::string host_memory_note() {
  const ProcessMemory m = process_memory();
  return fmt::format("host memory {:.2f} GiB resident, {:.2f} GiB at the peak", static_cast<double>(m.resident) / (1ll << 30),
                     static_cast<double>(m.peak) / (1ll << 30));
}

// What the random init puts in one tensor: a constant (norm weights 1, biases 0), or normal(0, sd).
struct InitRule {
  bool constant;
  float value;  // the constant
  float sd;     // else the normal's standard deviation
};
InitRule init_rule(const std::string& name, const LlamaConfig& config, float std) {
  if (name.ends_with("norm.weight")) return {true, 1.f, 0.f};  // RMSNorm / LayerNorm (and q/k norms) start at 1
  if (name.ends_with(".bias")) return {true, 0.f, 0.f};        // every bias starts at 0 (nn.Linear / Conv1D in HF)
  // GPT-2's residual outputs (HF's c_proj of attention and MLP; Megatron's output_layer_init_method):
  // std / sqrt(2 n_layer), the GPT-2 paper's scaling for the depth of the residual stream.
  if (config.family == ModelFamily::kGpt2 &&
      (name.ends_with("self_attn.o_proj.weight") || name.ends_with("mlp.down_proj.weight")))
    return {false, 0.f, std / std::sqrt(2.f * static_cast<float>(config.num_layers))};
  return {false, 0.f, std};
}

}  // namespace

// Counter-based (normal_fill, kernels/ops.h), so every element is a function of (seed, tensor index,
// element index) alone: on a GPU each tensor is drawn there and copied to the host (an 8B model's
// 8e9 draws take a minute on 16 cores, a second on an H200); on the CPU by all cores, each a range.
// The values depend on neither the device (to the last bit of libm's double math) nor the thread count.
void init_llama_params(LlamaParams& params, const LlamaConfig& config, uint64_t seed, float std, Device draw_on) {
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const auto named = params.named();
  for (size_t k = 0; k < named.size(); ++k) {
    Tensor& t = *named[k].second;
    SEQPAR_CHECK(
        t.device().is_cpu() && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16),
        "init_llama_params: {} is {} on {} (f32, bf16 or f16 on the CPU)", named[k].first, dtype_name(t.dtype()),
        t.device().str());
    const InitRule rule = init_rule(named[k].first, config, std);
    const uint64_t key = mix64(seed ^ mix64(0x9e3779b97f4a7c15ull * (k + 1)));
    const int64_t n = t.numel();
    Tensor flat = t.view({n});
    if (rule.constant) {
      const float v = rule.value;
      for (int64_t i = 0; i < n; ++i) {
        if (t.dtype() == DType::kF32) t.data<float>()[i] = v;
        else if (t.dtype() == DType::kBF16)
          t.data<bf16>()[i] = f32_to_bf16(v);
        else
          t.data<f16>()[i] = f32_to_f16(v);
      }
      continue;
    }
    const float sd = rule.sd;
    if (draw_on.is_cuda()) {
      Tensor d = Tensor::empty({n}, t.dtype(), draw_on);
      normal_fill(d, key, sd);
      flat.copy_from(d);
      continue;
    }
    const int64_t pairs = (n + 1) / 2;
    const int use = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, pairs / (1 << 16))));
    const int64_t per = (pairs + use - 1) / use;
    auto fill = [&](int64_t lo, int64_t hi) {  // pairs [lo, hi)
      if (lo >= hi) return;
      Tensor part = flat.rows(2 * lo, std::min(n, 2 * hi));
      normal_fill(part, key, sd, 2 * lo);
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < use; ++w) pool.emplace_back(fill, std::min(pairs, w * per), std::min(pairs, (w + 1) * per));
    fill(0, std::min(pairs, per));
    for (std::thread& th : pool) th.join();
  }
}

float lr_at(const TrainConfig& c, int64_t step) { return scheduled_lr(lr_schedule_of(c), step); }

std::pair<int64_t, int64_t> token_data_position(int64_t num_sequences, int64_t sequences_per_step, int64_t steps_done) {
  const int64_t steps_per_epoch = num_sequences / sequences_per_step;
  return {steps_done / steps_per_epoch, (steps_done % steps_per_epoch) * sequences_per_step};
}

void apply_document_mask(std::vector<Sequence>& rows, const DataSettings& d) {
  if (d.document_mask) return;
  for (Sequence& row : rows) {
    if (d.eod_mask_loss) {  // every later document's first token: no target
      size_t at = 0;
      for (const int32_t len : row.doc_lens) {
        if (at > 0) row.labels[at] = kIgnoreIndex;
        at += static_cast<size_t>(len);
      }
    }
    row.doc_lens.clear();  // one stream a row (Megatron's default)
  }
}

std::vector<Sequence> token_data_batch(const TokenDataset& data, const TrainConfig& c, int dp, int64_t step, int micro,
                                       int dp_rank) {
  const int64_t per_step = static_cast<int64_t>(c.data.micro_batch) * c.data.grad_accum * dp;
  SEQPAR_INPUT_CHECK(data.num_sequences() >= per_step,
                     "token file '{}': holds {} sequences of seq_len={}, fewer than one step reads (micro_batch × "
                     "grad_accum × dp = {} × {} × {} = {})",
                     data.file().path(), data.num_sequences(), data.seq_len(), c.data.micro_batch, c.data.grad_accum, dp,
                     per_step);
  auto [epoch, first] = token_data_position(data.num_sequences(), per_step, step - 1);
  first += (static_cast<int64_t>(micro) * dp + dp_rank) * c.data.micro_batch;
  std::vector<Sequence> rows;
  for (int j = 0; j < c.data.micro_batch; ++j) rows.push_back(data.get(epoch, first + j));
  apply_document_mask(rows, c.data);
  return rows;
}

std::string metrics_plot_path(const std::string& metrics_out) {
  std::filesystem::path p(metrics_out);
  if (p.extension() == ".svg") return metrics_out + ".svg";
  return p.replace_extension(".svg").string();
}

namespace {

using json = nlohmann::json;

// The metrics records of the run (kept for checkpoints and the plot) and, with a path, the JSONL
// file they are written to as they come. A resumed run starts the file again from the
// checkpoint's records, so the file reads as one run.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, std::vector<json> history) : path_(path), records_(std::move(history)) {
    if (path.empty()) return;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    out_.open(path, std::ios::trunc);
    SEQPAR_INPUT_CHECK(out_.good(), "metrics_out={}: cannot open for writing", path);
    for (const json& r : records_) out_ << r.dump() << "\n";
    flush();
  }
  void write(const json& record) {
    records_.push_back(record);
    if (!out_.is_open()) return;
    out_ << record.dump() << "\n";
    flush();
  }
  const std::vector<json>& records() const { return records_; }

 private:
  // A failed write (disk full, file-size limit) is an error naming the file, not a silent gap.
  void flush() {
    out_.flush();
    if (!out_.good()) throw Error(fmt::format("metrics_out={}: write failed: {}", path_, std::strerror(errno)));
  }
  std::string path_;
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
  int64_t labelled = 0;  // tokens with a label (mask 1)
  try {
    for (int64_t begin = 0; begin < file->num_tokens(); begin += kChunk) {
      const int64_t end = std::min(file->num_tokens(), begin + kChunk);
      file->read_tokens(begin, end, tokens.data(), vocab_size);
      file->read_loss_mask(begin, end, mask.data());
      for (int64_t i = 0; i < end - begin; ++i) labelled += mask[static_cast<size_t>(i)];
    }
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}={}: {} (the model's vocab_size is {}; was the file tokenized for another model?)",
                                 setting, path, e.what(), vocab_size));
  }
  // A document's first token is never a target (labels shift by one inside a document), so a
  // file whose only labelled tokens are first tokens has nothing to learn from either.
  for (int64_t d = 0; d < file->num_docs() && labelled > 0; ++d) {
    uint8_t first = 0;
    file->read_loss_mask(file->doc_begin(d), file->doc_begin(d) + 1, &first);
    labelled -= first;
  }
  SEQPAR_INPUT_CHECK(labelled > 0,
                     "{}={}: no token of its {} is a target (every loss mask value is 0, or only documents' first "
                     "tokens have one): a run on it has nothing to learn from",
                     setting, path,
                     file->num_docs() == 1 ? "one document" : fmt::format("{} documents", file->num_docs()));
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

// The checkpoint a run resumes from (nullopt: start fresh), per CheckpointSettings::resume.
std::optional<Checkpoint> checkpoint_to_resume(const TrainConfig& cfg, bool talk) {
  if (cfg.checkpoint.resume.none()) return std::nullopt;
  std::string dir;
  if (cfg.checkpoint.resume.from_save_dir()) {
    std::optional<std::string> latest = latest_checkpoint(cfg.checkpoint.save_dir);
    if (!latest) {
      SEQPAR_INPUT_CHECK(cfg.checkpoint.resume.kind == ResumeFrom::Kind::kAuto,
                         "resume=latest: save_dir={} holds no checkpoint (no {}/latest); use --resume auto to start "
                         "fresh when there is none",
                         cfg.checkpoint.save_dir, cfg.checkpoint.save_dir);
      if (talk) log_info("resume=auto: no checkpoint in {} yet: starting from step 1", cfg.checkpoint.save_dir);
      return std::nullopt;
    }
    // The newest that verifies; a corrupt newest falls back to the one before, said in the log.
    return load_newest_good_checkpoint(cfg.checkpoint.save_dir);
  }
  dir = resolve_checkpoint_dir(cfg.checkpoint.resume.path);
  return load_checkpoint(dir);
}

}  // namespace

MemoryPlanInput memory_plan_input(const TrainConfig& cfg, const LlamaConfig& model) {
  const MeshShape sp_shape = sp_mesh_shape(cfg.parallel.sp_mode, cfg.parallel.sp, cfg.parallel.ulysses_degree);
  MemoryPlanInput in;
  in.model = model;
  in.seq_len = cfg.data.task.seq_len;
  in.micro_batch = cfg.data.micro_batch;
  in.sp = cfg.parallel.sp;
  in.ulysses_degree = sp_shape.ulysses;
  in.world = cfg.parallel.sp * cfg.parallel.dp_replicate * cfg.parallel.dp_shard;
  in.cuda = cfg.parallel.device.is_cuda();
  in.cudnn_attention = cfg.model.attn_implementation == AttnImplementation::kSdpa;
  // The device's compute capability where it can be asked (a configuration printed on a machine without that GPU
  // plans for a Hopper, MemoryPlanInput's default).
  if (in.cuda && cfg.parallel.device.index < cuda_device_count())
    in.compute_capability = device_compute_capability(cfg.parallel.device);
  in.fp16 = cfg.precision.fp16();
  in.memory = cfg.memory;  // the levers, whole
  in.ulysses_head_groups = cfg.kernels.ulysses_head_groups;
  return in;
}

struct Trainer::State {
  MeshShape sp_shape, mesh_shape;
  SpLayout layout = SpLayout::kContiguous;
  int dp = 1;
  int64_t seqs_per_step = 0, seq_len = 0, tokens_per_step = 0;
  bool token_data = false;
  bool auto_placement = false;  // checkpoint_placement=auto: the memory plan chose the placement
  bool leads = false, talk = false;            // this process hosts the leader; and prints
  std::optional<std::vector<Sequence>> batch;  // run_batch's rows

  std::optional<Checkpoint> ckpt;
  std::unique_ptr<TokenDataset> data, eval_data;
  json data_id = nullptr, eval_id = nullptr;
  int eval_batches = 0;
  json config;                          // recorded in checkpoints, compared on resume
  std::string hash;                     // config_hash(config)
  LlamaParams initial;  // the weights every rank starts from, on the host in the compute dtype
  int64_t first_step = 1, last_step = 0;
  MemoryPlan plan;
  int ranks_per_device = 1;  // ranks that share one GPU

  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<SaveDirLock> lock;  // the save directory's, for the trainer's life
  int64_t nonfinite_in_a_row = 0;     // at the start of run(): the checkpoint's trailing skipped steps
  std::mutex mu;                      // guards result, initial, ckpt and last_saved between ranks
  std::string last_saved;             // the newest checkpoint written or resumed from
  TrainResult result;
  std::vector<std::pair<std::string, Tensor>> batch_out;  // run_batch's outputs

  // The leader's progress-line bookkeeping.
  std::chrono::steady_clock::time_point t_start, t_log;
  int64_t last_logged = 0;
  int64_t line_peak = 0;  // the largest step peak since the last progress line
};

Trainer::Trainer(const TrainConfig& config) : Trainer(config, {}) {}

Trainer::Trainer(const TrainConfig& config, std::vector<Sequence> batch) : cfg_(config), s_(std::make_unique<State>()) {
  State& s = *s_;
  if (!batch.empty()) s.batch = std::move(batch);
  if (s.batch) {
    cfg_.validate_run();
  } else {
    cfg_.validate();
  }
  validate_nonfinite_settings(cfg_);
  s.sp_shape = sp_mesh_shape(cfg_.parallel.sp_mode, cfg_.parallel.sp, cfg_.parallel.ulysses_degree);
  s.mesh_shape = s.sp_shape;
  s.mesh_shape.dp_replicate = cfg_.parallel.dp_replicate;
  s.mesh_shape.dp_shard = cfg_.parallel.dp_shard;
  s.layout = s.sp_shape.ring > 1 ? cfg_.parallel.layout : SpLayout::kContiguous;
  s.dp = s.mesh_shape.dp();
  s.seqs_per_step = static_cast<int64_t>(cfg_.data.micro_batch) * cfg_.data.grad_accum * s.dp;
  s.seq_len = cfg_.data.task.seq_len;
  s.tokens_per_step = s.seqs_per_step * s.seq_len;
  s.token_data = !cfg_.data.path.empty();
  // Under NCCL every process runs the trainer; one of them (rank 0's) prints and writes the
  // metrics file and the plot.
  check_job(s.mesh_shape.world(), cfg_.parallel.device, cfg_.parallel.transport);
  s.leads = hosts_leader(cfg_.parallel.device, cfg_.parallel.transport);
  s.talk = !cfg_.logging.quiet && s.leads;
  // Labels shift by one inside a sequence: a 1-token sequence has no token to predict.
  SEQPAR_INPUT_CHECK(s.batch || s.seq_len >= 2,
                     "seq_len={}: a sequence of one token has no next token to predict (labels shift by one), so "
                     "every step would have nothing to learn from; seq_len must be >= 2",
                     s.seq_len);
  // One trainer per save directory, locked before anything in it is read (the checkpoint to resume).
  if (!s.batch && s.leads && !cfg_.checkpoint.save_dir.empty()) s.lock = std::make_unique<SaveDirLock>(cfg_.checkpoint.save_dir);

  // Everything is read and checked before any rank starts: the checkpoint, the model, the data.
  s.ckpt = checkpoint_to_resume(cfg_, s.talk);
  model_config_ = cfg_.model.dir.empty() ? cfg_.model.arch : load_hf_llama_config(cfg_.model.dir);
  const LlamaConfig& mc = model_config_;
  validate_sp_heads(mc.num_heads, mc.num_kv_heads, s.sp_shape.ulysses);
  // Learned positions (gpt2): no position beyond n_positions. Positions restart per document: a given
  // batch's longest document counts (a row without doc_lens is one); a token file's documents are at
  // most seq_len long, and with document_mask false a sequence is one stream of seq_len positions.
  const int64_t longest = s.batch ? longest_document(*s.batch) : s.seq_len;
  mc.check_positions(longest, s.batch ? "seq_len (the batch's longest document)" : "seq_len");
  // RoPE: a longer sequence runs, but at positions the model's config does not claim.
  if (s.leads)
    if (const std::string w = rope_length_warning(mc, longest, s.batch ? "the batch's longest document" : "seq_len");
        !w.empty())
      log_warn("{}", w);
  if (cfg_.parallel.device.is_cuda()) {
    SEQPAR_INPUT_CHECK(cuda_built(), "device={}: this seqpar was built without CUDA (-DSEQPAR_CUDA=OFF)",
                       cfg_.parallel.device.str());
    std::string why;
    const int gpus = cuda_device_count(&why);
    SEQPAR_INPUT_CHECK(cfg_.parallel.device.index < gpus,
                       "device={}: {} ({} CUDA device(s) usable here): run it on a GPU machine, or --device cpu",
                       cfg_.parallel.device.str(), gpus == 0 ? why : "no such device", gpus);
    SEQPAR_INPUT_CHECK(cuda_attention_head_dim(mc.head_dim),
                       "device={}: head_dim={} is not supported by the CUDA attention kernels ({}); the "
                       "built-in model takes --head-dim",
                       cfg_.parallel.device.str(), mc.head_dim, kCudaAttentionHeadDims);
  }
  if (!s.token_data && !s.batch)
    SEQPAR_INPUT_CHECK(cfg_.data.task.vocab_size <= mc.vocab_size,
                       "the task's vocab_size={} exceeds the model's vocab_size={}", cfg_.data.task.vocab_size,
                       mc.vocab_size);
  s.eval_batches = cfg_.data.eval_batches;
  if (s.token_data) setup_data();
  s.ranks_per_device = job_transport(cfg_.parallel.transport, cfg_.parallel.device) == Transport::kLocal ? s.mesh_shape.world() : 1;
  s.auto_placement = cfg_.memory.checkpoint_placement == "auto";
  if (s.auto_placement) resolve_checkpoint_placement(mc);
  // The run's configuration, recorded in checkpoints and compared with the checkpoint's on resume.
  s.config = train_config_json(cfg_, mc, s.data_id, s.eval_id);
  s.hash = config_hash(s.config);
  if (s.ckpt) setup_resume();
  // What a rank will hold at the step's peak (train/memory_plan.h), said before the model is
  // allocated and any GPU work (one batch of seqpar fwdbwd is not planned); a CPU run the plan
  // says cannot fit in the host's memory does not start (a GPU's is checked by its rank).
  if (!s.batch) {
    s.plan = plan_memory(memory_plan_input(cfg_, mc));
    // The host memory the ranks will hold (offload buffers, host optimizer state and weights, the
    // initial weights' copy while they start), before any of it is allocated.
    check_host_memory(s.plan, s.ranks_per_device, cfg_.memory.host_memory_gib);
  }
  if (!s.batch && cfg_.parallel.device.is_cpu())
    check_plan_fits(s.plan, s.ranks_per_device, host_memory_bytes(), "this host",
                    [&] { return levers_hint(cfg_, mc, s.ranks_per_device, s.auto_placement); });
  setup_model();
  s.first_step = s.result.first_step;
  s.last_step = cfg_.checkpoint.stop_at_step > 0 ? std::min(cfg_.schedule.steps, cfg_.checkpoint.stop_at_step) : cfg_.schedule.steps;
  if (s.talk && !s.batch) log_setup();
  s.metrics = std::make_unique<MetricsLog>(s.leads && !s.batch ? cfg_.logging.metrics_out : std::string(),
                                           s.ckpt ? s.ckpt->state.metrics : std::vector<json>{});
}

Trainer::~Trainer() = default;

// The token files: opened and checked against the vocabulary, their identity for resume.
void Trainer::setup_data() {
  State& s = *s_;
  const int64_t V = model_config_.vocab_size;
  s.data =
      std::make_unique<TokenDataset>(open_token_file(cfg_.data.path, "data", V), s.seq_len, cfg_.schedule.seed, cfg_.data.shuffle, V);
  s.data_id = token_file_identity(s.data->file(), s.seq_len);
  TrainResult& r = s.result;
  r.num_sequences = s.data->num_sequences();
  SEQPAR_INPUT_CHECK(r.num_sequences >= s.seqs_per_step,
                     "data={}: holds {} sequences of seq_len={} ({} tokens), fewer than one step reads (micro_batch "
                     "× grad_accum × dp = {} × {} × {} = {})",
                     cfg_.data.path, r.num_sequences, s.seq_len, s.data->file().num_tokens(), cfg_.data.micro_batch,
                     cfg_.data.grad_accum, s.dp, s.seqs_per_step);
  r.steps_per_epoch = r.num_sequences / s.seqs_per_step;
  if (s.talk)
    log_info(
        "data: {}: {} tokens in {} documents -> {} sequences of {} tokens; {} sequences per step (micro_batch {} "
        "x grad_accum {} x dp {}) -> {} steps per epoch ({} sequences of each epoch unused); {} steps = {:.2f} "
        "epochs",
        cfg_.data.path, s.data->file().num_tokens(), s.data->file().num_docs(), r.num_sequences, s.seq_len,
        s.seqs_per_step, cfg_.data.micro_batch, cfg_.data.grad_accum, s.dp, r.steps_per_epoch,
        r.num_sequences - r.steps_per_epoch * s.seqs_per_step, cfg_.schedule.steps,
        static_cast<double>(cfg_.schedule.steps) / r.steps_per_epoch);
  if (cfg_.data.eval_path.empty()) return;
  s.eval_data = std::make_unique<TokenDataset>(open_token_file(cfg_.data.eval_path, "eval_data", V), s.seq_len,
                                               cfg_.schedule.seed, /*shuffle=*/false, V);
  s.eval_id = token_file_identity(s.eval_data->file(), s.seq_len);
  s.eval_id["path"] = cfg_.data.eval_path;
  const int64_t per_batch = static_cast<int64_t>(cfg_.data.micro_batch) * s.dp;
  SEQPAR_INPUT_CHECK(s.eval_data->num_sequences() >= per_batch,
                     "eval_data={}: holds {} sequences of seq_len={}, fewer than one evaluation batch (micro_batch × "
                     "dp = {})",
                     cfg_.data.eval_path, s.eval_data->num_sequences(), s.seq_len, per_batch);
  s.eval_batches =
      static_cast<int>(std::min<int64_t>(std::max(1, cfg_.data.eval_batches), s.eval_data->num_sequences() / per_batch));
  if (s.talk)
    log_info("eval data: {}: the first {} sequences, {} batch(es) of {}", cfg_.data.eval_path,
             s.eval_batches * per_batch, s.eval_batches, per_batch);
}

// resume, the trainer's half: the checkpoint's configuration against this run's, its data
// position, its history.
void Trainer::setup_resume() {
  State& s = *s_;
  const Checkpoint& ckpt = *s.ckpt;
  for (const std::string& w : check_resume_config(ckpt.state.config, s.config, ckpt.dir)) log_warn("{}", w);
  if (s.token_data) {
    const auto want = token_data_position(s.result.num_sequences, s.seqs_per_step, ckpt.state.step);
    SEQPAR_INPUT_CHECK(ckpt.state.data_epoch == want.first && ckpt.state.data_index == want.second,
                       "checkpoint '{}': trainer_state.json data position (epoch {}, index {}) is not where step {} "
                       "leaves the data (epoch {}, index {}): a corrupt checkpoint",
                       ckpt.dir, ckpt.state.data_epoch, ckpt.state.data_index, ckpt.state.step, want.first,
                       want.second);
  }
  TrainResult& r = s.result;
  r.losses = ckpt.state.losses;
  r.eval_accuracy = ckpt.state.eval_accuracy;
  r.eval_loss = ckpt.state.eval_loss;
  r.resumed_from = ckpt.dir;
  r.first_step = ckpt.state.step + 1;
  r.skipped_steps = ckpt.state.skipped_steps;
  r.overflow_steps = ckpt.state.overflow_steps;
  s.last_saved = ckpt.dir;
  // The guard's count of non-finite steps in a row goes on across the resume (fp16 overflows the
  // scaler took neither count nor break it).
  auto in = [](const std::vector<int64_t>& v, int64_t k) { return std::count(v.begin(), v.end(), k) > 0; };
  for (int64_t k = ckpt.state.step; k >= 1 && in(r.skipped_steps, k); --k)
    if (!in(r.overflow_steps, k)) ++s.nonfinite_in_a_row;
  if (s.talk) log_info("resuming from {} (step {})", ckpt.dir, ckpt.state.step);
}

// The weights every rank starts from (replicated over the mesh), on the host in the dtype the ranks
// compute in: bf16 or f16 for a GPU (the model's weights and the optimizer's f32 master weights are
// both made from that rounding, so nothing is lost) — half the host memory of an f32 copy, which sits
// beside the offloaded optimizer's state while the ranks start (an 8B model: 16 GB instead of 32).
void Trainer::setup_model() {
  State& s = *s_;
  const DType dtype = cfg_.precision.compute_dtype(cfg_.parallel.device);
  const auto t0 = std::chrono::steady_clock::now();
  if (s.ckpt) {
    s.initial = params_from_tensors(s.ckpt->model_config, s.ckpt->model, s.ckpt->dir, dtype);
  } else if (!cfg_.model.dir.empty()) {
    s.initial = load_hf_params(cfg_.model.dir, model_config_, dtype);
  } else {
    s.initial = LlamaParams::zeros(model_config_, dtype, Device::cpu());
    // Drawn on the run's first GPU where there is one (the same values: see init_llama_params).
    init_llama_params(s.initial, model_config_, cfg_.schedule.seed, cfg_.model.init_std,
                      cfg_.parallel.device.is_cuda() ? cfg_.parallel.device : Device::cpu());
  }
  if (s.talk) {
    const int64_t n = LlamaParams::flat_layout(model_config_).total;
    log_info("initial weights: {:.2f}B parameters ({}, {:.2f} GiB on the host) in {:.1f} s; {}",
             static_cast<double>(n) * 1e-9,
             s.ckpt ? "the checkpoint's" : cfg_.model.dir.empty() ? "random init" : "the model's files",
             static_cast<double>(n * static_cast<int64_t>(dtype_size(dtype))) / (1ll << 30),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), host_memory_note());
  }
}

void Trainer::log_setup() const {
  const State& s = *s_;
  const LlamaConfig& mc = model_config_;
  log_info(
      "train: {} layers, C={}, H={}, Hkv={}, V={} | world {} = dp {} x sp {} ({} ulysses x {} ring, {} layout) | {} "
      "sequences x {} tokens per step, steps {}..{} of {}",
      mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads, mc.vocab_size, s.mesh_shape.world(), s.dp, cfg_.parallel.sp,
      s.sp_shape.ulysses, s.sp_shape.ring, sp_layout_name(s.layout), s.seqs_per_step, s.seq_len, s.first_step,
      s.last_step, cfg_.schedule.steps);
  log_info("memory plan: {:.3f} GiB per rank at the step's peak ({}); `seqpar plan` gives the breakdown",
           static_cast<double>(s.plan.peak_bytes) / (1ll << 30), s.plan.peak_phase);
}

TrainResult Trainer::run() {
  State& s = *s_;
  SEQPAR_CHECK(!s.batch, "Trainer::run: a trainer of one batch runs with run_batch");
  if (s.first_step > s.last_step) {
    if (s.talk)
      log_info("the checkpoint is at step {}: nothing left to train (last step {})", s.first_step - 1, s.last_step);
    s.result.steps_run = s.first_step - 1;
    finish();
    return s.result;
  }
  if (s.mesh_shape.world() > 1) set_cpu_gemm_threads(1);
  s.t_start = s.t_log = std::chrono::steady_clock::now();
  s.last_logged = s.first_step - 1;
  const StopSignals signals;  // SIGTERM / SIGINT: stop after the current step, with a checkpoint
  run_job(s.mesh_shape.world(), cfg_.parallel.device, cfg_.parallel.transport, s.config.dump(), [this](JobRank& job) { run_rank(job); });
  finish();
  const int64_t ran = s.result.steps_run - s.first_step + 1;
  if (s.leads && ran > 0 && s.result.empty_steps == ran)
    throw Error(
        fmt::format("none of the {} step(s) {}..{} had a token with a label (every target -100: masked "
                    "labels, or sequences too short): nothing was learned; check the data's loss mask and "
                    "--seq-len",
                    ran, s.first_step, s.result.steps_run));
  return s.result;
}

// A rank: its model and optimizer, the resume, then the steps with their evaluations and saves.
void Trainer::run_rank(JobRank& job) {
  State& s = *s_;
  if (job.leader && job.device.is_cuda()) refuse_if_over_capacity(job.device);
  const auto t0 = std::chrono::steady_clock::now();
  TrainStep rank(job.world, s.mesh_shape, job.device, cfg_, model_config_, s.initial);
  restore(rank, job);
  if (job.leader && s.talk)
    log_info("ranks ready in {:.1f} s (model on {}, optimizer state{}); {}",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), job.device.str(),
             cfg_.memory.offload_optimizer == OffloadDevice::kCpu ? " in host memory" : " beside it",
             host_memory_note());
  const bool leader = job.leader;
  const int64_t profile_from = s.last_step > s.first_step ? s.first_step + 1 : s.first_step;
  const bool profile_rank = cfg_.logging.profile && leader;
  int64_t step = s.first_step;
  int64_t nonfinite_in_a_row = s.nonfinite_in_a_row;  // every rank counts alike (agreed flags)
  for (; step <= s.last_step; ++step) {
    const StepOutcome o = this->step(rank, leader, step, profile_rank && step >= profile_from);
    if (!o.overflow) nonfinite_in_a_row = o.nonfinite ? nonfinite_in_a_row + 1 : 0;  // an overflow is no divergence
    if (o.nonfinite && cfg_.checkpoint.on_nonfinite == "abort" && nonfinite_in_a_row >= cfg_.checkpoint.max_nonfinite_steps)
      abort_nonfinite(leader, step, nonfinite_in_a_row);
    bool stop = step == s.last_step || o.stop;
    if (!o.stop && ((cfg_.logging.eval_every > 0 && step % cfg_.logging.eval_every == 0) || step == cfg_.schedule.steps))
      stop = evaluate(rank, leader, step) || stop;
    if (!cfg_.checkpoint.save_dir.empty() && ((cfg_.checkpoint.save_every > 0 && step % cfg_.checkpoint.save_every == 0) || stop))
      save(rank, leader, step);
    if (o.stop && leader) {
      const int sig = stop_signal_pending();
      if (!cfg_.logging.quiet)
        log_info("stopped by {} after step {}{}", sig == SIGINT ? "SIGINT" : "SIGTERM", step,
                 cfg_.checkpoint.save_dir.empty() ? " (no --save-dir: nothing saved)" : "; resume with --resume");
      std::lock_guard<std::mutex> lock(s.mu);
      s.result.stop_signal = sig == 0 ? SIGTERM : sig;
    }
    if (stop) break;
  }
  rank.finish_update();  // (a stop by signal or evaluation may leave one in flight)
  if (profile_rank) {
    std::vector<ProfileEntry> profile = take_profile();
    std::lock_guard<std::mutex> lock(s.mu);
    s.result.profile = std::move(profile);
  }
  if (!leader) return;
  const int64_t done = step;  // the loop always leaves by `stop`
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t_start).count();
  std::lock_guard<std::mutex> lock(s.mu);
  s.result.steps_run = done;
  s.result.loss_scale = rank.loss_scaler().scale();
  s.result.tokens_per_s = static_cast<double>(s.tokens_per_step * (done - s.first_step + 1)) / std::max(secs, 1e-9);
}


std::string auto_checkpoint_placement(const TrainConfig& cfg, const LlamaConfig& model, int ranks_per_device) {
  const RankCapacity c = rank_capacity(cfg, ranks_per_device);
  const std::string chosen = choose_checkpoint_placement(memory_plan_input(cfg, model), c.gpu, c.host);
  return chosen.empty() ? chosen : compact_checkpoint_placement(chosen);
}

// checkpoint_placement=auto becomes the placement the memory plan chooses for this run's length, its
// device's memory (the host's for a CPU run) and the host memory, shared by the ranks of a device,
// before the configuration is recorded: every rank, --print-config and the checkpoint see the
// placement that runs. One batch of fwdbwd is not planned: its inputs stay on the device.
void Trainer::resolve_checkpoint_placement(const LlamaConfig& mc) {
  State& s = *s_;
  std::string& placement = cfg_.memory.checkpoint_placement;
  if (!cfg_.memory.activation_checkpointing) return;  // validate() names the setting
  if (s.batch) {
    placement.clear();
    return;
  }
  const Device device = cfg_.parallel.device;
  const std::string chosen = auto_checkpoint_placement(cfg_, mc, s.ranks_per_device);
  SEQPAR_INPUT_CHECK(!chosen.empty(),
                     "checkpoint_placement=auto: no placement of the layers' inputs fits seq_len={} in the {}'s memory "
                     "and the host's (every layer but one recomputed included); {}",
                     cfg_.data.task.seq_len, device.is_cuda() ? "GPU" : "host",
                     levers_hint(cfg_, mc, s.ranks_per_device, /*auto_placement=*/true));
  placement = chosen;
  if (s.talk) log_info("checkpoint placement (auto, by the memory plan): {}", placement);
}

// Checked before a rank allocates anything on the GPU: a run the plan says cannot fit stops here.
void Trainer::refuse_if_over_capacity(Device device) const {
  const State& s = *s_;
  check_plan_fits(s.plan, s.ranks_per_device, device_total_bytes(device), device.str(),
                  [&] { return levers_hint(cfg_, model_config_, s.ranks_per_device, s.auto_placement); });
}

// resume, the rank's half: the checkpoint's weights and optimizer state; then the host copies
// every rank started from are freed (a whole model, and a checkpoint's weights and optimizer
// state).
void Trainer::restore(TrainStep& rank, JobRank& job) {
  State& s = *s_;
  if (s.ckpt) {
    restore_from_checkpoint(*s.ckpt, rank.model().params(), rank.optimizer());
    rank.weights_restored();
    // fp16: the scaler goes on where it stood (a checkpoint without its state, a bf16 run's,
    // starts it afresh).
    if (rank.loss_scaler().enabled() && s.ckpt->state.loss_scaler)
      rank.loss_scaler().set_state(*s.ckpt->state.loss_scaler);
  }
  job.world.barrier();
  std::lock_guard<std::mutex> lock(s.mu);
  s.initial = LlamaParams();
  s.ckpt.reset();
  // The run's clocks start with the steps: the first progress line's tokens/s is its step's, not
  // the ranks' setup (an 8B model's offloaded optimizer state takes a while to allocate).
  s.t_start = s.t_log = std::chrono::steady_clock::now();
}

// This dp rank's micro-batches of a step.
std::vector<SpBatch> Trainer::step_batches(int64_t step, int dp_rank) const {
  const State& s = *s_;
  std::vector<SpBatch> micro;
  for (int m = 0; m < cfg_.data.grad_accum; ++m) {
    std::vector<Sequence> rows;
    if (s.batch) {
      rows = *s.batch;
    } else if (s.token_data) {
      rows = token_data_batch(*s.data, cfg_, s.dp, step, m, dp_rank);
    } else {
      const int64_t index = ((step - 1) * cfg_.data.grad_accum + m) * s.dp + dp_rank;
      rows = make_recall_batch(cfg_.data.task, cfg_.schedule.seed, index, cfg_.data.micro_batch);
    }
    micro.push_back(make_sp_batch(rows, cfg_.parallel.sp, s.layout));
  }
  return micro;
}

// One step. Whether to update, and whether to stop after it, are decided by every rank together
// (one all-reduce of three flags): the loss and the norm are already the same on every rank, but a
// signal reaches ranks (threads or processes) at different moments.
//
// fp16: a finite loss with a non-finite gradient norm is an overflow of the scaled backward, which
// the dynamic loss scaler takes (the step skipped, the scale lowered or the hysteresis spent); a
// static scale, or one already at min_loss_scale, leaves it to the non-finite guard, as does a
// non-finite loss (the forward itself overflowed: no scale helps; the scaler is then not updated).
Trainer::StepOutcome Trainer::step(TrainStep& rank, bool leader, int64_t step, bool profiled) {
  if (profiled) set_thread_profiling(true);
  const auto t_step = std::chrono::steady_clock::now();
  const StepLoss loss = rank.forward_backward(step_batches(step, rank.mesh().dp_rank()));
  const double norm = rank.grad_norm();
  const std::vector<int32_t> agreed =
      rank.agree({std::isfinite(loss.loss) ? 0 : 1, std::isfinite(norm) ? 0 : 1, stop_signal_pending() != 0 ? 1 : 0});
  const bool bad_loss = agreed[0] != 0, bad_grads = agreed[1] != 0;
  StepOutcome o;
  o.stop = agreed[2] != 0;
  // Never an update from NaN or inf; the update unscales with the scale the backward used.
  // The offloaded optimizer's host step overlaps the next step's forward, except at the last step
  // (which waits for its own: its time counts it, and the weights are final when it returns).
  if (!bad_loss && !bad_grads) rank.apply_update(lr_at(cfg_, step), norm, /*overlap=*/step < s_->last_step);
  LossScaler& scaler = rank.loss_scaler();
  if (scaler.enabled() && !bad_loss) {
    o.scale = scaler.update(bad_grads);
    o.overflow = bad_grads && o.scale.absorbed;
    o.nonfinite = bad_grads && !o.scale.absorbed;
  } else {
    o.scale.scale_before = o.scale.scale_after = scaler.scale();
    o.nonfinite = bad_loss || bad_grads;
  }
  // A timed step ends when its own stream is done: work of another stream that overlaps the next step
  // counts in the next step, as far as it delays it (the profile waits for every stream).
  if (cfg_.logging.profile) {
    synchronize_device(rank.device());
  } else if (cfg_.logging.time_steps) {
    synchronize_current_stream(rank.device());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();
  if (profiled) set_thread_profiling(false);  // evaluation and checkpoints are not the step
  if (leader) record_step(rank.device(), step, secs, loss, norm, profiled, o);
  return o;
}

// on_nonfinite=abort at its limit: every rank throws at the same step (the flag was agreed), so no
// rank waits on another; nothing of this step was applied or saved.
void Trainer::abort_nonfinite(bool leader, int64_t step, int64_t in_a_row) {
  State& s = *s_;
  std::string saved;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    saved = s.last_saved;
  }
  std::string where;
  if (cfg_.checkpoint.save_dir.empty() && saved.empty()) {
    where = "no --save-dir: nothing was saved";
  } else if (!saved.empty()) {
    where = fmt::format("the last checkpoint, {}, is intact (resume from it with a lower --lr)", saved);
  } else {
    where = s.leads ? std::string("no checkpoint was saved yet") : std::string("rank 0 names the last checkpoint");
  }
  (void)leader;
  // fp16: why the loss scaler did not take it.
  std::string fp16;
  if (cfg_.precision.fp16())
    fp16 = cfg_.precision.scaler.dynamic()
               ? fmt::format(
                     " (fp16: a non-finite loss, or an overflow with the loss scale at min_loss_scale={}, "
                     "which DeepSpeed stops at too)",
                     cfg_.precision.scaler.min_loss_scale)
               : fmt::format(
                     " (fp16 with the static loss_scale={}: an overflow is not the scaler's to absorb; "
                     "--loss-scale 0 scales dynamically)",
                     cfg_.precision.scaler.loss_scale);
  throw Error(fmt::format(
      "step {}: the loss or the gradient norm is not finite (NaN or inf){}{}: the run stops (on_nonfinite=abort, "
      "max_nonfinite_steps={}); this step's update was not applied, {}. Lower --lr, clip the gradients (--clip), or "
      "give --on-nonfinite skip to skip such steps",
      step, fp16, in_a_row > 1 ? fmt::format(", the {}th such step in a row", in_a_row) : std::string(),
      cfg_.checkpoint.max_nonfinite_steps, where));
}

// The leader's record of a step: its loss, time and memory peak; a progress line and a metrics
// record at the steps that do not depend on where a run was stopped or resumed (so a resumed
// run's records are the uninterrupted run's), a progress line also at the first and last step of
// this call.
void Trainer::record_step(Device device, int64_t step, double secs, const StepLoss& loss, double norm, bool profiled,
                          const StepOutcome& o) {
  const bool skipped = o.skipped();
  State& s = *s_;
  // This step's peak; the allocator then counts the next step's from here.
  Allocator& mem = allocator_for(device);
  const int64_t peak = static_cast<int64_t>(mem.peak_bytes());
  const int64_t rank_peak = static_cast<int64_t>(mem.rank_peak_bytes());
  // What stays allocated between steps (the resident state, plus anything a step leaves behind).
  log_debug("step {}: device memory {:.3f} GiB in use at the step's end, {:.3f} GiB at its peak", step,
            static_cast<double>(mem.current_bytes()) / (1ll << 30), static_cast<double>(peak) / (1ll << 30));
  mem.reset_peak();
  s.line_peak = std::max(s.line_peak, peak);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (profiled) {
      s.result.profile_steps += 1;
      s.result.profile_seconds += secs;
    }
    s.result.losses.push_back(loss.loss);
    s.result.step_seconds.push_back(secs);
    s.result.step_peak_bytes.push_back(peak);
    s.result.step_rank_peak_bytes.push_back(rank_peak);
    s.result.peak_mem_bytes = std::max(s.result.peak_mem_bytes, peak);
    if (skipped) s.result.skipped_steps.push_back(step);
    if (o.overflow) s.result.overflow_steps.push_back(step);
    if (loss.good_tokens == 0) s.result.empty_steps += 1;
  }
  const bool empty = loss.good_tokens == 0;
  if (empty && s.result.empty_steps == 1 && !cfg_.logging.quiet)
    log_warn(
        "step {}: the batch holds no token with a label (every target is -100): nothing to learn from; such "
        "steps are counted and the run is refused if every step is one",
        step);
  // A skipped step is always said and recorded (a property of the run, not of where it stopped).
  const bool record = step == 1 || step % cfg_.logging.log_every == 0 || step == cfg_.schedule.steps || skipped;
  if (record || step == s.first_step || step == s.last_step) log_progress(step, loss.loss, norm, record, o, empty);
}

// A progress line; with `record`, the metrics record too.
void Trainer::log_progress(int64_t step, double loss, double norm, bool record, const StepOutcome& o, bool empty) {
  const bool skipped = o.skipped();
  State& s = *s_;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - s.t_log).count();
  // The device allocator's peak since the last progress line (every rank of this process on that
  // device: with ranks as threads on one GPU, all of them).
  const double peak_gib = static_cast<double>(s.line_peak) / (1024.0 * 1024.0 * 1024.0);
  s.line_peak = 0;
  const double tps = static_cast<double>(s.tokens_per_step * (step - s.last_logged)) / std::max(secs, 1e-9);
  s.t_log = now;
  s.last_logged = step;
  const float lr = lr_at(cfg_, step);
  const size_t skipped_total = s.result.skipped_steps.size();  // the leader's, like this call
  std::string note;
  const bool fp16 = cfg_.precision.fp16();
  if (fp16) note += fmt::format(" | loss_scale {:g}", o.scale.scale_before);
  if (o.overflow) {
    // DeepSpeed's "OVERFLOW! Skipping step. Attempted loss scale: 65536, reducing to 32768".
    note += o.scale.scale_after != o.scale.scale_before
                ? fmt::format(" | SKIPPED: fp16 overflow, loss scale {:g} -> {:g}", o.scale.scale_before,
                              o.scale.scale_after)
                : fmt::format(" | SKIPPED: fp16 overflow, loss scale kept (hysteresis {} -> {})",
                              o.scale.hysteresis_before, o.scale.hysteresis_after);
    note += fmt::format(", no update ({} skipped so far)", skipped_total);
  } else if (skipped) {
    note += fmt::format(" | SKIPPED: non-finite loss or grad_norm, no update ({} skipped so far)", skipped_total);
  }
  if (empty) note += " | no token with a label: nothing to learn from";
  if (!cfg_.logging.quiet)
    log_info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | {:.0f} tokens/s | peak {}{}", step,
             cfg_.schedule.steps, loss, lr, norm, tps,
             peak_gib >= 1 ? fmt::format("{:.2f} GiB", peak_gib) : fmt::format("{:.1f} MiB", peak_gib * 1024), note);
  // NaN and inf are written as null (JSON has neither).
  json r = {{"step", step}, {"loss", loss},      {"tokens_per_s", tps},
            {"lr", lr},     {"grad_norm", norm}, {"peak_mem_gib", peak_gib}};
  if (fp16) r["loss_scale"] = o.scale.scale_before;
  if (skipped) {
    r["skipped"] = true;
    r["skipped_steps"] = skipped_total;
  }
  if (o.overflow) r["overflow"] = true;
  if (empty) r["no_trainable_tokens"] = true;
  if (s.token_data) r["epoch"] = (step - 1) / s.result.steps_per_epoch;
  if (record) s.metrics->write(r);
}

bool Trainer::evaluate(TrainStep& rank, bool leader, int64_t step) {
  State& s = *s_;
  if (s.eval_data) evaluate_loss(rank, leader, step);
  if (s.token_data) return false;
  const double acc = evaluate_recall(rank, leader, step);
  // Every rank must stop at the same step: take the decision of any rank that reached it (they
  // all evaluate the same batches, but nothing else guarantees bit-equal accuracies).
  Tensor reached = Tensor::from_vector<int32_t>({1}, {cfg_.logging.stop_at_accuracy > 0 && acc >= cfg_.logging.stop_at_accuracy});
  rank.world().all_reduce(reached, ReduceOp::kMax);
  if (!reached.data<int32_t>()[0]) return false;
  if (leader && !cfg_.logging.quiet) log_info("reached {:.1f}% >= stop_at_accuracy; stopping", 100 * acc);
  return true;
}

// The recall task: accuracy of the answers, from the logits gathered over the SP group.
double Trainer::evaluate_recall(TrainStep& rank, bool leader, int64_t step) {
  State& s = *s_;
  int64_t correct = 0, total = 0;
  for (int e = 0; e < cfg_.data.eval_batches; ++e) {
    std::vector<Sequence> rows = make_recall_batch(cfg_.data.task, cfg_.schedule.seed + 0x5eed, e, cfg_.data.micro_batch);
    SpBatch b = make_sp_batch(rows, cfg_.parallel.sp, s.layout);
    Tensor logits;
    rank.forward(b, &logits);
    std::vector<float> stream = rank.gather_logits(b, logits).to_f32_vector();
    auto [c, t] = recall_accuracy(rows, stream, model_config_.vocab_size);
    correct += c;
    total += t;
  }
  const double acc = total ? static_cast<double>(correct) / total : 0.0;
  if (leader) {
    if (!cfg_.logging.quiet) log_info("eval step {:>5} | recall accuracy {:.1f}% ({}/{})", step, 100 * acc, correct, total);
    s.metrics->write({{"step", step}, {"eval_accuracy", acc}});
    std::lock_guard<std::mutex> lock(s.mu);
    s.result.eval_accuracy.emplace_back(step, acc);
  }
  return acc;
}

// --eval-data: the token-weighted mean loss over the first eval_batches × micro_batch × dp
// sequences of the file (file order), each dp rank its own micro-batches.
void Trainer::evaluate_loss(TrainStep& rank, bool leader, int64_t step) {
  State& s = *s_;
  const int dp_rank = rank.mesh().dp_rank();
  double loss_sum = 0;
  int64_t good = 0;
  for (int e = 0; e < s.eval_batches; ++e) {
    std::vector<Sequence> rows;
    const int64_t first = (static_cast<int64_t>(e) * s.dp + dp_rank) * cfg_.data.micro_batch;
    for (int j = 0; j < cfg_.data.micro_batch; ++j) rows.push_back(s.eval_data->get(0, first + j));
    apply_document_mask(rows, cfg_.data);  // as the training rows
    SpBatch b = make_sp_batch(rows, cfg_.parallel.sp, s.layout);
    loss_sum += rank.forward(b).loss_sum;
    if (rank.mesh().sp_rank() == 0) good += b.good_tokens;  // the whole batch's count, once per SP group
  }
  Tensor loss_t = Tensor::from_vector<float>({1}, {static_cast<float>(loss_sum)});
  Tensor good_t = Tensor::from_vector<int64_t>({1}, {good});
  rank.world().all_reduce(loss_t, ReduceOp::kSum);
  rank.world().all_reduce(good_t, ReduceOp::kSum);
  const int64_t g = good_t.data<int64_t>()[0];
  const double loss = g > 0 ? loss_t.data<float>()[0] / g : 0.0;
  if (!leader) return;
  if (!cfg_.logging.quiet) log_info("eval step {:>5} | eval loss {:.4f} ({} tokens)", step, loss, g);
  s.metrics->write({{"step", step}, {"eval_loss", loss}});
  std::lock_guard<std::mutex> lock(s.mu);
  s.result.eval_loss.emplace_back(step, loss);
}

namespace {

// "<what>.<name>" of the first tensor of a checkpoint's contents holding NaN or inf, or "".
std::string first_nonfinite_tensor(const CheckpointContents& c) {
  for (auto [what, p] : {std::pair<const char*, const LlamaParams*>{"weights", c.weights},
                         {"exp_avg", c.exp_avg},
                         {"exp_avg_sq", c.exp_avg_sq}})
    for (auto& [name, t] : p->named())
      if (!std::isfinite(sum_squares(*t))) return fmt::format("{} {}", what, name);
  return "";
}

}  // namespace

// A checkpoint after `step` (a collective: a sharded optimizer's whole state is assembled from
// every rank's shard); every rank waits for the save, so a run that stops here is resumable once
// it returns.
void Trainer::save(TrainStep& rank, bool leader, int64_t step) {
  State& s = *s_;
  AdamW& adamw = rank.optimizer();
  std::optional<AdamW::FullState> full;
  if (adamw.flat()) full = adamw.full_state(rank.world(), model_config_);
  std::string bad;  // the leader's: a tensor of the state that is not finite
  if (leader) {
    TrainerState st;
    st.step = step;
    st.seed = cfg_.schedule.seed;
    st.data_source = s.token_data ? "tokens" : "recall";
    if (s.token_data) {
      std::tie(st.data_epoch, st.data_index) = token_data_position(s.result.num_sequences, s.seqs_per_step, step);
    } else {
      st.data_index = step * cfg_.data.grad_accum * s.dp;  // the next recall batch index
    }
    st.config = s.config;
    st.config_hash = s.hash;
    st.config_text = cfg_.config_text;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      st.losses = s.result.losses;
      st.eval_accuracy = s.result.eval_accuracy;
      st.eval_loss = s.result.eval_loss;
    }
    st.metrics = s.metrics->records();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      st.skipped_steps = s.result.skipped_steps;
      st.overflow_steps = s.result.overflow_steps;
    }
    if (rank.loss_scaler().enabled()) st.loss_scaler = rank.loss_scaler().state();
    const bool has_master = adamw.has_master();
    LlamaParams& params = rank.model().params();
    LlamaParams& weights = full ? (has_master ? full->master : params) : adamw.weights(params);
    CheckpointContents c{&model_config_,
                         &weights,
                         full ? &full->exp_avg : &adamw.exp_avg(),
                         full ? &full->exp_avg_sq : &adamw.exp_avg_sq(),
                         has_master ? &weights : nullptr,
                         adamw.step_count(),
                         std::move(st)};
    bad = first_nonfinite_tensor(c);
    if (bad.empty()) {
      const std::string path = save_checkpoint(cfg_.checkpoint.save_dir, c, cfg_.checkpoint.keep_last);
      if (!cfg_.logging.quiet) log_info("saved checkpoint {}", path);
      std::lock_guard<std::mutex> lock(s.mu);
      s.result.checkpoints.push_back(path);
      s.last_saved = path;
    }
  }
  // Never a checkpoint holding NaN or inf (it could not be resumed, and keep_last would then delete
  // a good one): every rank stops together.
  if (rank.agree({bad.empty() ? 0 : 1})[0] != 0)
    throw Error(
        fmt::format("step {}: {} holds NaN or inf: the checkpoint is not written (the last one, {}, is "
                    "intact); the optimizer state overflowed: lower --lr or clip the gradients (--clip)",
                    step, bad.empty() ? std::string("the optimizer state") : bad,
                    s.last_saved.empty() ? std::string("none yet") : s.last_saved));
  rank.world().barrier();
}

// The data position after the last step, and the metrics plot.
void Trainer::finish() {
  State& s = *s_;
  if (s.token_data)
    std::tie(s.result.data_epoch, s.result.data_index) =
        token_data_position(s.result.num_sequences, s.seqs_per_step, s.result.steps_run);
  if (cfg_.logging.metrics_out.empty() || !s.leads) return;
  const std::string plot = metrics_plot_path(cfg_.logging.metrics_out);
  write_metrics_svg(plot, s.metrics->records(), "seqpar train: " + (s.token_data ? cfg_.data.path : "recall task"));
  if (s.talk) log_info("metrics: {}, plot: {}", cfg_.logging.metrics_out, plot);
}

std::vector<std::pair<std::string, Tensor>> Trainer::run_batch(bool optimizer_step) {
  State& s = *s_;
  SEQPAR_CHECK(s.batch.has_value(), "Trainer::run_batch: a trainer of a data source runs with run()");
  if (s.mesh_shape.world() > 1) set_cpu_gemm_threads(1);
  run_job(s.mesh_shape.world(), cfg_.parallel.device, cfg_.parallel.transport, s.config.dump(), [&](JobRank& job) {
    TrainStep rank(job.world, s.mesh_shape, job.device, cfg_, model_config_, s.initial);
    const std::vector<SpBatch> micro = step_batches(1, rank.mesh().dp_rank());
    const SpBatch& b = micro.back();
    Tensor logits;
    const StepLoss loss = rank.forward_backward(micro, &logits);
    if (loss.good_tokens == 0 && job.leader) log_warn("the batch has no token with a label: loss and gradients are 0");
    // The logits of every rank, in stream order (a collective: every rank).
    const Tensor stream = rank.gather_logits(b, logits);
    double norm = 0;
    if (optimizer_step) {
      // Never an update from NaN or inf (as in the training step): with fp16 an overflow of the
      // scaled backward, which one batch cannot retry at a lower scale.
      norm = rank.grad_norm();
      const bool finite = rank.agree({std::isfinite(norm) ? 0 : 1})[0] == 0;
      if (finite) rank.apply_update(cfg_.optimizer.adamw.lr, norm);
      if (!finite && job.leader)
        log_warn("the gradient norm is not finite{}: the AdamW step was not taken (param.* are the weights before it)",
                 cfg_.precision.fp16() ? fmt::format(" (fp16: the backward overflowed at loss scale {:g}; a smaller "
                                                     "--initial-scale-power or a static --loss-scale avoids it)",
                                                     rank.loss_scaler().scale())
                                       : std::string());
    }
    if (!job.leader) return;
    std::vector<std::pair<std::string, Tensor>> out;
    const int64_t B = static_cast<int64_t>(s.batch->size()),
                  S = static_cast<int64_t>(s.batch->front().input_ids.size());
    const int64_t V = model_config_.vocab_size;
    out.emplace_back("logits", stream.rows(0, B * S).clone().view({B, S, V}));
    out.emplace_back("loss", Tensor::from_vector<float>({1}, {static_cast<float>(loss.loss)}));
    // In the HF checkpoint's names and layout (train/hf_model.h: GPT-2's differ from seqpar's).
    const LlamaParams& grads = rank.model().grads();
    // fp16: the gradients of the scaled loss, unscaled for the output (a power of two: exact).
    const float unscale = static_cast<float>(1.0 / rank.loss_scaler().scale());
    for (auto& [name, g] : to_hf_tensors(model_config_, grads.named())) {
      if (unscale != 1.f) scale_inplace(g, unscale);
      out.emplace_back("grad." + name, g);
    }
    if (optimizer_step) {
      out.emplace_back("grad_norm", Tensor::from_vector<float>({1}, {static_cast<float>(norm)}));
      // The f32 weights (the master copy on bf16 models).
      const LlamaParams& weights = rank.optimizer().weights(rank.model().params());
      for (auto& [name, p] : to_hf_tensors(model_config_, weights.named())) out.emplace_back("param." + name, p);
    }
    std::lock_guard<std::mutex> lock(s.mu);
    s.batch_out = std::move(out);
  });
  return std::move(s.batch_out);
}

TrainResult run_training(const TrainConfig& config) { return Trainer(config).run(); }

}  // namespace seqpar
