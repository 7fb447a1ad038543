// Accelerate YAML parsing: launch keys, the DeepSpeed section (file or inline), parallelism_config,
// the refusals with their messages, and the warnings.
#include <gtest/gtest.h>

#include <cstdio>

#include <filesystem>
#include <string>

#include "io/accelerate_config.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

AccelerateConfig parse(const std::string& yaml) { return parse_accelerate_config(yaml, "acc.yaml", "."); }

TEST(AccelerateConfig, ReadsEveryKeyAndTheDeepSpeedFile) {
  const std::string dir = testing::temp_dir();
  std::filesystem::create_directories(dir + "/conf");
  testing::write_bytes(dir + "/conf/ds.json", R"({"train_micro_batch_size_per_gpu": 2})");
  testing::write_bytes(dir + "/conf/acc.yaml", R"(
distributed_type: DEEPSPEED
num_processes: 8
num_machines: 2
machine_rank: 1
main_process_ip: 10.0.0.1
main_process_port: 29500
mixed_precision: bf16
deepspeed_config:
  deepspeed_config_file: ds.json
  zero3_init_flag: false
parallelism_config:
  parallelism_config_dp_replicate_size: 2
  parallelism_config_dp_shard_size: 1
  parallelism_config_tp_size: 1
  parallelism_config_cp_size: 1
  parallelism_config_sp_size: 4
  parallelism_config_sp_backend: deepspeed
  parallelism_config_sp_seq_length_is_variable: false
  parallelism_config_sp_seq_length: 65536
  parallelism_config_sp_attn_implementation: flash_attention_2
)");
  const AccelerateConfig c = load_accelerate_config(dir + "/conf/acc.yaml");
  EXPECT_EQ(c.source, dir + "/conf/acc.yaml");
  EXPECT_EQ(*c.distributed_type, "DEEPSPEED");
  EXPECT_EQ(*c.num_processes, 8);
  EXPECT_EQ(c.num_processes.key, "num_processes");
  EXPECT_EQ(*c.num_machines, 2);
  EXPECT_EQ(*c.machine_rank, 1);
  EXPECT_EQ(*c.main_process_ip, "10.0.0.1");
  EXPECT_EQ(*c.main_process_port, 29500);
  EXPECT_EQ(*c.mixed_precision, "bf16");
  // The DeepSpeed file is found relative to the YAML's directory, not the working directory.
  EXPECT_EQ(c.deepspeed_config_file, dir + "/conf/ds.json");
  ASSERT_TRUE(c.deepspeed.has_value());
  EXPECT_EQ(c.deepspeed->train_micro_batch_size_per_gpu.value, 2);
  EXPECT_EQ(c.deepspeed->source, dir + "/conf/ds.json");
  EXPECT_EQ(*c.dp_replicate_size, 2);
  EXPECT_EQ(*c.dp_shard_size, 1);
  EXPECT_EQ(*c.sp_size, 4);
  EXPECT_EQ(c.sp_size.key, "parallelism_config.parallelism_config_sp_size");
  EXPECT_EQ(*c.sp_backend, "deepspeed");
  EXPECT_FALSE(*c.sp_seq_length_is_variable);
  EXPECT_EQ(*c.sp_seq_length, 65536);
  EXPECT_EQ(*c.sp_attn_implementation, "flash_attention_2");
  // Every key is accounted for: the one without an effect in seqpar is named.
  std::string all;
  for (const std::string& w : c.warnings) all += w + "\n";
  EXPECT_NE(all.find("deepspeed_config.zero3_init_flag=false has no effect"), std::string::npos) << all;
  EXPECT_EQ(all.find("runs as stage"), std::string::npos) << all;
}

TEST(AccelerateConfig, InlineDeepSpeedKeys) {
  const AccelerateConfig c = parse(R"(
deepspeed_config:
  zero_stage: 3
  gradient_accumulation_steps: 4
  gradient_clipping: 1.0
  offload_optimizer_device: none
  offload_param_device: none
  seq_parallel_communication_data_type: bf16
)");
  EXPECT_FALSE(c.deepspeed.has_value());
  EXPECT_EQ(*c.zero_stage, 3);
  EXPECT_EQ(c.zero_stage.key, "deepspeed_config.zero_stage");
  EXPECT_EQ(*c.gradient_accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(*c.gradient_clipping, 1.0);
  EXPECT_EQ(*c.seq_parallel_communication_data_type, "bf16");
  EXPECT_EQ(*c.offload_optimizer_device, "none");
  EXPECT_EQ(*c.offload_param_device, "none");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];  // stage 3 is seqpar's stage 3
}

TEST(AccelerateConfig, AbsentAndNullKeys) {
  const AccelerateConfig c = parse("main_process_ip: null\nmain_process_port: ~\nnum_processes: 2\n");
  EXPECT_FALSE(c.main_process_ip.has());
  EXPECT_FALSE(c.main_process_port.has());
  EXPECT_FALSE(c.sp_size.has());
  EXPECT_EQ(*c.num_processes, 2);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(AccelerateConfig, UnknownKeysAreNamedInOneWarning) {
  const AccelerateConfig c = parse(R"(
compute_environment: LOCAL_MACHINE
num_processes: 4
parallelism_config:
  parallelism_config_sp_size: 4
  parallelism_config_sp_rotation: 3
)");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "acc.yaml: these keys are not read by seqpar (ignored): parallelism_config.parallelism_config_sp_rotation, "
            "compute_environment");
}

TEST(AccelerateConfig, WrongTypesNameKeyTypeAndValue) {
  EXPECT_INPUT_ERROR(parse("num_processes: \"4\"\n"),
                     "acc.yaml: 'num_processes' must be an integer >= 1, got string \"4\"");
  EXPECT_INPUT_ERROR(parse("num_processes: 4.5\n"), "acc.yaml: 'num_processes' must be an integer >= 1, got '4.5'");
  EXPECT_INPUT_ERROR(parse("num_processes: 0\n"), "acc.yaml: 'num_processes' must be an integer >= 1, got '0'");
  EXPECT_INPUT_ERROR(parse("num_processes: [4]\n"), "acc.yaml: 'num_processes' must be an integer >= 1, got a list");
  EXPECT_INPUT_ERROR(parse("main_process_port: 70000\n"),
                     "acc.yaml: 'main_process_port' must be an integer in 1..65535, got '70000'");
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_sp_size: two\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_sp_size' must be an integer >= 1, got 'two'");
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_sp_seq_length_is_variable: maybe\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_sp_seq_length_is_variable' must be true or "
                     "false, got 'maybe'");
  EXPECT_INPUT_ERROR(parse("parallelism_config: 4\n"), "acc.yaml: 'parallelism_config' must be a mapping, got '4'");
  EXPECT_INPUT_ERROR(parse("deepspeed_config:\n  zero_stage: 5\n"),
                     "acc.yaml: 'deepspeed_config.zero_stage' must be an integer in 0..3, got '5'");
  EXPECT_INPUT_ERROR(parse("deepspeed_config:\n  gradient_clipping: lots\n"),
                     "acc.yaml: 'deepspeed_config.gradient_clipping' must be a finite number >= 0, got 'lots'");
  EXPECT_INPUT_ERROR(parse("mixed_precision: fp32\n"),
                     "acc.yaml: 'mixed_precision' must be one of no, bf16, fp16, fp8, got 'fp32'");
  EXPECT_INPUT_ERROR(parse("main_process_ip: [1, 2]\n"), "acc.yaml: 'main_process_ip' must be a string, got a list");
}

TEST(AccelerateConfig, RefusalsSayWhy) {
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_sp_backend: accelerate\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_sp_backend'=accelerate is not supported: seqpar "
                     "implements DeepSpeed's Ulysses sequence parallelism (ALST); use deepspeed");
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_sp_attn_implementation: eager\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_sp_attn_implementation'=eager is not supported: "
                     "eager materialises the [S,S] score matrix and cannot be sequence-parallel; use sdpa or "
                     "flash_attention_2");
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_sp_attn_implementation: flex\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_sp_attn_implementation' must be one of sdpa, "
                     "flash_attention_2, flash_attention_3, got 'flex'");
  for (const char* ok : {"sdpa", "flash_attention_2", "flash_attention_3"})
    EXPECT_EQ(*parse(std::string("parallelism_config:\n  parallelism_config_sp_attn_implementation: ") + ok + "\n")
                   .sp_attn_implementation,
              ok);
  EXPECT_INPUT_ERROR(parse("parallelism_config:\n  parallelism_config_tp_size: 2\n"),
                     "acc.yaml: 'parallelism_config.parallelism_config_tp_size'=2 is not supported: seqpar has no "
                     "tensor parallelism (use 1)");
  // parallelism_config_cp_size is seqpar's ring degree now (test_config_defaults.cpp), not refused.
  EXPECT_INPUT_ERROR(parse("distributed_type: XLA\n"),
                     "acc.yaml: 'distributed_type'=XLA is not supported by seqpar (supported: NO, MULTI_CPU, "
                     "MULTI_GPU, DEEPSPEED, FSDP)");
  {  // fp16 is seqpar's fp16 with the loss scaler: no warning
    const AccelerateConfig c = parse("mixed_precision: fp16\n");
    EXPECT_TRUE(c.warnings.empty());
    EXPECT_EQ(*c.mixed_precision, "fp16");
  }
  EXPECT_INPUT_ERROR(parse("mixed_precision: fp8\n"), "acc.yaml: 'mixed_precision'=fp8 is not supported");
  EXPECT_INPUT_ERROR(parse("deepspeed_config:\n  offload_optimizer_device: nvme\n"),
                     "acc.yaml: 'deepspeed_config.offload_optimizer_device'=nvme is not supported: seqpar offloads the "
                     "optimizer state to host memory (cpu) or keeps it on the device (none)");
  EXPECT_INPUT_ERROR(parse("num_machines: 2\nmachine_rank: 2\n"),
                     "acc.yaml: 'machine_rank'=2 must be < 'num_machines'=2");
  EXPECT_INPUT_ERROR(
      parse("num_machines: 2\nnum_processes: 5\n"),
      "acc.yaml: 'num_processes'=5 (the total over all machines) must be a multiple of 'num_machines'=2");
}

TEST(AccelerateConfig, DeepSpeedFileProblems) {
  const std::string dir = testing::temp_dir();
  EXPECT_INPUT_ERROR(
      parse_accelerate_config("deepspeed_config:\n  deepspeed_config_file: missing.json\n", "a.yaml", dir),
      "a.yaml: 'deepspeed_config.deepspeed_config_file'=missing.json: no such file (looked for " + dir +
          "/missing.json; a relative path is taken from the YAML's directory)");
  testing::write_bytes(dir + "/ds.json", "{}");
  EXPECT_INPUT_ERROR(
      parse_accelerate_config(
          "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 2\n  gradient_clipping: 1\n", "a.yaml",
          dir),
      "a.yaml: 'deepspeed_config.deepspeed_config_file' is given, so these keys belong in that file, "
      "not in the YAML: deepspeed_config.zero_stage, deepspeed_config.gradient_clipping");
  // An error inside the DeepSpeed file names that file.
  testing::write_bytes(dir + "/bad.json", R"({"optimizer": {"type": "Lamb"}})");
  EXPECT_INPUT_ERROR(parse_accelerate_config("deepspeed_config:\n  deepspeed_config_file: bad.json\n", "a.yaml", dir),
                     dir + "/bad.json: 'optimizer.type'=\"Lamb\" is not supported");
  // An absolute path is taken as is.
  const AccelerateConfig c = parse_accelerate_config(
      "deepspeed_config:\n  deepspeed_config_file: " + dir + "/ds.json\n", "a.yaml", "/somewhere/else");
  EXPECT_EQ(c.deepspeed_config_file, dir + "/ds.json");
}

TEST(AccelerateConfig, BadFiles) {
  EXPECT_INPUT_ERROR(parse("num_processes: [4\n"), "acc.yaml: not valid YAML:");
  EXPECT_INPUT_ERROR(parse("- 1\n- 2\n"), "acc.yaml: an Accelerate config must be a YAML mapping, got a list");
  EXPECT_INPUT_ERROR(load_accelerate_config("/nonexistent/acc.yaml"),
                     "/nonexistent/acc.yaml: cannot open the Accelerate config");
}

}  // namespace
}  // namespace seqpar
