// seqpar train: the training loop. With no arguments: the embedded demo (a tiny Llama learns
// associative recall across a sequence split over 4 in-process ranks).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/log.h"
#include "train/config_resolve.h"
#include "train/trainer.h"

namespace seqpar {

namespace {

struct TrainArgs {
  TrainConfig config;
  std::string sp_mode = "ulysses", layout = "zigzag";
  std::string deepspeed_config, accelerate_config;
  bool print_config = false;
};

void run(TrainArgs& a, const CLI::App& command) {
  // defaults < DeepSpeed JSON < Accelerate YAML < the flags given (train/config_resolve.h).
  CommandLine cli;
  cli.values = a.config;
  cli.values.sp_mode = parse_sp_mode(a.sp_mode, "--sp-mode");
  cli.values.layout = parse_sp_layout(a.layout, "--sp-layout");
  for (const CLI::Option* o : command.get_options())
    if (o->count() > 0) cli.given.insert(o->get_name());
  ResolvedConfig resolved = resolve_train_config(cli, a.deepspeed_config, a.accelerate_config);
  TrainConfig& c = resolved.train;
  if (c.model_dir.empty()) c.model = demo_model_config();
  c.validate();
  if (a.print_config) {
    std::fputs(format_resolved_config(resolved).c_str(), stdout);
    return;
  }
  for (const std::string& w : resolved.warnings) log_warn("{}", w);
  TrainResult r = run_training(c);
  if (!r.eval_accuracy.empty()) {
    log_info("done: {} steps, final loss {:.4f}, recall accuracy {:.1f}%, {:.0f} tokens/s", r.steps_run,
             r.losses.back(), 100 * r.eval_accuracy.back().second, r.tokens_per_s);
  } else {
    log_info("done: {} steps, final loss {:.4f}, {:.0f} tokens/s", r.steps_run, r.losses.back(), r.tokens_per_s);
  }
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
      "train", "Train a model. With no arguments: the embedded demo, a tiny Llama learning associative recall over a "
               "sequence split across 4 in-process ranks");
  t->add_option("--model", c.model_dir, "HF model directory to start from (default: the built-in tiny Llama)");
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
  t->add_option("--eval-every", c.eval_every, "evaluate recall accuracy every N steps (0 = only at the end)")
      ->capture_default_str();
  t->add_option("--stop-at-accuracy", c.stop_at_accuracy, "stop once eval accuracy reaches this (0 = never)")
      ->capture_default_str();
  t->add_option("--metrics-out", c.metrics_out, "JSONL metrics file (loss, tokens/s per log step; eval accuracy)");
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
