// Megatron-DeepSpeed's pretrain_gpt.py flags on `seqpar train` (train/config.cpp declares them as
// aliases of the settings; docs/coming-from-megatron-deepspeed.md): what each becomes, with its
// source in --print-config, the conversions (global batch, tokens, min_lr), the refusals with
// their reasons, and fp16 in their DeepSpeed JSON taken with a note.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "test_util.h"

namespace seqpar {
namespace {

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

struct Outcome {
  int rc;
  std::string out;
};

Outcome train(const std::string& args) {
  Outcome r;
  r.rc = testing::run_command(testing::binary_path() + " train " + args, &r.out);
  return r;
}

// The --print-config line of a setting: "  name  value  source".
bool line(const std::string& out, const std::string& name, const std::string& value, const std::string& source) {
  auto esc = [](const std::string& s) { return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"); };
  return std::regex_search(out, std::regex("\n  " + esc(name) + " +" + esc(value) + " +" + esc(source) + "\n"));
}

// The 1.3B script's flags at a tiny size (docs/coming-from-megatron-deepspeed.md, examples/megatron-deepspeed/).
const std::string kScript =
    "--preset tiny --num-layers 3 --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 256 --seq-length 256 "
    "--max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 4 --ds-sequence-parallel-size 2 "
    "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --no-pipeline-parallel --lr 2e-4 --min-lr 1e-6 "
    "--lr-decay-style cosine --lr-warmup-tokens 3000 --train-tokens 100000 --lr-decay-tokens 100000 "
    "--weight-decay 0.1 --clip-grad 1.0 "
    "--adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.013 --seed 1234 --use-flash-attn-triton "
    "--checkpoint-activations --zero-stage 1 --log-interval 10 --fp16 --hysteresis 2";

TEST(MegatronFlags, EachBecomesItsSettingWithItsSource) {
  const Outcome r = train(kScript + " --print-config");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(line(r.out, "model", "preset tiny, random init", "--preset")) << r.out;
  EXPECT_TRUE(line(r.out, "num_layers", "3", "--num-layers")) << r.out;
  EXPECT_TRUE(line(r.out, "intermediate_size", "256", "--ffn-hidden-size")) << r.out;
  EXPECT_TRUE(line(r.out, "num_heads", "4", "--num-attention-heads")) << r.out;
  // Megatron's defaults for what the script leaves out: no GQA, head dim = hidden / heads.
  EXPECT_TRUE(line(r.out, "num_kv_heads", "4", "derived: num_heads (--num-attention-heads)")) << r.out;
  EXPECT_TRUE(line(r.out, "head_dim", "32", "derived: hidden_size / num_heads (--num-attention-heads)")) << r.out;
  EXPECT_TRUE(line(r.out, "max_position_embeddings", "256", "--max-position-embeddings")) << r.out;
  EXPECT_TRUE(line(r.out, "init_std", "0.013", "--init-method-std")) << r.out;
  EXPECT_TRUE(line(r.out, "attn_implementation", "flash_attention_2", "--use-flash-attn-triton")) << r.out;
  EXPECT_TRUE(line(r.out, "seq_len", "256", "--seq-length")) << r.out;
  EXPECT_TRUE(line(r.out, "micro_batch", "1", "--micro-batch-size")) << r.out;
  // grad_accum = global / (micro × dp): 4 / (1 × 1), dp = world / sp = 2 / 2.
  EXPECT_TRUE(line(r.out, "grad_accum", "4", "derived: global_batch_size / (micro_batch × dp_world)")) << r.out;
  EXPECT_TRUE(line(r.out, "sp", "2", "--ds-sequence-parallel-size")) << r.out;
  EXPECT_TRUE(line(r.out, "sp_mode", "ulysses", "seqpar default")) << r.out;
  EXPECT_TRUE(line(r.out, "activation_checkpointing", "true", "--checkpoint-activations")) << r.out;
  EXPECT_TRUE(line(r.out, "beta2", "0.95", "--adam-beta2")) << r.out;
  EXPECT_TRUE(line(r.out, "clip", "1", "--clip-grad")) << r.out;
  EXPECT_TRUE(line(r.out, "log_every", "10", "--log-interval")) << r.out;
  // Tokens -> steps by tokens per step = global batch × seq_len = 4 × 256 = 1024.
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  steps +98 +derived: ceil\(train_tokens / tokens per step\) = ceil\(100000 / 1024\))")))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(\n  warmup_steps +3 +derived: ceil\(warmup_tokens / tokens per step\) = ceil\(3000 / 1024\))")))
      << r.out;
  EXPECT_TRUE(line(r.out, "lr_schedule", "linear_cosine", "--lr-decay-style")) << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\n  min_lr_ratio +0\.005\d* +derived: min_lr / lr = 1e-06 / 0\.0002 )")))
      << r.out;
  // fp16 and its loss scaler: --fp16 is mixed_precision fp16, --hysteresis seqpar's own flag.
  EXPECT_TRUE(line(r.out, "mixed_precision", "fp16", "--fp16")) << r.out;
  EXPECT_TRUE(line(r.out, "hysteresis", "2", "--hysteresis")) << r.out;
  EXPECT_EQ(r.out.find("--fp16 (Megatron-DeepSpeed) has no effect"), std::string::npos) << r.out;
  // The data's documents: seqpar's default is Megatron's --reset-attention-mask --reset-position-ids;
  // either flag sets it (both reset together); --no-document-mask is Megatron's default.
  EXPECT_TRUE(line(r.out, "document_mask", "true", "seqpar default")) << r.out;
  for (const char* flag : {"--reset-attention-mask", "--reset-position-ids"}) {
    const Outcome d = train(kScript + " " + flag + " --print-config");
    ASSERT_EQ(d.rc, 0) << d.out;
    EXPECT_TRUE(line(d.out, "document_mask", "true", flag)) << d.out;
  }
  const Outcome stream = train(kScript + " --no-document-mask --print-config");
  ASSERT_EQ(stream.rc, 0) << stream.out;
  EXPECT_TRUE(line(stream.out, "document_mask", "false", "--no-document-mask")) << stream.out;
  // Megatron's --initial-loss-scale is the scale itself: its power of 2 is the setting.
  const Outcome s = train("--fp16 --initial-loss-scale 4096 --print-config");
  ASSERT_EQ(s.rc, 0) << s.out;
  EXPECT_TRUE(line(s.out, "initial_scale_power", "12", "--initial-loss-scale")) << s.out;
  const Outcome bad = train("--fp16 --initial-loss-scale 3000 --print-config");
  EXPECT_NE(bad.rc, 0);
  EXPECT_HAS(bad.out, "--initial-loss-scale=3000: expected a power of 2");
  // Read as every real setting is: the whole text, decimal (strtod took a leading space and hex).
  for (const char* text : {"' 4096'", "0x1000", "4096x"}) {
    const Outcome odd = train(std::string("--fp16 --initial-loss-scale=") + text + " --print-config");
    EXPECT_NE(odd.rc, 0) << text;
    EXPECT_HAS(odd.out, "expected a finite decimal number");
  }
  // The accepted flags without effect are noted, once each.
  EXPECT_HAS(r.out, "--no-pipeline-parallel (Megatron-DeepSpeed) has no effect");
  EXPECT_EQ(r.out.find("--tensor-model-parallel-size"), std::string::npos) << r.out;  // = 1: nothing to say
}

TEST(MegatronFlags, TheTinyScriptTrains) {
  const Outcome r = train(
      "--preset tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 --seq-length 128 "
      "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 2 --ds-sequence-parallel-size 2 "
      "--lr 2e-4 --min-lr 1e-6 --lr-decay-style cosine --lr-warmup-iters 2 --train-iters 4 --clip-grad 1.0 "
      "--use-flash-attn --checkpoint-activations --log-interval 1 --eval-interval 4 --eval-iters 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "world 2 = dp 1 x sp 2 (2 ulysses x 1 ring");
  EXPECT_HAS(r.out, "2 sequences x 128 tokens per step, steps 1..4 of 4");
  EXPECT_HAS(r.out, "step     4/4");
  EXPECT_HAS(r.out, "lr 1.00e-06");  // the cosine's floor at the last step
}

TEST(MegatronFlags, RefusalsNameTheFlagAndTheReason) {
  Outcome r =
      train("--sequence-parallel --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "3 problems in the configuration");
  EXPECT_HAS(r.out,
             "--sequence-parallel (Megatron-DeepSpeed) is not supported: --sequence-parallel is Megatron-LM's "
             "sequence parallel optimization");
  EXPECT_HAS(r.out, "it needs tensor parallelism");
  EXPECT_HAS(r.out, "is --ds-sequence-parallel-size N (seqpar's --sp N)");
  EXPECT_HAS(r.out,
             "--tensor-model-parallel-size=2 (Megatron-DeepSpeed) is not supported: seqpar has no tensor or "
             "pipeline parallelism");
  EXPECT_HAS(r.out, "--pipeline-model-parallel-size=4 (Megatron-DeepSpeed) is not supported");
  EXPECT_HAS(r.out, "(only 1 is accepted)");
  r = train("--preset tiny --global-batch-size 3 --micro-batch-size 2 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "global_batch_size=3 (--global-batch-size) must equal");
  EXPECT_HAS(r.out, "not a multiple of micro_batch × dp_world = 2 × 1 = 2, so grad_accum cannot be derived");
  r = train("--lr-decay-style inverse-square-root");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--lr-decay-style=inverse-square-root: seqpar has cosine (its linear_cosine), linear and constant");
  r = train("--preset tiny --lr-decay-style linear --min-lr 1e-6 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--lr-decay-style linear decays to 0 in seqpar");
  r = train("--preset tiny --lr-decay-style constant --lr-warmup-iters 5 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--lr-decay-style constant has no warmup in seqpar, but warmup_steps=5 (--lr-warmup-iters)");
  r = train(
      "--preset tiny --train-iters 5 --train-tokens 1000 --clip 1 --clip-grad 1 --min-lr 1e-5 --min-lr-ratio 0.1 "
      "--print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--clip and --clip-grad both set clip: give one of them");
  EXPECT_HAS(r.out, "train_tokens=1000 (--train-tokens) and steps=5 (--train-iters) both give the length");
  EXPECT_HAS(r.out, "min_lr=1e-05 (--min-lr) and min_lr_ratio=0.1 (--min-lr-ratio) both set the floor");
  // Megatron's decay length is accepted only as the run's: seqpar decays over the whole run.
  r = train("--preset tiny --train-iters 10 --lr-decay-iters 8 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out,
             "--lr-decay-iters=8 decays the lr over 8 steps, but the run has steps=10 (--train-iters): "
             "seqpar's schedules decay over the whole run");
  r = train(
      "--preset tiny --seq-length 128 --global-batch-size 2 --micro-batch-size 1 --train-iters 10 "
      "--lr-decay-tokens 2000 --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out,
             "--lr-decay-tokens=2000 decays the lr over 8 steps (ceil(2000 / tokens per step); tokens per "
             "step = train_batch_size × seq_len = 2 × 128 = 256), but the run has steps=10");
  EXPECT_EQ(train("--preset tiny --train-iters 10 --lr-decay-iters 10 --print-config").rc, 0);
  r = train("--preset tiny --ds-sequence-parallel-size 2 --sp-mode ring --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--ds-sequence-parallel-size is DeepSpeed-Ulysses, but sp_mode=ring (--sp-mode)");
  // A preset is an architecture with random init: not with a checkpoint; an unknown one lists the known.
  r = train("--preset tiny --model /nonexistent --print-config");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--preset=tiny is a randomly initialised architecture, --model=/nonexistent a checkpoint");
  r = train("--preset gpt-9000");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--preset=gpt-9000: not a known preset: llama-3.2-1b");
  // Megatron flags seqpar does not take stay CLI11's unknown options.
  r = train("--split 949,50,1");
  ASSERT_NE(r.rc, 0);
  EXPECT_HAS(r.out, "--split");
}

// Megatron-DeepSpeed's ds_config_gpt_TEMPLATE.json (fp16 with DeepSpeed's dynamic loss scaler)
// resolves to fp16 with its scaler's settings, each with its key as the source.
TEST(MegatronFlags, TheirDeepSpeedJsonWithFp16RunsTheLossScaler) {
  const std::string file =
      testing::source_path("tests/fixtures/configs/megatron-deepspeed/ds_config_gbs16_mbs1_log1_zero3.json");
  const Outcome r = train("--deepspeed " + file + " --ds-sequence-parallel-size 4 --print-config");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(line(r.out, "mixed_precision", "fp16", file + ": fp16.enabled")) << r.out;
  EXPECT_TRUE(line(r.out, "initial_scale_power", "11", file + ": fp16.initial_scale_power")) << r.out;
  EXPECT_TRUE(line(r.out, "loss_scale_window", "500", file + ": fp16.loss_scale_window")) << r.out;
  EXPECT_TRUE(line(r.out, "hysteresis", "2", file + ": fp16.hysteresis")) << r.out;
  EXPECT_TRUE(line(r.out, "min_loss_scale", "1", file + ": fp16.min_loss_scale")) << r.out;
  EXPECT_EQ(r.out.find("taken as bf16"), std::string::npos) << r.out;
  EXPECT_TRUE(line(r.out, "zero_stage", "3", file + ": zero_optimization.stage")) << r.out;
  // train_batch_size 16 = micro 1 × grad_accum × dp 1 (world = sp = 4): grad_accum 16.
  EXPECT_TRUE(line(r.out, "grad_accum", "16", "derived: train_batch_size / (micro_batch × dp_world)")) << r.out;
  // --global-batch-size is the same number as train_batch_size: the flag wins, with a warning.
  const Outcome g = train("--deepspeed " + file + " --ds-sequence-parallel-size 4 --global-batch-size 8 --print-config");
  ASSERT_EQ(g.rc, 0) << g.out;
  EXPECT_TRUE(line(g.out, "grad_accum", "8", "derived: global_batch_size / (micro_batch × dp_world)")) << g.out;
  EXPECT_HAS(g.out, "train_batch_size: " + file + ": train_batch_size=16 is overridden by --global-batch-size=8");
}

}  // namespace
}  // namespace seqpar
