// seqpar train: the training loop. With no arguments: the embedded demo (a tiny Llama learns
// associative recall across a sequence split over 4 in-process ranks). docs/training.md lists
// every option.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "comm/dist_env.h"
#include "core/log.h"
#include "core/profile.h"
#include "io/hf_config.h"
#include "train/config_resolve.h"
#include "train/trainer.h"

namespace seqpar {

namespace {

struct TrainArgs {
  TrainConfig config;
  std::string sp_mode = "ulysses", layout = "zigzag";
  std::string deepspeed_config, accelerate_config;
  bool print_config = false;
  bool no_shuffle = false;
  std::string device = "cpu";
  std::string transport = "auto";
  // Sizes of the built-in model (0: the demo's).
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
};

// The built-in model: the demo's tiny Llama, with any size given on the command line.
LlamaConfig builtin_model(const TrainArgs& a) {
  LlamaConfig m = demo_model_config();
  if (a.hidden_size) m.hidden_size = a.hidden_size;
  if (a.intermediate_size) m.intermediate_size = a.intermediate_size;
  if (a.num_layers) m.num_layers = a.num_layers;
  if (a.num_heads) m.num_heads = a.num_heads;
  if (a.num_kv_heads) m.num_kv_heads = a.num_kv_heads;
  if (a.head_dim) m.head_dim = a.head_dim;
  return m;
}

// The settings of this command that the config files do not carry (data, checkpoints), added to
// the printed configuration after metrics_out with their source: the flag, or the default.
void add_data_and_checkpoint_settings(ResolvedConfig& r, const std::set<std::string>& given) {
  const TrainConfig& c = r.train;
  auto source = [&](const char* flag) { return given.count(flag) ? std::string(flag) : std::string("default"); };
  auto text = [](const std::string& v) { return v.empty() ? std::string("(none)") : v; };
  const std::vector<ResolvedSetting> extra = {
      {"data", c.data_path.empty() ? std::string("built-in recall task") : c.data_path, source("--data")},
      {"eval_data", text(c.eval_data_path), source("--eval-data")},
      {"shuffle", c.shuffle ? "true" : "false", source("--no-shuffle")},
      {"eval_batches", std::to_string(c.eval_batches), source("--eval-batches")},
      {"save_dir", text(c.save_dir), source("--save-dir")},
      {"save_every", std::to_string(c.save_every), source("--save-every")},
      {"keep_last", std::to_string(c.keep_last), source("--keep-last")},
      {"resume", text(c.resume), source("--resume")},
      {"stop_at_step", std::to_string(c.stop_at_step), source("--stop-at-step")},
  };
  auto at = std::find_if(r.settings.begin(), r.settings.end(),
                         [](const ResolvedSetting& s) { return s.name == "metrics_out"; });
  r.settings.insert(at == r.settings.end() ? at : at + 1, extra.begin(), extra.end());
}

void run(TrainArgs& a, const CLI::App& command) {
  // defaults < DeepSpeed JSON < Accelerate YAML < the flags given (train/config_resolve.h).
  CommandLine cli;
  cli.values = a.config;
  cli.values.sp_mode = parse_sp_mode(a.sp_mode, "--sp-mode");
  cli.values.layout = parse_sp_layout(a.layout, "--sp-layout");
  cli.values.shuffle = !a.no_shuffle;
  for (const CLI::Option* o : command.get_options())
    if (o->count() > 0) cli.given.insert(o->get_name());
  if (cli.given.count("--resume") && cli.values.resume.empty()) cli.values.resume = "latest";  // `--resume` alone
  cli.values.device = parse_device(a.device);
  cli.values.transport = parse_transport(a.transport);
  // One rank per process over NCCL: the launch decides the world (run_job refuses NCCL without a GPU).
  if (cli.values.device.is_cuda() && job_transport(cli.values.transport, cli.values.device) == Transport::kNccl) {
    const DistEnv env = read_dist_env(process_env());
    cli.launch_world = env.world_size;
    cli.launch_source = env.world_size == 1 ? std::string("one process: no launcher")
                                            : fmt::format("the launch: {}, {} processes",
                                                          convention_name(env.convention), env.world_size);
  }
  ResolvedConfig resolved = resolve_train_config(cli, a.deepspeed_config, a.accelerate_config);
  TrainConfig& c = resolved.train;
  c.kernels = process_kernel_policy();
  for (const char* flag : {"--hidden-size", "--intermediate-size", "--num-layers", "--num-heads", "--num-kv-heads",
                           "--head-dim"})
    SEQPAR_INPUT_CHECK(c.model_dir.empty() || !cli.given.count(flag),
                       "{} sizes the built-in model; with --model={} the sizes come from its config.json", flag,
                       c.model_dir);
  if (c.model_dir.empty()) c.model = builtin_model(a);
  add_data_and_checkpoint_settings(resolved, cli.given);
  c.validate();
  c.config_text = format_resolved_config(resolved);
  if (a.print_config) {
    std::fputs(c.config_text.c_str(), stdout);
    // And what it will hold per GPU (seqpar plan's table for this configuration).
    const LlamaConfig model = c.model_dir.empty() ? c.model : load_hf_llama_config(c.model_dir);
    const MemoryPlanInput in = memory_plan_input(c, model);
    std::fputs(("\n" + format_memory_plan(in, plan_memory(in), /*capacity_bytes=*/0)).c_str(), stdout);
    return;
  }
  for (const std::string& w : resolved.warnings) log_warn("{}", w);
  TrainResult r = run_training(c);
  if (r.losses.empty()) return;
  std::string evals;
  if (!r.eval_accuracy.empty()) evals += fmt::format(", recall accuracy {:.1f}%", 100 * r.eval_accuracy.back().second);
  if (!r.eval_loss.empty()) evals += fmt::format(", eval loss {:.4f}", r.eval_loss.back().second);
  log_info("done: {} steps, final loss {:.4f}{}, {:.0f} tokens/s", r.steps_run, r.losses.back(), evals, r.tokens_per_s);
  if (c.profile && r.profile_steps > 0)
    log_info("profile of rank 0's steps after the first ({} steps, {:.1f} s of wall), summed:\n{}", r.profile_steps,
             r.profile_seconds, format_profile(r.profile, r.profile_seconds * 1e3, 40));
}

}  // namespace

void add_train_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<TrainArgs>();
  TrainConfig& c = args->config;
  // The embedded default: sp = 4 ranks (threads), the recall task, stop once it is learned.
  c.task.seq_len = 128;
  c.micro_batch = 16;
  c.steps = 600;
  c.optimizer.adamw.lr = 3e-3f;
  c.optimizer.adamw.weight_decay = 0.01f;
  c.optimizer.clip = 1.0;
  c.warmup_steps = 30;
  c.eval_every = 25;
  c.stop_at_accuracy = 0.95;
  CLI::App* t = app.add_subcommand(
      "train",
      "Train a model. With no arguments: the embedded demo, a tiny Llama learning associative recall over a "
      "sequence split across 4 in-process ranks");
  t->add_option("--model", c.model_dir, "HF model directory to start from (default: the built-in tiny Llama)");
  t->add_option("--device", args->device, "cpu | cuda | cuda:N (CUDA: bf16 compute, f32 gradients and master "
                                          "weights; every rank on that GPU)")
      ->capture_default_str();
  t->add_option("--transport", args->transport,
                "auto | local | nccl: ranks as threads of this process (local), or one process per rank and GPU over "
                "NCCL when started by seqpar launch / torchrun / Slurm / mpirun (auto: nccl when launched with "
                "--device cuda)")
      ->capture_default_str();
  t->add_flag("--activation-checkpointing,--gradient-checkpointing", c.activation_checkpointing,
              "keep only each decoder layer's input in forward and recompute the layer in backward (HF's "
              "gradient_checkpointing: the same gradients, far less activation memory, about one more forward)");
  t->add_option("--attn-implementation", c.attn_implementation,
                "Hugging Face's attn_implementation: flash_attention_2 or flash_attention_3 (seqpar's flash "
                "kernel), sdpa (cuDNN fused attention on CUDA where exact, the flash kernel elsewhere: faster at "
                "long sequences, see docs/training.md); eager is rejected (it materialises the [S,S] scores)")
      ->capture_default_str();
  t->add_flag("--profile", c.profile,
              "time every op (GEMM by shape, attention, norms, loss, optimizer) of rank 0's steps after the first on "
              "the device, and print the table at the end (synchronises after each step)");
  t->add_flag("--checkpoint-offload", c.checkpoint_offload,
              "with --activation-checkpointing: each layer's kept input waits in host memory (pinned; the copies "
              "overlap with compute) between its forward and its backward, so the GPU holds about two layers' "
              "inputs instead of all (ALST's checkpoint offload)");
  t->add_flag("--checkpoint-keep-attention", c.checkpoint_keep_attention,
              "with --activation-checkpointing: also keep each layer's attention output and context (q, k, v, "
              "LSE: O(tokens)), so backward recomputes the norms and the MLP but not attention or its "
              "communication");
  t->add_option("--tiled-mlp-tokens", c.mlp_tile_tokens,
                "tiled MLP (ALST's TiledMLP): run each layer's MLP over tiles of this many tokens of a rank's "
                "shard, recomputed in backward, so the [tokens, intermediate] tensors exist one tile at a time "
                "(0 = untiled)")
      ->capture_default_str();
  t->add_option("--tiled-loss-tokens", c.loss_tile_tokens,
                "tiled loss: the LM head and cross-entropy over tiles of this many tokens, never a [tokens, "
                "vocab] logits tensor (recomputed per tile in backward; 0 = untiled)")
      ->capture_default_str();
  t->add_option("--zero-stage", c.zero_stage,
                "ZeRO (DeepSpeed's zero_optimization.stage): 1 shards the AdamW state (moments, f32 master weights) "
                "over the ranks; 2 also partitions the gradients; 3 runs as 2 (weights stay whole); 0 = replicated")
      ->capture_default_str();
  t->add_option("--hidden-size", args->hidden_size, "built-in model: hidden size (demo: 64)");
  t->add_option("--intermediate-size", args->intermediate_size, "built-in model: MLP width (demo: 128)");
  t->add_option("--num-layers", args->num_layers, "built-in model: layers (demo: 2)");
  t->add_option("--num-heads", args->num_heads, "built-in model: query heads (demo: 4)");
  t->add_option("--num-kv-heads", args->num_kv_heads, "built-in model: KV heads (demo: 2)");
  t->add_option("--head-dim", args->head_dim, "built-in model: head dim (demo: 16; CUDA needs 64 or 128)");
  t->add_option("--steps", c.steps, "optimizer steps")->capture_default_str();
  t->add_option("--seq-len", c.task.seq_len, "tokens per sequence")->capture_default_str();
  t->add_option("--micro-batch", c.micro_batch, "sequences per micro-batch per data-parallel rank")
      ->capture_default_str();
  t->add_option("--grad-accum", c.grad_accum, "micro-batches accumulated per step")->capture_default_str();
  t->add_option("--lr", c.optimizer.adamw.lr, "peak learning rate")->capture_default_str();
  t->add_option("--warmup-steps", c.warmup_steps, "linear warmup steps")->capture_default_str();
  t->add_option("--min-lr-ratio", c.min_lr_ratio, "cosine decay floor as a fraction of lr")->capture_default_str();
  t->add_option("--weight-decay", c.optimizer.adamw.weight_decay, "AdamW weight decay")->capture_default_str();
  t->add_option("--beta1", c.optimizer.adamw.beta1, "AdamW beta1")->capture_default_str();
  t->add_option("--beta2", c.optimizer.adamw.beta2, "AdamW beta2")->capture_default_str();
  t->add_option("--clip", c.optimizer.clip, "max global gradient norm (0 = off)")->capture_default_str();
  t->add_option("--seed", c.seed, "seed for init and data")->capture_default_str();
  t->add_option("--sp", c.sp, "sequence-parallel degree (ranks sharing one sequence)")->capture_default_str();
  t->add_option("--sp-mode", args->sp_mode, "ulysses | ring | hybrid")->capture_default_str();
  t->add_option("--ulysses-degree", c.ulysses_degree, "hybrid: ranks per Ulysses group");
  t->add_option("--sp-layout", args->layout, "ring/hybrid token layout: zigzag | contiguous")->capture_default_str();
  t->add_option("--dp-replicate", c.dp_replicate, "data-parallel replicas")->capture_default_str();
  t->add_option("--dp-shard", c.dp_shard, "data-parallel shard degree")->capture_default_str();
  t->add_option("--num-pairs", c.task.num_pairs, "recall task: key-value pairs per sequence")->capture_default_str();
  t->add_option("--num-queries", c.task.num_queries, "recall task: queries per sequence")->capture_default_str();
  t->add_option("--log-every", c.log_every, "print a progress line every N steps")->capture_default_str();
  t->add_option(
       "--eval-every", c.eval_every,
       "evaluate (recall accuracy, or the --eval-data loss) every N steps and at the end (0 = only at the end)")
      ->capture_default_str();
  t->add_option("--stop-at-accuracy", c.stop_at_accuracy, "stop once eval accuracy reaches this (0 = never)")
      ->capture_default_str();
  t->add_option("--metrics-out", c.metrics_out,
                "JSONL metrics file (loss, tokens/s per log step; eval accuracy or loss); the plot goes next to it "
                "with the extension .svg");
  t->add_option("--data", c.data_path,
                "token file (SPTOK1, from `seqpar prepare-data`) to train on instead of the recall task");
  t->add_option("--eval-data", c.eval_data_path, "token file for the eval loss (with --data), at every --eval-every");
  t->add_option("--eval-batches", c.eval_batches,
                "batches per evaluation (recall task), micro-batches per data-parallel rank (--eval-data)")
      ->capture_default_str();
  t->add_flag("--no-shuffle", args->no_shuffle,
              "read the token file's documents and sequences in file order (default: a new order every epoch)");
  t->add_option("--save-dir", c.save_dir, "checkpoint directory (step_NNNNNN/ subdirectories and `latest`)");
  t->add_option("--save-every", c.save_every,
                "save a checkpoint every N steps (0 = only at the end of the run, when --save-dir is given)")
      ->capture_default_str();
  t->add_option("--keep-last", c.keep_last, "keep only the newest K checkpoints (0 = keep all)")->capture_default_str();
  t->add_option("--resume", c.resume,
                "resume from a checkpoint: `latest` (also --resume alone: the newest in --save-dir), `auto` "
                "(the newest if there is one, else start fresh), or a checkpoint or save directory")
      ->expected(0, 1);
  t->add_option("--stop-at-step", c.stop_at_step,
                "stop after this step (saving a checkpoint with --save-dir), the schedule still that of --steps; "
                "0 = run to --steps")
      ->capture_default_str();
  t->add_option("--config,--deepspeed", args->deepspeed_config,
                "DeepSpeed JSON config (batch sizes, optimizer, scheduler, ...; docs/configs.md)");
  t->add_option("--accelerate-config", args->accelerate_config,
                "Accelerate YAML config (num_processes, parallelism_config, deepspeed_config_file; docs/configs.md)");
  t->add_flag("--print-config", args->print_config,
              "print the resolved configuration (each setting, its value and its source) and exit");
  t->callback([args, t, &rc] {
    run(*args, *t);
    rc = 0;
  });
}

}  // namespace seqpar
