// DeepSpeed JSON parsing: every key read, "auto", the refusals (with their messages), the warnings.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "io/ds_config.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

TEST(DsConfig, ReadsEveryKey) {
  const DsConfig c = parse_ds_config(R"({
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "sequence_parallel_size": 8,
    "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "none"}},
    "bf16": {"enabled": true},
    "fp16": {"enabled": false},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4,
                  "warmup_num_steps": 100, "total_num_steps": 1000, "warmup_type": "linear"}},
    "gradient_clipping": 0.5,
    "steps_per_print": 7,
    "wall_clock_breakdown": true,
    "seq_parallel_communication_data_type": "bf16"
  })",
                                     "ds.json");
  EXPECT_EQ(c.source, "ds.json");
  EXPECT_TRUE(c.train_batch_size.is_set());
  EXPECT_EQ(c.train_batch_size.value, 64);
  EXPECT_EQ(c.train_batch_size.key, "train_batch_size");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu.value, 2);
  EXPECT_EQ(c.gradient_accumulation_steps.value, 4);
  EXPECT_EQ(c.sequence_parallel_size.value, 8);
  EXPECT_EQ(c.zero_stage.value, 0);
  EXPECT_EQ(c.zero_stage.key, "zero_optimization.stage");
  EXPECT_TRUE(c.bf16_enabled.is_set());
  EXPECT_TRUE(c.bf16_enabled.value);
  ASSERT_TRUE(c.optimizer.present);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  EXPECT_DOUBLE_EQ(c.optimizer.lr.value, 3e-4);
  EXPECT_EQ(c.optimizer.lr.key, "optimizer.params.lr");
  EXPECT_DOUBLE_EQ(c.optimizer.betas.value[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.betas.value[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps.value, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay.value, 0.1);
  ASSERT_TRUE(c.scheduler.present);
  EXPECT_EQ(c.scheduler.type, "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr.value, 1e-5);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr.value, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps.value, 100);
  EXPECT_EQ(c.scheduler.total_num_steps.value, 1000);
  EXPECT_EQ(c.scheduler.warmup_type.value, "linear");
  EXPECT_EQ(c.scheduler.total_num_steps.key, "scheduler.params.total_num_steps");
  EXPECT_DOUBLE_EQ(c.gradient_clipping.value, 0.5);
  EXPECT_EQ(c.steps_per_print.value, 7);
  EXPECT_TRUE(c.wall_clock_breakdown.value);
  EXPECT_EQ(c.seq_parallel_communication_data_type.value, "bf16");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
}

TEST(DsConfig, AbsentKeysStayAbsent) {
  const DsConfig c = parse_ds_config("{}", "empty.json");
  EXPECT_TRUE(c.train_batch_size.absent());
  EXPECT_TRUE(c.train_micro_batch_size_per_gpu.absent());
  EXPECT_TRUE(c.zero_stage.absent());
  EXPECT_FALSE(c.optimizer.present);
  EXPECT_FALSE(c.scheduler.present);
  EXPECT_TRUE(c.warnings.empty());
  // null is Python's None: absent.
  EXPECT_TRUE(parse_ds_config(R"({"gradient_clipping": null})", "n.json").gradient_clipping.absent());
}

TEST(DsConfig, AutoValues) {
  const DsConfig c = parse_ds_config(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "sequence_parallel_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto"}}
  })",
                                     "auto.json");
  EXPECT_TRUE(c.train_batch_size.is_auto());
  EXPECT_TRUE(c.train_micro_batch_size_per_gpu.is_auto());
  EXPECT_TRUE(c.gradient_accumulation_steps.is_auto());
  EXPECT_TRUE(c.sequence_parallel_size.is_auto());
  EXPECT_TRUE(c.gradient_clipping.is_auto());
  EXPECT_TRUE(c.bf16_enabled.is_auto());
  EXPECT_TRUE(c.optimizer.lr.is_auto());
  EXPECT_TRUE(c.optimizer.betas.is_auto());
  EXPECT_TRUE(c.optimizer.eps.is_auto());
  EXPECT_TRUE(c.optimizer.weight_decay.is_auto());
  EXPECT_TRUE(c.scheduler.warmup_min_lr.is_auto());
  EXPECT_TRUE(c.scheduler.warmup_max_lr.is_auto());
  EXPECT_TRUE(c.scheduler.warmup_num_steps.is_auto());
  // "auto" only where the trainer has a value to give.
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"steps_per_print": "auto"})", "a.json"),
                     "a.json: 'steps_per_print' must be an integer >= 1, got string \"auto\"");
}

TEST(DsConfig, OptimizerSpellings) {
  // DeepSpeed compares optimizer names case-insensitively; its Adam is AdamW unless adam_w_mode is false.
  DsConfig c = parse_ds_config(R"({"optimizer": {"type": "adamw"}})", "o.json");
  EXPECT_EQ(c.optimizer.type, "AdamW");
  c = parse_ds_config(R"({"optimizer": {"type": "Adam", "params": {"weight_decay": 0.1}}})", "o.json");
  EXPECT_EQ(c.optimizer.type, "Adam");
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  c = parse_ds_config(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0}}})",
                      "o.json");
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  c = parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false, "torch_adam": true}}})",
                      "o.json");
  EXPECT_TRUE(c.optimizer.adam_w_mode);  // AdamW forces it
  // The older "bfloat16" spelling of bf16.
  EXPECT_TRUE(parse_ds_config(R"({"bfloat16": {"enabled": true}})", "b.json").bf16_enabled.value);
}

// DeepSpeed's activation_checkpointing section is not HF's gradient checkpointing: it is named in a
// warning that points at seqpar's flag, and its keys are not listed as unread.
TEST(DsConfig, ActivationCheckpointingSectionPointsAtTheFlag) {
  const DsConfig c = parse_ds_config(
      R"({"activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": false}})", "a.json");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("a.json: activation_checkpointing configures DeepSpeed's own checkpointing API"),
            std::string::npos)
      << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("seqpar's equivalent is --activation-checkpointing"), std::string::npos);
}

TEST(DsConfig, ZeroStagesAndOffloadAreRead) {
  for (int stage = 0; stage <= 3; ++stage) {
    const DsConfig c = parse_ds_config(fmt::format(R"({{"zero_optimization": {{"stage": {}}}}})", stage), "z.json");
    EXPECT_EQ(c.zero_stage.value, stage);
    EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
  }
  const DsConfig c = parse_ds_config(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 1.0},
      "offload_param": {"device": "cpu", "pin_memory": false},
      "stage3_prefetch_bucket_size": 5e8, "stage3_param_persistence_threshold": 1e6,
      "stage3_max_live_parameters": 1e9}})",
                                     "z.json");
  EXPECT_EQ(c.offload_optimizer_device.value, "cpu");
  EXPECT_EQ(c.offload_param_device.value, "cpu");
  ASSERT_TRUE(c.offload_param_pin_memory.is_set());
  EXPECT_FALSE(c.offload_param_pin_memory.value);
  // Each stage-3 knob named as ignored, with why; nothing else.
  ASSERT_EQ(c.warnings.size(), 3u);
  for (const char* k : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters"}) {
    bool found = false;
    for (const std::string& w : c.warnings)
      found = found || w.find(std::string("z.json: zero_optimization.") + k +
                              " is ignored: seqpar gathers one decoder layer at a time") != std::string::npos;
    EXPECT_TRUE(found) << k;
  }
  const DsConfig pin = parse_ds_config(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": false}}})", "p.json");
  ASSERT_EQ(pin.warnings.size(), 1u);
  EXPECT_NE(pin.warnings[0].find("p.json: zero_optimization.offload_optimizer.pin_memory=false changes nothing"),
            std::string::npos)
      << pin.warnings[0];
}

TEST(DsConfig, UnknownKeysAreNamedInOneWarning) {
  const DsConfig c = parse_ds_config(R"({
    "zero_optimization": {"stage": 0, "overlap_comm": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "fused": true}},
    "flops_profiler": {"enabled": false},
    "train_micro_batch_size_per_gpu": 1
  })",
                                     "u.json");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "u.json: these keys are not read by seqpar (ignored): zero_optimization.overlap_comm, "
            "optimizer.params.fused, flops_profiler");
  const DsConfig one = parse_ds_config(R"({"dump_state": false})", "u.json");
  ASSERT_EQ(one.warnings.size(), 1u);
  EXPECT_EQ(one.warnings[0], "u.json: this key is not read by seqpar (ignored): dump_state");
  // prescale_gradients is read, and said to have nothing to set (f32 gradients, one division).
  const DsConfig pre = parse_ds_config(R"({"prescale_gradients": false})", "u.json");
  ASSERT_EQ(pre.warnings.size(), 1u);
  EXPECT_EQ(pre.warnings[0],
            "u.json: prescale_gradients=false has nothing to set: seqpar all-reduces f32 gradients "
            "and divides once, the same mean as dividing first");
}

// fp16 with DeepSpeed's dynamic loss scaler (Megatron-DeepSpeed's and Accelerate's templates):
// every key read, as DeepSpeed types it, with no warning (train/config_resolve applies them).
TEST(DsConfig, Fp16AndItsLossScalerAreRead) {
  const DsConfig c = parse_ds_config(R"({"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500,
                                                  "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 11,
                                                  "consecutive_hysteresis": true}})",
                                     "r.json");
  EXPECT_TRUE(c.fp16_enabled.is_set() && c.fp16_enabled.value);
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
  EXPECT_EQ(c.loss_scale.value, 0);
  EXPECT_EQ(c.loss_scale_window.value, 500);
  EXPECT_EQ(c.loss_scale_window.key, "fp16.loss_scale_window");
  EXPECT_EQ(c.hysteresis.value, 2);
  EXPECT_EQ(c.min_loss_scale.value, 1);
  EXPECT_EQ(c.initial_scale_power.value, 11);
  EXPECT_TRUE(c.consecutive_hysteresis.value);
  const DsConfig a = parse_ds_config(R"({"fp16": {"enabled": "auto", "loss_scale": 0}})", "r.json");
  EXPECT_TRUE(a.fp16_enabled.is_auto());
  EXPECT_TRUE(a.warnings.empty());
  // The scaler's keys are typed as DeepSpeed types them.
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"fp16": {"enabled": true, "loss_scale_window": "many"}})", "r.json"),
                     "r.json: 'fp16.loss_scale_window' must be an integer >= 0");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "r.json"),
                     "r.json: 'fp16.enabled'=true and 'bf16.enabled'=true: bf16 and fp16 cannot both be enabled");
}

TEST(DsConfig, WrongTypesNameKeyTypeAndValue) {
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"train_micro_batch_size_per_gpu": "four"})", "t.json"),
                     "t.json: 'train_micro_batch_size_per_gpu' must be an integer >= 1 or \"auto\", got string "
                     "\"four\"");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"train_batch_size": 0})", "t.json"),
                     "t.json: 'train_batch_size' must be an integer >= 1 or \"auto\", got integer 0");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"gradient_accumulation_steps": 2.5})", "t.json"),
                     "'gradient_accumulation_steps' must be an integer >= 1 or \"auto\", got float 2.5");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"sequence_parallel_size": true})", "t.json"),
                     "'sequence_parallel_size' must be an integer >= 1 or \"auto\", got boolean true");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"zero_optimization": {"stage": 4}})", "t.json"),
                     "t.json: 'zero_optimization.stage' must be an integer in 0..3, got integer 4");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"zero_optimization": 2})", "t.json"),
                     "t.json: 'zero_optimization' must be an object, got integer 2");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"bf16": {"enabled": "yes"}})", "t.json"),
                     "t.json: 'bf16.enabled' must be true or false or \"auto\", got string \"yes\"");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"gradient_clipping": -1})", "t.json"),
                     "t.json: 'gradient_clipping' must be a number >= 0 or \"auto\", got integer -1");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"steps_per_print": 0})", "t.json"),
                     "t.json: 'steps_per_print' must be an integer >= 1, got integer 0");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"wall_clock_breakdown": 1})", "t.json"),
                     "t.json: 'wall_clock_breakdown' must be true or false, got integer 1");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"seq_parallel_communication_data_type": "fp16"})", "t.json"),
                     "t.json: 'seq_parallel_communication_data_type' must be one of \"fp32\", \"bf16\", got string "
                     "\"fp16\"");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0}}})", "t.json"),
                     "t.json: 'optimizer.params.lr' must be a number > 0 or \"auto\", got integer 0");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})", "t.json"),
                     "t.json: 'optimizer.params.betas' must be a list of two numbers in [0, 1) or \"auto\", got list "
                     "[0.9]");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})", "t.json"),
                     "'optimizer.params.betas' must be a list of two numbers in [0, 1)");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"eps": "small"}}})", "t.json"),
                     "t.json: 'optimizer.params.eps' must be a number > 0 or \"auto\", got string \"small\"");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"weight_decay": -0.1}}})", "t.json"),
                     "t.json: 'optimizer.params.weight_decay' must be a number >= 0 or \"auto\", got float -0.1");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": -1}}})", "t.json"),
      "t.json: 'scheduler.params.warmup_num_steps' must be an integer >= 0 or \"auto\", got integer -1");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
                          "cos_min_ratio": 1.5}}})",
                                     "t.json"),
                     "t.json: 'scheduler.params.cos_min_ratio' must be a number in [0, 1], got float 1.5");
}

TEST(DsConfig, RefusalsSayWhy) {
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})", "r.json"),
      "r.json: 'zero_optimization.offload_optimizer.device'=\"nvme\" is not supported: seqpar offloads the optimizer "
      "state to host memory (\"cpu\") or keeps it on the device (\"none\")");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})", "r.json"),
      "r.json: 'zero_optimization.offload_param.device'=\"nvme\" is not supported: seqpar offloads the parameters");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 0.3}}})", "r.json"),
      "r.json: 'zero_optimization.offload_optimizer.ratio'=0.3 is not supported: seqpar offloads the whole optimizer "
      "state (ratio 1.0)");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "Lamb"}})", "r.json"),
                     "r.json: 'optimizer.type'=\"Lamb\" is not supported (supported: AdamW, Adam;");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"params": {"lr": 1e-3}}})", "r.json"),
                     "r.json: 'optimizer.type' is missing (supported: AdamW, Adam)");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.01}}})",
                      "r.json"),
      "r.json: optimizer Adam with 'optimizer.params.adam_w_mode'=false and weight_decay=0.01 is L2-regularised Adam, "
      "which seqpar does not implement");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}})", "r.json"),
      "r.json: 'optimizer.params.bias_correction'=false is not supported");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})", "r.json"),
                     "r.json: 'optimizer.params.amsgrad'=true is not supported");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"scheduler": {"type": "OneCycle", "params": {}}})", "r.json"),
                     "r.json: 'scheduler.type'=\"OneCycle\" is not supported (supported: WarmupLR, WarmupDecayLR, "
                     "WarmupCosineLR)");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"scheduler": {"params": {}}})", "r.json"),
                     "r.json: 'scheduler.type' is missing");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}})", "r.json"),
      "r.json: 'scheduler.params.cos_min_ratio' is not a parameter of WarmupLR (its parameters: warmup_num_steps, "
      "warmup_type, warmup_min_lr, warmup_max_lr)");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 9,
                          "warmup_max_lr": 0.1}}})",
                      "r.json"),
      "'scheduler.params.warmup_max_lr' is not a parameter of WarmupCosineLR (its parameters: warmup_num_steps, "
      "warmup_type, total_num_steps, warmup_min_ratio, cos_min_ratio)");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5}}})", "r.json"),
      "r.json: 'scheduler.params.total_num_steps' is required by WarmupDecayLR (a number, or \"auto\" for --steps)");
  EXPECT_INPUT_ERROR(
      parse_ds_config(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}})", "r.json"),
      "r.json: 'scheduler.params.warmup_type' must be one of \"log\", \"linear\", got string \"exp\"");
  EXPECT_INPUT_ERROR(parse_ds_config(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.1,
                          "warmup_max_lr": 0.01}}})",
                                     "r.json"),
                     "r.json: 'scheduler.params.warmup_min_lr'=0.1 must be <= 'scheduler.params.warmup_max_lr'=0.01");
}

TEST(DsConfig, BadFiles) {
  EXPECT_INPUT_ERROR(parse_ds_config("{\"train_batch_size\": 8,", "broken.json"), "broken.json: not valid JSON:");
  EXPECT_INPUT_ERROR(parse_ds_config("[1, 2]", "list.json"),
                     "list.json: a DeepSpeed config must be a JSON object, got list [1,2]");
  EXPECT_INPUT_ERROR(load_ds_config("/nonexistent/ds.json"), "/nonexistent/ds.json: cannot open the DeepSpeed config");
  const std::string path = testing::temp_dir() + "/ds.json";
  testing::write_bytes(path, R"({"train_micro_batch_size_per_gpu": 3})");
  const DsConfig c = load_ds_config(path);
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu.value, 3);
}

}  // namespace
}  // namespace seqpar
