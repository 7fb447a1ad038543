// seqpar train: the training loop. With no arguments: the embedded demo (a tiny Llama learns
// associative recall across a sequence split over 4 in-process ranks). docs/training.md lists
// every option.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/accelerate_env.h"
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
  std::string deepspeed_config, accelerate_config;
  bool print_config = false;
  bool settings_table = false;
};

void run(TrainArgs& a, const CLI::App& command) {
  // defaults < DeepSpeed JSON < Accelerate YAML < the flags given (train/config_resolve.h).
  if (a.settings_table) {
    std::fputs(settings_markdown_table(train_command_defaults()).c_str(), stdout);
    return;
  }
  CommandLine cli;
  cli.values = a.config;
  for (const CLI::Option* o : command.get_options())
    if (o->count() > 0) cli.given.insert(o->get_name());
  if (cli.given.count("--resume") && cli.values.checkpoint.resume.none())  // `--resume` alone: the newest checkpoint
    cli.values.checkpoint.resume.kind = ResumeFrom::Kind::kLatest;
  // One rank per process over NCCL: the launch decides the world (run_job refuses NCCL without a GPU).
  if (cli.values.parallel.device.is_cuda() && job_transport(cli.values.parallel.transport, cli.values.parallel.device) == Transport::kNccl) {
    const DistEnv env = read_dist_env(process_env());
    cli.launch_world = env.world_size;
    cli.launch_source = env.world_size == 1 ? std::string("one process: no launcher")
                                            : fmt::format("the launch: {}, {} processes",
                                                          convention_name(env.convention), env.world_size);
  }
  // Every problem of the files, the environment, the merge and the settings' rules, in one error.
  Problems problems;
  const std::optional<AccelerateConfig> env = accelerate_config_from_env(process_env(), problems);
  ResolvedConfig resolved =
      resolve_train_config(cli, a.deepspeed_config, a.accelerate_config, env ? &*env : nullptr, &problems);
  TrainConfig& c = resolved.train;
  c.kernels = process_kernel_policy();
  for (const SettingDecl& d : train_settings())
    if (d.builtin_model_only && !c.model.dir.empty())
      for (const std::string& f : d.flags_given(cli.given))
        problems.add(fmt::format("{} sizes the built-in model; with --model={} the sizes come from its config.json", f,
                                 c.model.dir));
  SEQPAR_PROBLEM_CHECK(problems, c.model.preset.empty() || c.model.dir.empty(),
                       "--preset={} is a randomly initialised architecture, --model={} a checkpoint: give one of them",
                       c.model.preset, c.model.dir);
  Problems rules;
  c.validate(rules);
  add_sources(rules, resolved);
  problems.append(rules);
  problems.raise();
  c.config_text = format_resolved_config(resolved);
  if (a.print_config) {
    std::fputs(c.config_text.c_str(), stdout);
    // And what it will hold per GPU (seqpar plan's table for this configuration).
    const LlamaConfig model = c.model.dir.empty() ? c.model.arch : load_hf_llama_config(c.model.dir);
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
  const size_t guard_skips = r.skipped_steps.size() - r.overflow_steps.size();
  if (guard_skips > 0)
    evals += fmt::format(", {} step(s) skipped by the non-finite guard (--on-nonfinite skip)", guard_skips);
  if (!r.overflow_steps.empty())
    evals += fmt::format(", {} step(s) skipped on an fp16 overflow (loss scale now {:g})", r.overflow_steps.size(),
                         r.loss_scale);
  if (r.empty_steps > 0) evals += fmt::format(", {} step(s) with no token to learn from", r.empty_steps);
  if (r.stop_signal != 0) evals += " (stopped by a signal)";
  log_info("done: {} steps, final loss {:.4f}{}, {:.0f} tokens/s", r.steps_run, r.losses.back(), evals, r.tokens_per_s);
  if (c.logging.profile && r.profile_steps > 0)
    log_info("profile of rank 0's steps after the first ({} steps, {:.1f} s of wall), summed:\n{}", r.profile_steps,
             r.profile_seconds, format_profile(r.profile, r.profile_seconds * 1e3, 40));
}

}  // namespace

TrainConfig train_command_defaults() {
  TrainConfig c;
  // The built-in model is the demo's tiny Llama; the demo's other values (sp = 4 ranks, the recall
  // task's length, stop once it is learned, its optimizer) are its declared defaults (config.cpp),
  // which a run with a model, data or config file trades for its tool's (config_resolve).
  c.model.arch = demo_model_config();
  apply_defaults(c, DefaultsSource::kDemo);
  return c;
}

void add_train_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<TrainArgs>();
  args->config = train_command_defaults();
  CLI::App* t = app.add_subcommand(
      "train",
      "Train a model. With no arguments: the embedded demo, a tiny Llama learning associative recall over a "
      "sequence split across 4 in-process ranks");
  add_setting_options(*t, args->config, kTrainCommand);
  t->add_option("--config,--deepspeed", args->deepspeed_config,
                "DeepSpeed JSON config (batch sizes, optimizer, scheduler, ...; docs/configs.md); an Accelerate "
                "YAML goes to --accelerate-config");
  t->add_option("--accelerate-config", args->accelerate_config,
                "Accelerate YAML config (num_processes, parallelism_config, deepspeed_config_file; docs/configs.md)");
  t->add_flag("--print-config", args->print_config,
              "print the resolved configuration (each setting, its value and its source) and exit");
  t->add_flag("--settings-table", args->settings_table,
              "print every setting (group, flags, DeepSpeed / Accelerate keys, default, help) as the Markdown table "
              "of docs/configs.md and exit");
  t->callback([args, t, &rc] {
    run(*args, *t);
    rc = 0;
  });
}

}  // namespace seqpar
