// examples/megatron-deepspeed/ run as documented: both scripts on the CPU at a tiny size, through
// seqpar launch, with their DeepSpeed JSON (fp16) and every Megatron flag they pass.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace seqpar {
namespace {

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// The scripts default to the GPT presets (gpt-1.3b-32k, gpt-30b-32k); CI runs them at a tiny size
// on the GPT family's tiny preset (the size flags override its shape).
constexpr const char* kPreset = "gpt-tiny";

std::string run_example(const std::string& script, const std::string& hidden, std::string* out) {
  const std::string dir = testing::temp_dir();
  const std::string env = fmt::format(
      "SEQPAR={} DEVICE=cpu PRESET={} SEQ_LEN=128 NUM_LAYERS=2 HIDDEN_SIZE={} NUM_ATTN_HEADS=4 SP_SIZE=2 "
      "TRAIN_TOKENS=1024 LR_WARMUP_TOKENS=256 LOG_INTERVAL=1 EVAL_INTERVAL=4 EVAL_ITERS=1 SAVE_INTERVAL=2 OUTPUT={} ",
      testing::binary_path(), kPreset, hidden, dir);
  const int rc = testing::run_command(env + testing::source_path("examples/megatron-deepspeed/" + script), out);
  EXPECT_EQ(rc, 0) << *out;
  return dir;
}

TEST(ExamplesMegatron, Gpt13BScriptRunsOnTheCpuAtATinySize) {
  std::string out;
  const std::string dir = run_example("pretrain_gpt_1.3B_seq_parallel_32k.sh", "64", &out);
  // 1024 tokens / (global batch 2 × 128) = 4 steps over sp 2 (Ulysses), the cosine to min_lr.
  EXPECT_HAS(out, "[rank 0] [seqpar info] train: 2 layers, C=64, H=4, Hkv=4");
  EXPECT_HAS(out, "world 2 = dp 1 x sp 2 (2 ulysses x 1 ring");
  EXPECT_HAS(out, "2 sequences x 128 tokens per step, steps 1..4 of 4");
  EXPECT_HAS(out, "step     4/4 | loss");
  EXPECT_HAS(out, "lr 1.00e-06");
  // Its DeepSpeed JSON's fp16 runs with the loss scaler (initial_scale_power 11), on the CPU in f32.
  EXPECT_HAS(out, "loss_scale 2048");
  EXPECT_HAS(out, "done: 4 steps");
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint/gpt_1.3B_sp2_z1/step_000004")) << out;
}

TEST(ExamplesMegatron, Gpt30BScriptRunsOnTheCpuAtATinySize) {
  std::string out;
  const std::string dir = run_example("pretrain_gpt_30B_seq_parallel_32k.sh", "96", &out);
  EXPECT_HAS(out, "train: 2 layers, C=96, H=4, Hkv=4");  // head_dim 24 = 96 / 4, as 6144 / 64 = 96
  EXPECT_HAS(out, "done: 4 steps");
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint/gpt_30B_sp2_z3/step_000004")) << out;  // ZeRO 3
}

}  // namespace
}  // namespace seqpar
