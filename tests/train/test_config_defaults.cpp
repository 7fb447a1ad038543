// Defaults by source (issue 18.1): the demo's only for the demo, HF Trainer's for Trainer-style
// files and runs of one's own model or data, DeepSpeed's for a bare DeepSpeed file; each setting's
// declared rule checked on every value with its source, every problem at once (18.2, 19.9); the
// HF linear and constant schedules; Accelerate's cp_size as seqpar's ring.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/config_resolve.h"

namespace seqpar {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

CommandLine cli(std::set<std::string> given = {}) {
  CommandLine c;
  c.given = std::move(given);
  return c;
}

TEST(ConfigDefaults, TheDemoKeepsItsOwn) {
  const ResolvedConfig r = resolve_train_config(cli(), nullptr, nullptr);
  EXPECT_EQ(r.defaults, DefaultsSource::kDemo);
  EXPECT_EQ(r.train.parallel.sp, 4);
  EXPECT_EQ(r.source_of("sp"), "demo default");
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.lr, 3e-3f);
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.weight_decay, 0.01f);
  EXPECT_EQ(r.train.data.micro_batch, 16);
  EXPECT_EQ(r.train.schedule.warmup_steps, 30);
  EXPECT_EQ(r.train.schedule.lr.type, LrScheduleType::kLinearCosine);
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 1.0);
  EXPECT_EQ(r.train.schedule.steps, 600);
}

TEST(ConfigDefaults, OwnDataOrTrainerStyleFilesGetHfTrainers) {
  CommandLine c = cli({"--data"});
  c.values.data.path = "tokens.bin";
  ResolvedConfig r = resolve_train_config(c, nullptr, nullptr);
  EXPECT_EQ(r.defaults, DefaultsSource::kHfTrainer);
  EXPECT_EQ(r.train.parallel.sp, 1);
  EXPECT_EQ(r.source_of("sp"), "HF Trainer default");
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.lr, 5e-5f);
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.weight_decay, 0.f);
  EXPECT_EQ(r.train.data.micro_batch, 8);
  EXPECT_EQ(r.train.schedule.warmup_steps, 0);
  EXPECT_EQ(r.train.schedule.lr.type, LrScheduleType::kLinear);
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 1.0);
  EXPECT_EQ(r.train.schedule.steps, TrainConfig{}.schedule.steps);  // no per-source default: seqpar's own
  EXPECT_EQ(r.source_of("steps"), "seqpar default");
  // A DeepSpeed file with "auto": the Trainer's values, named as such.
  const DsConfig d = parse_ds_config(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
          "gradient_clipping": "auto", "train_micro_batch_size_per_gpu": "auto"})",
      "hf.json");
  r = resolve_train_config(cli(), &d, nullptr);
  EXPECT_EQ(r.defaults, DefaultsSource::kHfTrainer);
  EXPECT_EQ(r.value_of("lr"), "5e-05");
  EXPECT_EQ(r.source_of("lr"), "HF Trainer default (auto in hf.json: optimizer.params.lr)");
  EXPECT_EQ(r.source_of("clip"), "HF Trainer default (auto in hf.json: gradient_clipping)");
  EXPECT_EQ(r.train.data.micro_batch, 8);
}

TEST(ConfigDefaults, ABareDeepSpeedFileGetsDeepSpeedsEngineDefaults) {
  const DsConfig d = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2})", "bare.json");
  const ResolvedConfig r = resolve_train_config(cli(), &d, nullptr);
  EXPECT_EQ(r.defaults, DefaultsSource::kDeepSpeed);
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 0.0);
  EXPECT_EQ(r.source_of("clip"), "DeepSpeed default");
  EXPECT_EQ(r.train.schedule.lr.type, LrScheduleType::kConstant);
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.lr, 1e-3f);
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.weight_decay, 0.f);
  EXPECT_EQ(r.train.parallel.sp, 1);
  // DeepSpeed's own rule: a batch size must be given.
  const DsConfig none = parse_ds_config(R"({"gradient_clipping": 0.5})", "nobatch.json");
  EXPECT_NE(error_of([&] { resolve_train_config(cli(), &none, nullptr); })
                .find("nobatch.json has neither train_batch_size nor train_micro_batch_size_per_gpu"),
            std::string::npos);
  CommandLine c = cli({"--micro-batch"});
  c.values.data.micro_batch = 4;
  EXPECT_NO_THROW(resolve_train_config(c, &none, nullptr));
}

TEST(ConfigDefaults, AnEightProcessDataParallelYamlIsDpEight) {
  const AccelerateConfig a = parse_accelerate_config("distributed_type: MULTI_GPU\nnum_processes: 8\n", "dp.yaml", ".");
  const ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.parallel.sp, 1);
  EXPECT_EQ(r.train.parallel.dp_replicate, 8);
  EXPECT_EQ(r.world, 8);
}

TEST(ConfigDefaults, ContextParallelSizeIsTheRing) {
  AccelerateConfig a = parse_accelerate_config(
      "num_processes: 4\nparallelism_config:\n  parallelism_config_cp_size: 4\n", "cp.yaml", ".");
  ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.parallel.sp, 4);
  EXPECT_EQ(r.train.parallel.sp_mode, SpMode::kRing);
  EXPECT_EQ(r.source_of("sp_mode"), "cp.yaml: parallelism_config.parallelism_config_cp_size");
  a = parse_accelerate_config(
      "num_processes: 8\nparallelism_config:\n  parallelism_config_sp_size: 2\n  parallelism_config_cp_size: 4\n",
      "h.yaml", ".");
  r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.parallel.sp, 8);
  EXPECT_EQ(r.train.parallel.sp_mode, SpMode::kHybrid);
  EXPECT_EQ(r.train.parallel.ulysses_degree, 2);
  EXPECT_EQ(r.world, 8);
}

TEST(ConfigDefaults, FsdpSettingsReachTheLevers) {
  const AccelerateConfig a = parse_accelerate_config(
      "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n"
      "  fsdp_activation_checkpointing: true\n",
      "f.yaml", ".");
  const ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.memory.zero_stage, 2);
  EXPECT_EQ(r.source_of("zero_stage"), "f.yaml: fsdp_config.fsdp_sharding_strategy");
  EXPECT_TRUE(r.train.memory.activation_checkpointing);
}

TEST(ConfigDefaults, EveryRuleIsCheckedWithItsSourceAndAllAtOnce) {
  CommandLine c = cli({"--beta1", "--weight-decay", "--min-lr-ratio", "--steps"});
  c.values.optimizer.adamw.beta1 = 1.0f;
  c.values.optimizer.adamw.weight_decay = -0.1f;
  c.values.schedule.min_lr_ratio = 1.5f;
  c.values.schedule.steps = 0;
  const std::string m = error_of([&] { resolve_train_config(c, nullptr, nullptr); });
  EXPECT_NE(m.find("4 problems in the configuration"), std::string::npos) << m;
  EXPECT_NE(m.find("beta1=1 must be in [0, 1) (--beta1), from --beta1"), std::string::npos) << m;
  EXPECT_NE(m.find("weight_decay=-0.1 must be >= 0"), std::string::npos) << m;
  EXPECT_NE(m.find("min_lr_ratio=1.5 must be in [0, 1]"), std::string::npos) << m;
  EXPECT_NE(m.find("steps=0 must be >= 1 (--steps), from --steps"), std::string::npos) << m;
  // The built-in model's sizes: checked with the rest of the run's rules (validate()).
  TrainConfig t;
  t.model.arch = LlamaConfig{};
  t.model.arch.hidden_size = 0;
  Problems p;
  t.validate_run(p);
  bool named = false;
  for (const std::string& s : p.list()) named = named || s.find("hidden_size=0 must be >= 1") != std::string::npos;
  EXPECT_TRUE(named);
  // From a file, the file and key are the source.
  const DsConfig d = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
                                         "optimizer": {"type": "AdamW", "params": {"weight_decay": 0}}})",
                                     "d.json");
  CommandLine e = cli({"--eps"});
  e.values.optimizer.adamw.eps = 0;
  EXPECT_NE(error_of([&] { resolve_train_config(e, &d, nullptr); }).find("eps=0 must be > 0 (--eps), from --eps"),
            std::string::npos);
}

TEST(ConfigDefaults, ValuesAreParsedWholeAndFinite) {
  TrainConfig t;
  const SettingDecl* lr = find_setting("lr");
  const SettingDecl* steps = find_setting("steps");
  const SettingDecl* seed = find_setting("seed");
  // Decimal text, whole: no leading space or hex float (strtod took both), no "+-".
  for (const char* bad : {"inf", "nan", "1e39", "3e-3x", " 3e-3", "0x1p-8", "+-1e-3", "+", "-", "1e-3 "})
    EXPECT_THROW(lr->set(t, bad, "--lr"), InputError) << bad;
  lr->set(t, "+2e-4", "--lr");  // a '+' is fine, as Python's float() takes it
  EXPECT_FLOAT_EQ(t.optimizer.adamw.lr, 2e-4f);
  lr->set(t, "-1e-3", "--lr");  // (parsed; the range rule is the resolver's)
  EXPECT_FLOAT_EQ(t.optimizer.adamw.lr, -1e-3f);
  for (const char* bad : {"12abc", "1e3", "", "1.5"}) EXPECT_THROW(steps->set(t, bad, "--steps"), InputError) << bad;
  EXPECT_THROW(seed->set(t, "-1", "--seed"), InputError);
  EXPECT_THROW(seed->from_json(t, nlohmann::json(-1)), InputError);  // never wraps to 2^64 - 1
  EXPECT_THROW(steps->from_json(t, nlohmann::json(1.5)), InputError);
}

TEST(ConfigDefaults, HfLinearAndConstantSchedules) {
  LrSchedule s;
  s.type = LrScheduleType::kLinear;
  s.base_lr = 1.0;
  s.warmup_steps = 2;
  s.total_steps = 10;
  // transformers' get_linear_schedule_with_warmup at current_step = step - 1.
  EXPECT_FLOAT_EQ(scheduled_lr(s, 1), 0.f);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 2), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 3), 1.f);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 4), 7.f / 8.f);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 10), 1.f / 8.f);
  s.warmup_steps = 0;
  EXPECT_FLOAT_EQ(scheduled_lr(s, 1), 1.f);
  s.type = LrScheduleType::kConstant;
  for (int64_t k : {1, 5, 100}) EXPECT_FLOAT_EQ(scheduled_lr(s, k), 1.f);
}

}  // namespace
}  // namespace seqpar
