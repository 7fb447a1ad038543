// Config files parsed as their owners parse them (issue 19.8) and refused when they are not the
// kind they were given as (issue 18.3): duplicate keys, several YAML documents, non-finite numbers,
// a YAML to --deepspeed, a DeepSpeed JSON / ArcticTraining recipe / unrelated YAML to
// --accelerate-config; fsdp_config and parallelism_config_cp_size mapped; every problem at once.
#include <gtest/gtest.h>

#include "io/accelerate_config.h"
#include "io/ds_config.h"
#include "io_test_util.h"

namespace seqpar {
namespace {

AccelerateConfig acc(const std::string& yaml) { return parse_accelerate_config(yaml, "a.yaml", "."); }
DsConfig ds(const std::string& json) { return parse_ds_config(json, "d.json"); }

TEST(ConfigMigration, DeepSpeedDuplicateKeysAreRefusedAsDeepSpeedRefusesThem) {
  EXPECT_INPUT_ERROR(ds(R"({"gradient_clipping": 1.0, "gradient_clipping": 0.5})"),
                     "d.json: 'gradient_clipping' appears twice");
  EXPECT_INPUT_ERROR(ds(R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "lr": 2e-4}}})"),
                     "'optimizer.params.lr' appears twice");
  EXPECT_NO_THROW(ds(R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "scheduler": {"type": "WarmupLR",
                        "params": {"warmup_max_lr": 1e-4}}, "train_micro_batch_size_per_gpu": 1})"));
}

TEST(ConfigMigration, NonFiniteNumbersAreRefused) {
  // nlohmann refuses a number beyond double's range while parsing, as Python's json would give inf.
  EXPECT_INPUT_ERROR(ds(R"({"gradient_clipping": 1e999})"), "d.json: not valid JSON: [json.exception.out_of_range.406]");
  EXPECT_INPUT_ERROR(acc("distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: .inf\n"),
                     "'deepspeed_config.gradient_clipping' must be a finite number >= 0");
  EXPECT_INPUT_ERROR(acc("distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: .nan\n"),
                     "must be a finite number");
}

TEST(ConfigMigration, AccelerateDuplicateKeysAndSeveralDocumentsAreRefused) {
  EXPECT_INPUT_ERROR(acc("num_processes: 2\nnum_processes: 8\n"), "a.yaml: 'num_processes' appears twice");
  EXPECT_INPUT_ERROR(acc("parallelism_config:\n  parallelism_config_sp_size: 2\n  parallelism_config_sp_size: 4\n"),
                     "'parallelism_config.parallelism_config_sp_size' appears twice");
  EXPECT_INPUT_ERROR(acc("num_processes: 2\n---\nnum_processes: 8\n"), "holds 2 YAML documents");
}

TEST(ConfigMigration, AFileOfAnotherKindIsRefusedSayingWhichFlagTakesIt) {
  EXPECT_INPUT_ERROR(acc(R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}})"),
                     "not an Accelerate config: it looks like a DeepSpeed JSON config (train_micro_batch_size_per_gpu, "
                     "zero_optimization): give it with --deepspeed");
  EXPECT_INPUT_ERROR(acc("learning_rate: 3\nfoo: bar\n"),
                     "not an Accelerate config: none of its top-level keys (learning_rate, foo) belongs to");
  const std::string arctic =
      "type: causal_lm\nmicro_batch_size: 1\nsequence_parallel_size: 8\nactivation_checkpoint_cpu_offload: true\n"
      "tiled_mlp_compute: true\ndeepspeed:\n  zero_optimization:\n    stage: 3\nmodel:\n  name_or_path: x\n";
  const std::string m = testing::input_error_of([&] { acc(arctic); });
  for (const char* part :
       {"ArcticTraining recipe (type: causal_lm)", "micro_batch_size -> --micro-batch", "sequence_parallel_size -> --sp",
        "activation_checkpoint_cpu_offload -> --activation-checkpointing --checkpoint-offload",
        "tiled_mlp_compute -> --tiled-mlp-tokens N", "deepspeed -> its content as a DeepSpeed JSON file",
        "model -> --model DIR"})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  EXPECT_INPUT_ERROR(ds("distributed_type: MULTI_GPU\nnum_processes: 2\n"),
                     "not valid JSON: [json.exception.parse_error.101] parse error");
  EXPECT_INPUT_ERROR(ds("distributed_type: MULTI_GPU\nnum_processes: 2\n"),
                     "it is YAML, not JSON: it looks like an Accelerate config (distributed_type, num_processes): give "
                     "it with --accelerate-config");
  EXPECT_INPUT_ERROR(ds(R"({"model_type": "llama", "hidden_size": 64})"),
                     "not a DeepSpeed config: it looks like a model's config.json");
}

TEST(ConfigMigration, FsdpConfigMapsOntoSeqparsLevers) {
  AccelerateConfig a = acc(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_activation_checkpointing: "
      "true\n  fsdp_offload_params: false\n  fsdp_state_dict_type: FULL_STATE_DICT\n  fsdp_cpu_ram_efficient_loading: "
      "true\n");
  ASSERT_TRUE(a.fsdp_zero_stage.has());
  EXPECT_EQ(*a.fsdp_zero_stage, 2);
  EXPECT_EQ(a.fsdp_zero_stage.key, "fsdp_config.fsdp_sharding_strategy");
  ASSERT_TRUE(a.fsdp_activation_checkpointing.has());
  EXPECT_TRUE(*a.fsdp_activation_checkpointing);
  std::string warnings;
  for (const std::string& w : a.warnings) warnings += w + "\n";
  EXPECT_NE(warnings.find("fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT has no effect"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("fsdp_config.fsdp_cpu_ram_efficient_loading=true has no effect"), std::string::npos);
  EXPECT_EQ(*acc("fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n").fsdp_zero_stage, 2);
  EXPECT_EQ(*acc("fsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n").fsdp_zero_stage, 0);
  // FULL_SHARD shards the parameters too: ZeRO stage 3; CPU offload of the parameters: parameter offload.
  EXPECT_EQ(*acc("fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n").fsdp_zero_stage, 3);
  EXPECT_EQ(*acc("fsdp_config:\n  fsdp_reshard_after_forward: true\n").fsdp_zero_stage, 3);
  const AccelerateConfig off = acc("fsdp_config:\n  fsdp_offload_params: true\n");
  ASSERT_TRUE(off.offload_param_device.has());
  EXPECT_EQ(*off.offload_param_device, "cpu");
  EXPECT_EQ(off.offload_param_device.key, "fsdp_config.fsdp_offload_params");
  EXPECT_INPUT_ERROR(acc("fsdp_config:\n  fsdp_frobnicate: 1\n"), "'fsdp_config.fsdp_frobnicate' is not an FSDP setting");
}

TEST(ConfigMigration, ContextParallelSizeIsRead) {
  const AccelerateConfig a = acc("parallelism_config:\n  parallelism_config_cp_size: 4\n");
  ASSERT_TRUE(a.cp_size.has());
  EXPECT_EQ(*a.cp_size, 4);
}

TEST(ConfigMigration, EveryProblemOfAFileIsReportedAtOnce) {
  const std::string m = testing::input_error_of([&] {
    ds(R"({"fp16": {"enabled": true, "loss_scale": -1}, "zero_optimization": {"stage": 2,
           "offload_optimizer": {"device": "cpu"}}, "scheduler": {"type": "OneCycle"}, "gradient_clipping": -1})");
  });
  // (offload_optimizer to the cpu is one of seqpar's levers, and fp16 runs with its loss scaler: no problem)
  EXPECT_NE(m.find("3 problems in the configuration"), std::string::npos) << m;
  for (const char* part : {"'fp16.loss_scale' must be a number >= 0", "'scheduler.type'=\"OneCycle\"",
                           "'gradient_clipping' must be a number >= 0"})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  const std::string y = testing::input_error_of([&] {
    acc("num_processes: four\nmixed_precision: fp8\nparallelism_config:\n  parallelism_config_tp_size: 2\n");
  });
  EXPECT_NE(y.find("3 problems"), std::string::npos) << y;
}

}  // namespace
}  // namespace seqpar
