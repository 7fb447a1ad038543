// Merging defaults < DeepSpeed JSON < Accelerate YAML < flags: every key's effect on TrainConfig,
// the sources, "auto", the cross-setting rules (with their messages), the learning-rate schedules
// against DeepSpeed's formulas, and `seqpar train --print-config` end to end.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <tuple>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "train/config_resolve.h"

namespace seqpar {
namespace {

// The message of the InputError that f throws ("" and a failure otherwise).
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}
#define EXPECT_ERROR_HAS(stmt, text)                                  \
  do {                                                                \
    const std::string _m = input_error([&] { (void)(stmt); });        \
    EXPECT_NE(_m.find(text), std::string::npos) << "message: " << _m; \
  } while (0)

bool has_warning(const ResolvedConfig& r, const std::string& text) {
  for (const std::string& w : r.warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

// These tests resolve files against TrainConfig{}'s values as they are (the defaults by source
// have their own tests: test_config_defaults.cpp).
CommandLine cli(std::set<std::string> given = {}) {
  CommandLine c;
  c.given = std::move(given);
  c.source_defaults = false;
  return c;
}

DsConfig ds(const std::string& json) { return parse_ds_config(json, "ds.json"); }
AccelerateConfig acc(const std::string& yaml) { return parse_accelerate_config(yaml, "acc.yaml", "."); }

TEST(ConfigResolve, NoFilesIsTheCommandLine) {
  CommandLine c = cli({"--lr", "--seq-len"});
  c.values.optimizer.adamw.lr = 0.02f;
  c.values.data.task.seq_len = 256;
  const ResolvedConfig r = resolve_train_config(c, nullptr, nullptr);
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.lr, 0.02f);
  EXPECT_EQ(r.value_of("lr"), "0.02");
  EXPECT_EQ(r.source_of("lr"), "--lr");
  EXPECT_EQ(r.value_of("seq_len"), "256");
  EXPECT_EQ(r.source_of("seq_len"), "--seq-len");
  EXPECT_EQ(r.source_of("micro_batch"), "default");
  EXPECT_EQ(r.train.schedule.lr.type, LrScheduleType::kLinearCosine);
  EXPECT_EQ(r.world, 4);
  EXPECT_EQ(r.train_batch_size, 8);  // 8 × 1 × dp 1
  EXPECT_EQ(r.source_of("train_batch_size"), "derived: micro_batch × grad_accum × dp_world");
  EXPECT_TRUE(r.warnings.empty());
  // The DeepSpeed-only schedule settings are not shown for seqpar's own schedule.
  EXPECT_EQ(r.value_of("warmup_num_steps"), "");
  EXPECT_EQ(r.value_of("warmup_steps"), "20");
}

TEST(ConfigResolve, PrecedenceDefaultsThenDeepSpeedThenAccelerateThenFlags) {
  const DsConfig d = ds(R"({"gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "sequence_parallel_size": 2})");
  const AccelerateConfig a = acc(R"(
deepspeed_config:
  gradient_accumulation_steps: 3
  gradient_clipping: 0.25
parallelism_config:
  parallelism_config_sp_size: 8
)");
  // DeepSpeed over the defaults.
  ResolvedConfig r = resolve_train_config(cli(), &d, nullptr);
  EXPECT_EQ(r.train.data.grad_accum, 2);
  EXPECT_EQ(r.source_of("grad_accum"), "ds.json: gradient_accumulation_steps");
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 0.5);
  EXPECT_EQ(r.train.parallel.sp, 2);
  EXPECT_EQ(r.source_of("sp"), "ds.json: sequence_parallel_size");
  // Accelerate over DeepSpeed, with a warning naming both.
  r = resolve_train_config(cli(), &d, &a);
  EXPECT_EQ(r.train.data.grad_accum, 3);
  EXPECT_EQ(r.source_of("grad_accum"), "acc.yaml: deepspeed_config.gradient_accumulation_steps");
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 0.25);
  EXPECT_EQ(r.train.parallel.sp, 8);
  EXPECT_EQ(r.source_of("sp"), "acc.yaml: parallelism_config.parallelism_config_sp_size");
  EXPECT_TRUE(has_warning(r,
                          "grad_accum: ds.json: gradient_accumulation_steps=2 is overridden by acc.yaml: "
                          "deepspeed_config.gradient_accumulation_steps=3"));
  // Flags over everything.
  CommandLine c = cli({"--grad-accum", "--clip", "--sp"});
  c.values.data.grad_accum = 5;
  c.values.optimizer.clip = 2.0;
  c.values.parallel.sp = 1;
  r = resolve_train_config(c, &d, &a);
  EXPECT_EQ(r.train.data.grad_accum, 5);
  EXPECT_EQ(r.source_of("grad_accum"), "--grad-accum");
  EXPECT_DOUBLE_EQ(r.train.optimizer.clip, 2.0);
  EXPECT_EQ(r.source_of("clip"), "--clip");
  EXPECT_EQ(r.train.parallel.sp, 1);
  EXPECT_EQ(r.source_of("sp"), "--sp");
  EXPECT_TRUE(has_warning(r,
                          "grad_accum: acc.yaml: deepspeed_config.gradient_accumulation_steps=3 is overridden by "
                          "--grad-accum=5"));
  // An equal value from a higher layer is no news: no warning.
  c.values.data.grad_accum = 3;
  r = resolve_train_config(c, nullptr, &a);
  EXPECT_FALSE(has_warning(r, "grad_accum:"));
}

TEST(ConfigResolve, EveryDeepSpeedKeyReachesTheConfig) {
  const DsConfig d = ds(R"({
    "train_batch_size": 24, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2,
    "sequence_parallel_size": 2, "zero_optimization": {"stage": 1}, "bf16": {"enabled": true},
    "optimizer": {"type": "Adam", "params": {"lr": 2e-4, "betas": [0.85, 0.98], "eps": 1e-7, "weight_decay": 0.05}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-6, "warmup_max_lr": 2e-4,
                  "warmup_num_steps": 50, "total_num_steps": 500, "warmup_type": "linear"}},
    "gradient_clipping": 0.7, "steps_per_print": 5, "wall_clock_breakdown": true,
    "seq_parallel_communication_data_type": "bf16"
  })");
  CommandLine c = cli({"--dp-replicate"});
  c.values.parallel.dp_replicate = 4;  // world 8 = dp 4 × sp 2: 24 = 3 × 2 × 4
  const ResolvedConfig r = resolve_train_config(c, &d, nullptr);
  const TrainConfig& t = r.train;
  EXPECT_EQ(r.train_batch_size, 24);
  EXPECT_EQ(r.source_of("train_batch_size"), "ds.json: train_batch_size");
  EXPECT_EQ(t.data.micro_batch, 3);
  EXPECT_EQ(t.data.grad_accum, 2);
  EXPECT_EQ(t.parallel.sp, 2);
  EXPECT_EQ(r.world, 8);
  EXPECT_EQ(r.train.memory.zero_stage, 1);
  EXPECT_EQ(r.source_of("zero_stage"), "ds.json: zero_optimization.stage");
  EXPECT_EQ(t.precision.mixed_precision, Precision::kBf16);
  EXPECT_EQ(r.source_of("mixed_precision"), "ds.json: bf16.enabled");
  EXPECT_EQ(r.recorded.optimizer, "Adam (adam_w_mode: AdamW)");
  EXPECT_TRUE(r.recorded.adam_w_mode);
  EXPECT_FLOAT_EQ(t.optimizer.adamw.lr, 2e-4f);
  EXPECT_FLOAT_EQ(t.optimizer.adamw.beta1, 0.85f);
  EXPECT_FLOAT_EQ(t.optimizer.adamw.beta2, 0.98f);
  EXPECT_EQ(r.source_of("beta2"), "ds.json: optimizer.params.betas");
  EXPECT_FLOAT_EQ(t.optimizer.adamw.eps, 1e-7f);
  EXPECT_FLOAT_EQ(t.optimizer.adamw.weight_decay, 0.05f);
  EXPECT_DOUBLE_EQ(t.optimizer.clip, 0.7);
  EXPECT_EQ(t.logging.log_every, 5);
  EXPECT_EQ(r.source_of("log_every"), "ds.json: steps_per_print");
  EXPECT_TRUE(r.recorded.wall_clock_breakdown);
  EXPECT_EQ(r.recorded.sp_comm_dtype, "bf16");
  const LrSchedule& s = t.schedule.lr;
  EXPECT_EQ(s.type, LrScheduleType::kWarmupDecayLR);
  EXPECT_EQ(r.value_of("lr_schedule"), "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(s.warmup_min_lr, 1e-6);
  EXPECT_DOUBLE_EQ(s.warmup_max_lr, 2e-4);
  EXPECT_EQ(s.warmup_num_steps, 50);
  EXPECT_EQ(s.total_num_steps, 500);
  EXPECT_EQ(s.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(r.source_of("total_num_steps"), "ds.json: scheduler.params.total_num_steps");
  EXPECT_EQ(r.value_of("warmup_steps"), "");  // seqpar's own warmup does not apply
}

TEST(ConfigResolve, EveryAccelerateKeyReachesTheConfig) {
  const AccelerateConfig a = acc(R"(
distributed_type: DEEPSPEED
num_processes: 8
num_machines: 2
machine_rank: 1
main_process_ip: 10.1.2.3
main_process_port: 1234
mixed_precision: bf16
deepspeed_config:
  zero_stage: 2
  gradient_accumulation_steps: 2
  gradient_clipping: 0.3
  seq_parallel_communication_data_type: bf16
parallelism_config:
  parallelism_config_dp_replicate_size: 1
  parallelism_config_dp_shard_size: 2
  parallelism_config_sp_size: 4
  parallelism_config_sp_backend: deepspeed
  parallelism_config_sp_seq_length_is_variable: false
  parallelism_config_sp_seq_length: 512
  parallelism_config_sp_attn_implementation: flash_attention_3
)");
  const ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  const TrainConfig& t = r.train;
  EXPECT_EQ(r.recorded.distributed_type, "DEEPSPEED");
  EXPECT_EQ(r.recorded.num_processes, 8);
  EXPECT_EQ(r.world, 8);
  EXPECT_EQ(r.source_of("world"), "acc.yaml: num_processes");
  EXPECT_EQ(r.recorded.num_machines, 2);
  EXPECT_TRUE(has_warning(r,
                          "num_machines=2 (acc.yaml: num_machines) is recorded, but `seqpar train` runs all 8 "
                          "ranks in this process on this machine"));
  EXPECT_EQ(r.recorded.machine_rank, 1);
  EXPECT_EQ(r.recorded.main_process_ip, "10.1.2.3");
  EXPECT_EQ(r.recorded.main_process_port, 1234);
  EXPECT_EQ(t.precision.mixed_precision, Precision::kBf16);
  EXPECT_EQ(r.source_of("mixed_precision"), "acc.yaml: mixed_precision");
  EXPECT_EQ(r.train.memory.zero_stage, 2);
  EXPECT_EQ(t.data.grad_accum, 2);
  EXPECT_DOUBLE_EQ(t.optimizer.clip, 0.3);
  EXPECT_EQ(r.recorded.sp_comm_dtype, "bf16");
  EXPECT_EQ(t.parallel.dp_replicate, 1);
  EXPECT_EQ(t.parallel.dp_shard, 2);
  EXPECT_EQ(t.parallel.sp, 4);
  EXPECT_EQ(t.data.task.seq_len, 512);
  EXPECT_EQ(r.source_of("seq_len"), "acc.yaml: parallelism_config.parallelism_config_sp_seq_length");
  EXPECT_FALSE(r.recorded.seq_length_is_variable);
  EXPECT_EQ(r.train.model.attn_implementation, AttnImplementation::kFlashAttention3);
  EXPECT_EQ(r.train_batch_size, 8 * 2 * 2);  // micro 8 (default) × grad_accum 2 × dp 2
}

// The declaration (config.h) names each file key that sets a setting, and config_resolve refuses
// (an internal error) to apply a key that the setting's declaration does not name. The other
// direction: every declared key, alone in a file, sets its setting, and --print-config names the
// key as the setting's source (for a DeepSpeed schedule parameter, the schedule's setting of the
// key's name: scheduler.params.warmup_num_steps is warmup_num_steps).
std::string base_key(const std::string& key) { return key.substr(0, key.find('[')); }

// The value a file gives for a declared key: the setting's default as JSON, or the file's
// spelling where the two differ.
nlohmann::json file_value(const SettingDecl& d, const std::string& key) {
  static const std::map<std::string, nlohmann::json> spelled = {
      {"scheduler.type", "WarmupLR"},
      {"fsdp_config.fsdp_sharding_strategy", "FULL_SHARD"},
      {"fsdp_config.fsdp_reshard_after_forward", true},
      {"fsdp_config.fsdp_offload_params", true},
      {"fsdp_config.fsdp_activation_checkpointing", true},
      {"parallelism_config.parallelism_config_cp_size", 2},
      {"fp16.enabled", true},
      {"bf16.enabled", true},
      {"bfloat16.enabled", true},
  };
  if (auto it = spelled.find(key); it != spelled.end()) return it->second;
  return d.to_json(TrainConfig{});
}

// A DeepSpeed file with the key (a list key's elements from every setting declared on it) and
// what DeepSpeed needs beside it.
nlohmann::json ds_file_with(const std::string& key) {
  nlohmann::json j;
  const std::string base = base_key(key);
  nlohmann::json value = base == key ? nlohmann::json() : nlohmann::json::array();
  for (const SettingDecl& d : train_settings())
    for (const std::string& k : d.deepspeed_keys()) {
      if (k == key && base == key) value = file_value(d, k);
      if (base == key || base_key(k) != base || k == base) continue;
      const size_t i = static_cast<size_t>(std::stoi(k.substr(base.size() + 1)));
      while (value.size() <= i) value.push_back(nullptr);
      value[i] = file_value(d, k);
    }
  j[nlohmann::json::json_pointer("/" + std::regex_replace(base, std::regex("\\."), "/"))] = value;
  if (base.rfind("optimizer.", 0) == 0) j["optimizer"]["type"] = "AdamW";
  if (base.rfind("scheduler.params.", 0) == 0) {
    j["scheduler"]["type"] = "WarmupCosineLR";
    j["scheduler"]["params"]["total_num_steps"] = 10;
  }
  if (j.contains("zero_optimization") && base.find("offload_param") != std::string::npos)
    j["zero_optimization"]["stage"] = 3;
  if (base.rfind("fp16.", 0) == 0 && base != "fp16.enabled") j["fp16"]["enabled"] = true;  // the scaler's: fp16 only
  if (!j.contains("train_micro_batch_size_per_gpu")) j["train_micro_batch_size_per_gpu"] = 1;
  return j;
}

// An Accelerate YAML with the key (a two-level one: section, then name) and what the setting
// needs beside it (a sharded FSDP for FSDP's offload; Ulysses inside the ring for its degree).
std::string yaml_with(const SettingDecl& d, const std::string& key) {
  const size_t dot = key.find('.');
  std::string y = dot == std::string::npos
                      ? key + ": " + file_value(d, key).dump() + "\n"
                      : key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + file_value(d, key).dump() + "\n";
  if (key.rfind("fsdp_config.", 0) == 0) {
    y = "distributed_type: FSDP\n" + y;
    if (key == "fsdp_config.fsdp_offload_params") y += "  fsdp_sharding_strategy: FULL_SHARD\n";
  }
  if (d.name == "ulysses_degree") y += "  parallelism_config_sp_size: 2\n";
  return y;
}

TEST(ConfigResolve, EveryDeclaredFileKeySetsItsSetting) {
  int deepspeed_keys = 0, accelerate_keys = 0;
  for (const SettingDecl& d : train_settings()) {
    for (const std::string& key : d.deepspeed_keys()) {
      SCOPED_TRACE(d.name + " <- DeepSpeed " + key);
      const nlohmann::json j = ds_file_with(key);
      const DsConfig file = ds(j.dump());
      const ResolvedConfig r = resolve_train_config(cli(), &file, nullptr);
      const std::string leaf = base_key(key).substr(base_key(key).rfind('.') + 1);
      const std::string want = "ds.json: " + base_key(key);
      EXPECT_TRUE(r.source_of(d.name) == want || (find_setting(leaf) == nullptr && r.source_of(leaf) == want))
          << j.dump() << ": source " << r.source_of(d.name);
      ++deepspeed_keys;
    }
    for (const std::string& key : d.accelerate_keys()) {
      SCOPED_TRACE(d.name + " <- Accelerate " + key);
      const std::string y = yaml_with(d, key);
      const AccelerateConfig file = acc(y);
      const ResolvedConfig r = resolve_train_config(cli(), nullptr, &file);
      EXPECT_EQ(r.source_of(d.name).rfind("acc.yaml: " + key, 0), 0u) << y << "source: " << r.source_of(d.name);
      ++accelerate_keys;
    }
  }
  EXPECT_GE(deepspeed_keys, 15);
  EXPECT_GE(accelerate_keys, 12);
}

TEST(ConfigResolve, AutoTakesTheTrainersValue) {
  const DsConfig d = ds(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}}
  })");
  CommandLine c = cli({"--micro-batch", "--lr", "--dp-replicate"});
  c.values.data.micro_batch = 6;
  c.values.optimizer.adamw.lr = 0.004f;
  c.values.parallel.dp_replicate = 2;
  c.values.data.grad_accum = 3;
  c.values.schedule.warmup_steps = 7;
  c.values.schedule.steps = 90;
  const ResolvedConfig r = resolve_train_config(c, &d, nullptr);
  EXPECT_EQ(r.train.data.micro_batch, 6);
  EXPECT_EQ(r.source_of("micro_batch"), "--micro-batch (auto in ds.json: train_micro_batch_size_per_gpu)");
  EXPECT_EQ(r.train.data.grad_accum, 3);
  EXPECT_EQ(r.source_of("grad_accum"), "default (auto in ds.json: gradient_accumulation_steps)");
  EXPECT_EQ(r.train_batch_size, 6 * 3 * 2);  // micro × grad_accum × dp_world
  EXPECT_EQ(r.source_of("train_batch_size"),
            "derived: micro_batch × grad_accum × dp_world (auto in ds.json: train_batch_size)");
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.lr, 0.004f);
  EXPECT_EQ(r.source_of("lr"), "--lr (auto in ds.json: optimizer.params.lr)");
  EXPECT_EQ(r.source_of("beta1"), "default (auto in ds.json: optimizer.params.betas)");
  EXPECT_FLOAT_EQ(r.train.optimizer.adamw.beta1, 0.9f);
  // bf16.enabled "auto" with no --bf16: HF Trainer leaves it off; seqpar's GPU path computes in bf16.
  EXPECT_EQ(r.train.precision.mixed_precision, Precision::kBf16);
  EXPECT_EQ(r.source_of("mixed_precision"), "default (auto in ds.json: bf16.enabled)");
  const LrSchedule& s = r.train.schedule.lr;
  EXPECT_DOUBLE_EQ(s.warmup_min_lr, 0.0);  // the HF Trainer fills 0
  EXPECT_DOUBLE_EQ(s.warmup_max_lr, 0.004f);
  EXPECT_EQ(r.source_of("warmup_max_lr"), "--lr");  // --lr is the peak: a flag wins even over "auto"
  EXPECT_EQ(s.warmup_num_steps, 7);
  EXPECT_EQ(r.source_of("warmup_num_steps"), "default (auto in ds.json: scheduler.params.warmup_num_steps)");
  EXPECT_EQ(s.total_num_steps, 90);
  EXPECT_EQ(r.source_of("total_num_steps"), "default (auto in ds.json: scheduler.params.total_num_steps)");
}

TEST(ConfigResolve, ScheduleDefaultsAndFlagsFollowDeepSpeed) {
  // Absent parameters take DeepSpeed's constructor defaults: WarmupLR's max is the optimizer's lr,
  // WarmupDecayLR's is 0.001, warmup 1000 log steps, cos_min_ratio 1e-4.
  const DsConfig warm = ds(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.005}},
                               "scheduler": {"type": "WarmupLR"}})");
  ResolvedConfig r = resolve_train_config(cli(), &warm, nullptr);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.warmup_max_lr, 0.005f);
  EXPECT_EQ(r.source_of("warmup_max_lr"), "ds.json: DeepSpeed's default (the optimizer's lr)");
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.warmup_min_lr, 0.0);
  EXPECT_EQ(r.train.schedule.lr.warmup_num_steps, 1000);
  EXPECT_EQ(r.train.schedule.lr.warmup_type, WarmupType::kLog);
  EXPECT_EQ(r.source_of("warmup_type"), "ds.json: DeepSpeed's default");
  const DsConfig decay = ds(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}}})");
  r = resolve_train_config(cli(), &decay, nullptr);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.warmup_max_lr, 0.001);
  const DsConfig cosine = ds(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
                                 "cos_min_ratio": 0.2}}})");
  r = resolve_train_config(cli(), &cosine, nullptr);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.cos_min_ratio, 0.2);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.warmup_min_ratio, 0.0);
  // The flags that name the same things win: --lr (peak), --warmup-steps, --min-lr-ratio.
  const DsConfig warm2 = ds(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.1,
                                "warmup_num_steps": 10}}})");
  CommandLine c = cli({"--lr", "--warmup-steps", "--min-lr-ratio"});
  c.values.optimizer.adamw.lr = 0.03f;
  c.values.schedule.warmup_steps = 4;
  c.values.schedule.min_lr_ratio = 0.5f;
  r = resolve_train_config(c, &warm2, nullptr);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.warmup_max_lr, 0.03f);
  EXPECT_EQ(r.train.schedule.lr.warmup_num_steps, 4);
  EXPECT_EQ(r.source_of("warmup_num_steps"), "--warmup-steps");
  EXPECT_TRUE(has_warning(r, "warmup_max_lr: ds.json: scheduler.params.warmup_max_lr=0.1 is overridden by --lr="));
  r = resolve_train_config(c, &cosine, nullptr);
  EXPECT_DOUBLE_EQ(r.train.schedule.lr.cos_min_ratio, 0.5);
  EXPECT_EQ(r.source_of("cos_min_ratio"), "--min-lr-ratio");
  // "auto" warmup from a zero --warmup-steps (HF Trainer's default) is valid: DeepSpeed's WarmupLR takes
  // max(2, warmup_num_steps); a negative one is not.
  const DsConfig auto_warm = ds(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}})");
  CommandLine zero = cli();
  zero.values.schedule.warmup_steps = 0;
  EXPECT_EQ(resolve_train_config(zero, &auto_warm, nullptr).train.schedule.lr.warmup_num_steps, 0);
  zero.values.schedule.warmup_steps = -1;
  EXPECT_ERROR_HAS(resolve_train_config(zero, &auto_warm, nullptr),
                   "warmup_num_steps=-1 (default (auto in ds.json: scheduler.params.warmup_num_steps)) must be >= 0");
}

TEST(ConfigResolve, BatchArithmetic) {
  CommandLine c = cli({"--dp-replicate"});
  c.values.parallel.dp_replicate = 2;  // world 8 = 2 × sp 4, dp_world 2
  const DsConfig bad = ds(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                              "gradient_accumulation_steps": 2})");
  EXPECT_ERROR_HAS(resolve_train_config(c, &bad, nullptr),
                   "train_batch_size=64 (ds.json: train_batch_size) must equal train_micro_batch_size_per_gpu × "
                   "gradient_accumulation_steps × dp_world = 4 × 2 × 2 = 16, where dp_world = world / "
                   "sequence_parallel_size = 8 / 4 = 2 (micro_batch from ds.json: train_micro_batch_size_per_gpu, "
                   "grad_accum from ds.json: gradient_accumulation_steps, sp from default)");
  // DeepSpeed's derivations: the missing one of micro / grad_accum from train_batch_size.
  DsConfig d = ds(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  ResolvedConfig r = resolve_train_config(c, &d, nullptr);
  EXPECT_EQ(r.train.data.grad_accum, 4);  // 32 / (4 × 2)
  EXPECT_EQ(r.source_of("grad_accum"), "derived: train_batch_size / (micro_batch × dp_world)");
  d = ds(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})");
  r = resolve_train_config(c, &d, nullptr);
  EXPECT_EQ(r.train.data.micro_batch, 8);  // 32 / (2 × 2)
  EXPECT_EQ(r.source_of("micro_batch"), "derived: train_batch_size / (grad_accum × dp_world)");
  d = ds(R"({"train_batch_size": 32})");
  CommandLine c3 = c;
  c3.values.data.grad_accum = 3;
  r = resolve_train_config(c3, &d, nullptr);
  EXPECT_EQ(r.train.data.grad_accum, 1);    // DeepSpeed sets 1
  EXPECT_EQ(r.train.data.micro_batch, 16);  // 32 / (1 × 2)
  // A flag counts as given: --micro-batch with train_batch_size derives grad_accum.
  CommandLine c2 = cli({"--dp-replicate", "--micro-batch"});
  c2.values.parallel.dp_replicate = 2;
  c2.values.data.micro_batch = 2;
  r = resolve_train_config(c2, &d, nullptr);
  EXPECT_EQ(r.train.data.grad_accum, 8);
  d = ds(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_ERROR_HAS(resolve_train_config(c, &d, nullptr),
                   "train_batch_size=30 (ds.json: train_batch_size) must equal train_micro_batch_size_per_gpu × "
                   "gradient_accumulation_steps × dp_world, but it is not a multiple of micro_batch × dp_world = 4 × 2 "
                   "= 8, so grad_accum cannot be derived (dp_world = world / sequence_parallel_size = 8 / 4 = 2)");
  // A flag that breaks a file's arithmetic is caught with the flag named.
  CommandLine c4 = cli({"--grad-accum"});
  c4.values.data.grad_accum = 3;
  d = ds(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8})");
  EXPECT_ERROR_HAS(resolve_train_config(c4, &d, nullptr), "= 8 × 3 × 1 = 24");
  EXPECT_ERROR_HAS(resolve_train_config(c4, &d, nullptr), "grad_accum from --grad-accum");
}

TEST(ConfigResolve, WorldSizeRule) {
  AccelerateConfig a = acc(R"(
num_processes: 8
parallelism_config:
  parallelism_config_dp_replicate_size: 1
  parallelism_config_dp_shard_size: 1
  parallelism_config_sp_size: 4
)");
  EXPECT_ERROR_HAS(
      resolve_train_config(cli(), nullptr, &a),
      "num_processes=8 (acc.yaml: num_processes) must equal dp_replicate × dp_shard × sp = 1 × 1 × 4 = 4 "
      "(dp_replicate from acc.yaml: parallelism_config.parallelism_config_dp_replicate_size, dp_shard from "
      "acc.yaml: parallelism_config.parallelism_config_dp_shard_size, sp from acc.yaml: "
      "parallelism_config.parallelism_config_sp_size)");
  // Without dp sizes, dp_replicate fills the world (DeepSpeed's dp = world / sp).
  a = acc("num_processes: 8\nparallelism_config:\n  parallelism_config_sp_size: 4\n");
  ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.parallel.dp_replicate, 2);
  EXPECT_EQ(r.source_of("dp_replicate"), "derived: num_processes / (sp × dp_shard)");
  a = acc("num_processes: 6\nparallelism_config:\n  parallelism_config_sp_size: 4\n");
  EXPECT_ERROR_HAS(resolve_train_config(cli(), nullptr, &a),
                   "num_processes=6 (acc.yaml: num_processes) must equal dp_replicate × dp_shard × sp; with sp=4 "
                   "(acc.yaml: parallelism_config.parallelism_config_sp_size) and dp_shard=1 (default), dp_replicate "
                   "would be 6 / (4 × 1) = 6 / 4, not a whole number");
  // A flag overriding the YAML's sp is held to the same rule.
  a =
      acc("num_processes: 4\nparallelism_config:\n  parallelism_config_dp_replicate_size: 1\n"
          "  parallelism_config_sp_size: 4\n");
  CommandLine c = cli({"--sp"});
  c.values.parallel.sp = 2;
  EXPECT_ERROR_HAS(resolve_train_config(c, nullptr, &a), "= 1 × 1 × 2 = 2");
  EXPECT_ERROR_HAS(resolve_train_config(c, nullptr, &a), "sp from --sp)");
}

// Launched as one process per GPU: the launch's process count is the world, as num_processes is.
TEST(ConfigResolve, LaunchWorldIsTheWorld) {
  CommandLine c = cli({"--sp"});
  c.values.parallel.sp = 4;
  c.launch_world = 8;
  c.launch_source = "the launch: torchrun, 8 processes";
  ResolvedConfig r = resolve_train_config(c, nullptr, nullptr);
  EXPECT_EQ(r.train.parallel.dp_replicate, 2);
  EXPECT_EQ(r.world, 8);
  EXPECT_EQ(r.source_of("dp_replicate"), "derived: world / (sp × dp_shard)");
  EXPECT_EQ(r.source_of("world"), "the launch: torchrun, 8 processes");
  // A DeepSpeed batch size counts the derived dp.
  DsConfig d = ds(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_EQ(resolve_train_config(c, &d, nullptr).train.data.grad_accum, 4);
  // sp that does not divide it, and a dp_replicate given that does not fill it.
  c.values.parallel.sp = 3;
  EXPECT_ERROR_HAS(resolve_train_config(c, nullptr, nullptr),
                   "world=8 (the launch: torchrun, 8 processes) must equal dp_replicate × dp_shard × sp; with sp=3");
  CommandLine c2 = cli({"--sp", "--dp-replicate"});
  c2.values.parallel.sp = 4;
  c2.values.parallel.dp_replicate = 1;
  c2.launch_world = 8;
  c2.launch_source = "the launch: Slurm, 8 processes";
  EXPECT_ERROR_HAS(resolve_train_config(c2, nullptr, nullptr),
                   "world=8 (the launch: Slurm, 8 processes) must equal dp_replicate × dp_shard × sp = 1 × 1 × 4 = 4");
  // An Accelerate num_processes must agree with the launch.
  AccelerateConfig a = acc("num_processes: 4\nparallelism_config:\n  parallelism_config_sp_size: 4\n");
  CommandLine c3 = cli();
  c3.launch_world = 8;
  c3.launch_source = "the launch: torchrun, 8 processes";
  EXPECT_ERROR_HAS(resolve_train_config(c3, nullptr, &a),
                   "num_processes=4 (acc.yaml: num_processes) but the launch started 8 processes (the launch: "
                   "torchrun, 8 processes): they must be equal");
}

TEST(ConfigResolve, AdamWithoutAdamWModeNeedsZeroWeightDecay) {
  const DsConfig d = ds(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": "auto"}}})");
  EXPECT_ERROR_HAS(resolve_train_config(cli(), &d, nullptr),
                   "ds.json: optimizer Adam with adam_w_mode=false is L2-regularised Adam, which seqpar does not "
                   "implement; weight_decay=0.01 (default (auto in ds.json: optimizer.params.weight_decay)) must be 0");
  CommandLine c = cli({"--weight-decay"});
  c.values.optimizer.adamw.weight_decay = 0;
  const ResolvedConfig r = resolve_train_config(c, &d, nullptr);
  EXPECT_EQ(r.recorded.optimizer, "Adam (adam_w_mode false)");
  EXPECT_FALSE(r.recorded.adam_w_mode);
}

TEST(ConfigResolve, OneDeepSpeedFile) {
  const std::string dir = testing::temp_dir();
  std::ofstream(dir + "/a.json") << R"({"train_micro_batch_size_per_gpu": 2})";
  std::ofstream(dir + "/b.json") << R"({"train_micro_batch_size_per_gpu": 3})";
  std::ofstream(dir + "/acc.yaml") << "deepspeed_config:\n  deepspeed_config_file: b.json\n";
  EXPECT_ERROR_HAS(resolve_train_config(cli(), dir + "/a.json", dir + "/acc.yaml"),
                   "two DeepSpeed configs: --deepspeed " + dir + "/a.json and " + dir +
                       "/acc.yaml: deepspeed_config.deepspeed_config_file = " + dir + "/b.json; give one of them");
  // The same file named twice is one file; the YAML's file alone is read too.
  ResolvedConfig r = resolve_train_config(cli(), dir + "/b.json", dir + "/acc.yaml");
  EXPECT_EQ(r.train.data.micro_batch, 3);
  r = resolve_train_config(cli(), "", dir + "/acc.yaml");
  EXPECT_EQ(r.train.data.micro_batch, 3);
  EXPECT_EQ(r.source_of("micro_batch"), dir + "/b.json: train_micro_batch_size_per_gpu");
}

// ---- Schedules. Expected values are worked out by hand from deepspeed/runtime/lr_schedules.py;
// step k (1-based) trains with last_batch_iteration i = k - 2, W = max(2, warmup_num_steps).

TEST(Schedules, LinearCosineIsSeqparsOwn) {
  LrSchedule s;  // lr 0.01, warmup 10, floor 0.1, 110 steps
  s.base_lr = 0.01;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  s.total_steps = 110;
  EXPECT_FLOAT_EQ(scheduled_lr(s, 5), 0.005f);    // 0.01 × 5/10
  EXPECT_FLOAT_EQ(scheduled_lr(s, 10), 0.01f);    // peak
  EXPECT_FLOAT_EQ(scheduled_lr(s, 60), 0.0055f);  // progress 0.5: 0.01 × (0.1 + 0.9 × 0.5)
  EXPECT_FLOAT_EQ(scheduled_lr(s, 110), 0.001f);  // floor
  EXPECT_FLOAT_EQ(scheduled_lr(s, 200), 0.001f);  // stays at the floor
  // lr_schedule_of takes these from the TrainConfig, and the trainer's lr_at is the same function.
  TrainConfig t;
  t.optimizer.adamw.lr = 0.01f;
  t.schedule.warmup_steps = 10;
  t.schedule.min_lr_ratio = 0.1f;
  t.schedule.steps = 110;
  EXPECT_FLOAT_EQ(scheduled_lr(lr_schedule_of(t), 60), 0.0055f);
  EXPECT_FLOAT_EQ(lr_at(t, 60), 0.0055f);
}

TEST(Schedules, WarmupLR) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupLR;
  s.warmup_min_lr = 0.001;
  s.warmup_max_lr = 0.011;
  s.warmup_num_steps = 10;
  s.warmup_type = WarmupType::kLog;
  const double tol = 1e-9;
  EXPECT_NEAR(scheduled_lr(s, 1), 0.001, tol);                  // i = -1: the constructor's min_lr
  EXPECT_NEAR(scheduled_lr(s, 2), 0.001, tol);                  // i = 0: log(1) = 0
  EXPECT_NEAR(scheduled_lr(s, 3), 0.004010299956639812, tol);   // 0.001 + 0.01 × log(2)/log(10)
  EXPECT_NEAR(scheduled_lr(s, 5), 0.0070205999132796236, tol);  // 0.001 + 0.01 × log(4)/log(10)
  EXPECT_NEAR(scheduled_lr(s, 11), 0.011, tol);                 // i = 9: log(10)/log(10) = 1
  EXPECT_NEAR(scheduled_lr(s, 12), 0.011, tol);                 // i = W: held at max
  EXPECT_NEAR(scheduled_lr(s, 1000), 0.011, tol);
  s.warmup_type = WarmupType::kLinear;
  EXPECT_NEAR(scheduled_lr(s, 7), 0.006, tol);  // i = 5: 0.001 + 0.01 × 5/10
  s.warmup_num_steps = 1;                       // W = max(2, 1) = 2
  EXPECT_NEAR(scheduled_lr(s, 3), 0.006, tol);  // i = 1: 1/2
  EXPECT_NEAR(scheduled_lr(s, 4), 0.011, tol);  // i = 2 = W
}

TEST(Schedules, WarmupDecayLR) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupDecayLR;
  s.warmup_min_lr = 0;
  s.warmup_max_lr = 0.01;
  s.warmup_num_steps = 4;
  s.total_num_steps = 20;
  s.warmup_type = WarmupType::kLinear;
  const double tol = 1e-9;
  EXPECT_NEAR(scheduled_lr(s, 1), 0.0, tol);
  EXPECT_NEAR(scheduled_lr(s, 2), 0.0, tol);     // i = 0
  EXPECT_NEAR(scheduled_lr(s, 4), 0.005, tol);   // i = 2: 2/4
  EXPECT_NEAR(scheduled_lr(s, 6), 0.01, tol);    // i = 4 = W: (20 - 4)/(20 - 4) = 1
  EXPECT_NEAR(scheduled_lr(s, 14), 0.005, tol);  // i = 12: (20 - 12)/16 = 0.5
  EXPECT_NEAR(scheduled_lr(s, 22), 0.0, tol);    // i = 20 = T
  EXPECT_NEAR(scheduled_lr(s, 30), 0.0, tol);    // past T: max(0, negative)
  s.warmup_type = WarmupType::kLog;
  EXPECT_NEAR(scheduled_lr(s, 3), 0.005, tol);  // i = 1: log(2)/log(4) = 0.5
}

TEST(Schedules, WarmupCosineLR) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupCosineLR;
  s.base_lr = 0.01;  // the optimizer's lr
  s.warmup_num_steps = 5;
  s.total_num_steps = 25;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.2;
  s.warmup_type = WarmupType::kLinear;
  const double tol = 1e-9;
  EXPECT_NEAR(scheduled_lr(s, 1), 0.0, tol);                  // i = -1: DeepSpeed returns 0
  EXPECT_NEAR(scheduled_lr(s, 2), 0.001, tol);                // i = 0: ratio 0.1
  EXPECT_NEAR(scheduled_lr(s, 4), 0.0046, tol);               // i = 2: 0.1 + 0.4 × 0.9 = 0.46
  EXPECT_NEAR(scheduled_lr(s, 7), 0.00995075336238055, tol);  // i = 5: p = 1/20; 0.2 + 0.8 × (1 + cos(0.05π))/2
  EXPECT_NEAR(scheduled_lr(s, 16), 0.006, tol);               // i = 14: p = 10/20; 0.2 + 0.8 × 0.5
  EXPECT_NEAR(scheduled_lr(s, 26), 0.002, tol);               // i = 24: p = 1: cos_min_ratio
  EXPECT_NEAR(scheduled_lr(s, 40), 0.002, tol);               // p clamped to 1
  s.warmup_type = WarmupType::kLog;
  EXPECT_NEAR(scheduled_lr(s, 3), 0.0048760890226605385, tol);  // i = 1: 0.1 + 0.9 × log(2)/log(5)
}

TEST(Schedules, ResolvedScheduleDrivesTheTrainer) {
  const DsConfig d = ds(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 5, "total_num_steps": 25,
                  "warmup_min_ratio": 0.1, "cos_min_ratio": 0.2, "warmup_type": "linear"}}})");
  const ResolvedConfig r = resolve_train_config(cli(), &d, nullptr);
  EXPECT_NEAR(lr_at(r.train, 16), 0.006, 1e-9);
  EXPECT_NEAR(lr_at(r.train, 1), 0.0, 1e-12);
}

// ---- Mixed precision and fp16's loss scaler.

TEST(ConfigResolve, DeepSpeedFp16AndItsLossScalerReachTheConfig) {
  const DsConfig d = ds(R"({"train_micro_batch_size_per_gpu": 2,
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 0.5}})");
  const ResolvedConfig r = resolve_train_config(cli(), &d, nullptr);
  const TrainConfig& t = r.train;
  EXPECT_EQ(t.precision.mixed_precision, Precision::kFp16);
  EXPECT_EQ(r.source_of("mixed_precision"), "ds.json: fp16.enabled");
  const LossScalerConfig& s = t.precision.scaler;
  EXPECT_EQ(s.loss_scale, 0);
  EXPECT_EQ(s.initial_scale_power, 12);
  EXPECT_EQ(s.loss_scale_window, 500);
  EXPECT_EQ(s.hysteresis, 3);
  EXPECT_TRUE(s.consecutive_hysteresis);
  EXPECT_EQ(s.min_loss_scale, 0.5);
  for (const char* k : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                        "consecutive_hysteresis", "min_loss_scale"})
    EXPECT_EQ(r.source_of(k), std::string("ds.json: fp16.") + k) << k;
  // --print-config's lines: the scaler's values with their sources (shown with fp16 only).
  const std::string text = format_resolved_config(r);
  for (const char* line : {"initial_scale_power", "loss_scale_window", "ds.json: fp16.hysteresis"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(r.value_of("hysteresis"), "3");
  EXPECT_FALSE(has_warning(r, "taken as bf16"));
  // The same keys for a bf16 run: not printed, and named as unused.
  const DsConfig b = ds(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
    "fp16": {"enabled": false, "loss_scale_window": 500}})");
  const ResolvedConfig rb = resolve_train_config(cli(), &b, nullptr);
  EXPECT_EQ(rb.train.precision.mixed_precision, Precision::kBf16);
  EXPECT_EQ(rb.value_of("loss_scale_window"), "");
  EXPECT_TRUE(has_warning(rb,
                          "loss_scale_window=500 (ds.json: fp16.loss_scale_window): the loss scaler's settings "
                          "are not used: mixed_precision=bf16 (ds.json: bf16.enabled)"));
}

TEST(ConfigResolve, Fp16RulesAndRefusalsNameTheirKeys) {
  // Both enabled: DeepSpeed's own refusal, naming both keys.
  EXPECT_ERROR_HAS(ds(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
                   "ds.json: 'fp16.enabled'=true and 'bf16.enabled'=true: bf16 and fp16 cannot both be enabled");
  EXPECT_ERROR_HAS(ds(R"({"fp16": {"enabled": true}, "bfloat16": {"enabled": true}})"),
                   "'fp16.enabled'=true and 'bfloat16.enabled'=true");
  EXPECT_ERROR_HAS(ds(R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})"),
                   "ds.json: 'fp16.fp16_master_weights_and_grads'=true is not supported");
  EXPECT_NE(ds(R"({"fp16": {"enabled": true, "auto_cast": true}})")
                .warnings.at(0)
                .find("fp16.auto_cast=true has nothing to cast"),
            std::string::npos);
  // The dynamic scaler's rules (DeepSpeed's), with the value's source, when fp16 runs it.
  const DsConfig w = ds(R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true, "loss_scale_window": 0}})");
  EXPECT_ERROR_HAS(resolve_train_config(cli(), &w, nullptr),
                   "loss_scale_window=0 must be >= 1 (ds.json: fp16.loss_scale_window)");
  const DsConfig st = ds(R"({"train_micro_batch_size_per_gpu": 2,
    "fp16": {"enabled": true, "loss_scale": 128, "loss_scale_window": 0}})");
  EXPECT_NO_THROW(resolve_train_config(cli(), &st, nullptr));  // static: the window is not used
}

// "auto" is HF Trainer's: fp16.enabled follows --fp16 (bf16.enabled --bf16); with neither, HF
// leaves fp16 off (transformers' trainer_config_process fills fp16.enabled from args.fp16, False
// by default), and seqpar's GPU path computes in bf16.
TEST(ConfigResolve, Fp16AutoFollowsTheTrainersFlag) {
  const DsConfig d = ds(R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": "auto"},
                            "bf16": {"enabled": "auto"}})");
  ResolvedConfig r = resolve_train_config(cli(), &d, nullptr);
  EXPECT_EQ(r.train.precision.mixed_precision, Precision::kBf16);
  EXPECT_EQ(r.source_of("mixed_precision"), "default (auto in ds.json: fp16.enabled)");
  CommandLine c = cli({"--fp16"});
  c.values.precision.mixed_precision = Precision::kFp16;
  r = resolve_train_config(c, &d, nullptr);
  EXPECT_EQ(r.train.precision.mixed_precision, Precision::kFp16);
  EXPECT_EQ(r.source_of("mixed_precision"), "--fp16 (auto in ds.json: fp16.enabled)");
  // A flag against a file's explicit value: the flag wins, with a warning.
  const DsConfig b = ds(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}})");
  r = resolve_train_config(c, &b, nullptr);
  EXPECT_EQ(r.train.precision.mixed_precision, Precision::kFp16);
  EXPECT_TRUE(has_warning(r, "mixed_precision: ds.json: bf16.enabled=bf16 is overridden by --fp16=fp16"));
}

TEST(ConfigResolve, AccelerateMixedPrecisionFp16) {
  const AccelerateConfig a = acc("mixed_precision: fp16\n");
  const ResolvedConfig r = resolve_train_config(cli(), nullptr, &a);
  EXPECT_EQ(r.train.precision.mixed_precision, Precision::kFp16);
  EXPECT_EQ(r.source_of("mixed_precision"), "acc.yaml: mixed_precision");
  EXPECT_EQ(r.value_of("initial_scale_power"), "16");  // DeepSpeed's scaler defaults
  EXPECT_FALSE(has_warning(r, "taken as bf16"));
  const AccelerateConfig no = acc("mixed_precision: \"no\"\n");
  const ResolvedConfig rn = resolve_train_config(cli(), nullptr, &no);
  EXPECT_EQ(rn.train.precision.mixed_precision, Precision::kBf16);
  EXPECT_TRUE(has_warning(rn, "mixed_precision=no: seqpar computes in bf16 on the GPU all the same"));
}

// ---- The command: seqpar train --print-config.

std::string line_of(const std::string& output, const std::string& name) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == name) return line;
  }
  return "";
}

TEST(PrintConfig, PrintsEverySettingWithItsSourceAndExits) {
  const std::string dir = testing::temp_dir();
  std::ofstream(dir + "/acc.yaml") << "num_processes: 8\ndeepspeed_config:\n  deepspeed_config_file: " +
                                          testing::source_path("examples/ds_config.json") +
                                          "\nparallelism_config:\n  parallelism_config_sp_size: 4\n"
                                          "  parallelism_config_sp_seq_length: 256\n";
  std::string out;
  const int rc = testing::run_command(
      testing::binary_path() + " train --accelerate-config " + dir + "/acc.yaml --lr 0.002 --steps 40 --print-config",
      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("seqpar train: resolved configuration (setting, value, source)"), std::string::npos) << out;
  const std::string ds_file = testing::source_path("examples/ds_config.json");
  auto expect_line = [&](const std::string& name, const std::string& value, const std::string& source) {
    const std::string line = line_of(out, name);
    EXPECT_NE(line.find(" " + value + " "), std::string::npos) << name << ": " << line << "\n" << out;
    EXPECT_NE(line.find(source), std::string::npos) << name << ": " << line;
  };
  expect_line("lr", "0.002", "--lr");
  expect_line("steps", "40", "--steps");
  expect_line("total_num_steps", "40", "--steps (auto in " + ds_file + ": scheduler.params.total_num_steps)");
  expect_line("seq_len", "256", dir + "/acc.yaml: parallelism_config.parallelism_config_sp_seq_length");
  expect_line("micro_batch", "16", ds_file + ": train_micro_batch_size_per_gpu");
  expect_line("dp_replicate", "2", "derived: num_processes / (sp × dp_shard)");
  expect_line("world", "8", dir + "/acc.yaml: num_processes");
  expect_line("train_batch_size", "32", "derived: micro_batch × grad_accum × dp_world");
  expect_line("lr_schedule", "WarmupCosineLR", ds_file + ": scheduler.type");
  expect_line("seed", "1234", "default");
  EXPECT_NE(out.find("optimizer.params.lr=0.003 is overridden by --lr=0.002"), std::string::npos) << out;
  EXPECT_EQ(out.find("tokens/s"), std::string::npos) << "--print-config must not train:\n" << out;
}

// The precision and the loss scaler from a DeepSpeed file and a flag, as --print-config prints them.
TEST(PrintConfig, LossScalerSettingsWithTheirSources) {
  const std::string dir = testing::temp_dir();
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2,
    "fp16": {"enabled": true, "initial_scale_power": 12, "hysteresis": 3}})";
  std::string out;
  const int rc = testing::run_command(
      testing::binary_path() + " train --config " + dir + "/ds.json --loss-scale-window 50 --print-config", &out);
  ASSERT_EQ(rc, 0) << out;
  for (auto [name, value, source] :
       {std::tuple{"mixed_precision", "fp16", dir + "/ds.json: fp16.enabled"},
        std::tuple{"initial_scale_power", "12", dir + "/ds.json: fp16.initial_scale_power"},
        std::tuple{"hysteresis", "3", dir + "/ds.json: fp16.hysteresis"},
        std::tuple{"loss_scale_window", "50", std::string("--loss-scale-window")},
        std::tuple{"min_loss_scale", "1", std::string("default")}}) {
    const std::string line = line_of(out, name);
    EXPECT_NE(line.find(" " + std::string(value) + " "), std::string::npos) << name << ": " << line << "\n" << out;
    EXPECT_NE(line.find(source), std::string::npos) << name << ": " << line;
  }
  EXPECT_EQ(out.find("taken as bf16"), std::string::npos) << out;
  // Without fp16 the scaler's lines are not printed.
  ASSERT_EQ(testing::run_command(testing::binary_path() + " train --print-config", &out), 0) << out;
  EXPECT_NE(line_of(out, "mixed_precision").find("bf16"), std::string::npos) << out;
  EXPECT_EQ(line_of(out, "loss_scale_window"), "") << out;
}

// The memory settings, from their flags.
TEST(PrintConfig, MemorySettingsFromFlags) {
  std::string out;
  const int rc = testing::run_command(testing::binary_path() +
                                          " train --zero-stage 1 --gradient-checkpointing --checkpoint-keep-attention "
                                          "--tiled-mlp-tokens 64 --tiled-loss-tokens 32 --print-config",
                                      &out);
  ASSERT_EQ(rc, 0) << out;
  for (auto [name, value, source] : {std::tuple{"zero_stage", "1", "--zero-stage"},
                                     std::tuple{"activation_checkpointing", "true", "--activation-checkpointing"},
                                     std::tuple{"checkpoint_keep_attention", "true", "--checkpoint-keep-attention"},
                                     std::tuple{"tiled_mlp_tokens", "64", "--tiled-mlp-tokens"},
                                     std::tuple{"tiled_loss_tokens", "32", "--tiled-loss-tokens"}}) {
    const std::string line = line_of(out, name);
    EXPECT_NE(line.find(std::string(" ") + value + " "), std::string::npos) << name << ": " << line << "\n" << out;
    EXPECT_NE(line.find(source), std::string::npos) << name << ": " << line;
  }
  // The memory plan of this configuration follows the settings (seqpar plan's table).
  EXPECT_NE(out.find("Memory plan per GPU: 512 tokens per rank (16 × 128 tokens over sp=4)"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpointing (keeping attention), tiled MLP 64, tiled loss 32, ZeRO-1 over 4"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("predicted peak: "), std::string::npos) << out;
  const int bad = testing::run_command(testing::binary_path() + " train --zero-stage 4 --steps 1", &out);
  EXPECT_NE(bad, 0);
  EXPECT_NE(out.find("zero_stage=4 must be 0, 1, 2 or 3"), std::string::npos) << out;
}

TEST(PrintConfig, ConfigErrorsFailTheCommand) {
  const std::string dir = testing::temp_dir();
  std::ofstream(dir + "/acc.yaml") << "parallelism_config:\n  parallelism_config_sp_attn_implementation: eager\n";
  std::string out;
  const int rc = testing::run_command(
      testing::binary_path() + " train --accelerate-config " + dir + "/acc.yaml --print-config", &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("seqpar: error: "), std::string::npos) << out;
  EXPECT_NE(out.find(dir + "/acc.yaml: 'parallelism_config.parallelism_config_sp_attn_implementation'"
                           "=eager is not supported: eager materialises the [S,S] score matrix"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace seqpar
