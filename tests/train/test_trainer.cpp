// The training loop: SP degree and data parallelism change how a step is computed, not what it
// computes; the metrics file; the learning-rate schedule; configuration errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "parallel/sp_attention.h"
#include "train/trainer.h"
#include "train/train_test_util.h"

namespace seqpar {
namespace {

constexpr double kTol = 1e-5;

// The tiny demo model on a short recall task: a few steps take milliseconds.
TrainConfig tiny_run() {
  TrainConfig c = testing::tiny_recall_config();
  c.data.grad_accum = 1;
  c.schedule.steps = 4;
  c.schedule.warmup_steps = 2;
  c.optimizer.adamw.lr = 1e-3f;
  c.optimizer.clip = 1.0;
  c.parallel.sp = 1;
  c.logging.eval_every = 0;  // evaluate only at the end
  c.data.eval_batches = 1;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  return c;
}

void expect_same_losses(const TrainResult& got, const TrainResult& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_LE(std::fabs(got.losses[s] - want.losses[s]), kTol * std::fabs(want.losses[s]))
        << what << ": step " << s + 1 << " loss " << got.losses[s] << " vs " << want.losses[s];
}

// `c` is refused, before it trains, with an InputError containing `fragment`.
void expect_input_error(const TrainConfig& c, const std::string& fragment) {
  try {
    c.validate();
    run_training(c);
    ADD_FAILURE() << "no InputError; expected one containing: " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// The demo model has H = 4, Hkv = 2: Ulysses 4 replicates KV heads; hybrid 2 x 2 mixes both.
TEST(Trainer, SpDegreesReproduceDegreeOne) {
  const TrainResult ref = run_training(tiny_run());
  ASSERT_EQ(ref.losses.size(), 4u);
  ASSERT_EQ(ref.steps_run, 4);
  for (double l : ref.losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
  EXPECT_NE(ref.losses.front(), ref.losses.back()) << "the weights should move";
  struct Setting {
    SpMode mode;
    int sp, u;
    SpLayout layout;
  };
  for (const Setting& s : {Setting{SpMode::kUlysses, 2, 0, SpLayout::kZigzag},
                           Setting{SpMode::kUlysses, 4, 0, SpLayout::kZigzag},
                           Setting{SpMode::kRing, 2, 0, SpLayout::kZigzag},
                           Setting{SpMode::kRing, 4, 0, SpLayout::kZigzag},
                           Setting{SpMode::kRing, 4, 0, SpLayout::kContiguous},
                           Setting{SpMode::kHybrid, 4, 2, SpLayout::kZigzag}}) {
    TrainConfig c = tiny_run();
    c.parallel.sp = s.sp;
    c.parallel.sp_mode = s.mode;
    c.parallel.ulysses_degree = s.u;
    c.parallel.layout = s.layout;
    const TrainResult r = run_training(c);
    expect_same_losses(r, ref,
                       sp_mode_name(s.mode) + " sp=" + std::to_string(s.sp) + " " + std::string(sp_layout_name(s.layout)));
    // Evaluation gathers the logits of every SP rank: the accuracy is the same too.
    ASSERT_EQ(r.eval_accuracy.size(), ref.eval_accuracy.size());
    EXPECT_EQ(r.eval_accuracy.back(), ref.eval_accuracy.back());
  }
}

// Data parallelism. At step s, micro-batch m, dp rank d reads batch index ((s-1) * grad_accum + m)
// * dp + d (trainer.cpp), and make_recall_batch seeds each row from (batch index, row). So
// dp = 2 with grad_accum = 1 reads, per step, exactly the batches dp = 1 with grad_accum = 2
// reads (indices 2(s-1) and 2(s-1)+1, same micro_batch), and the loss is the token-weighted mean
// over both either way: the runs are the same computation summed in another order. (dp = 2 with
// micro_batch 1 against dp = 1 with micro_batch 2 would NOT see the same rows: the row seed
// depends on the batch index, which differs.)
// --activation-checkpointing trains exactly as without (the CPU recompute is bit-identical).
TEST(Trainer, ActivationCheckpointingTrainsIdentically) {
  TrainConfig c = tiny_run();
  c.parallel.sp = 2;
  const TrainResult keep = run_training(c);
  for (bool offload : {false, true}) {
    for (bool keep_attention : {false, true}) {
      c.memory.activation_checkpointing = true;
      c.memory.checkpoint_keep_attention = keep_attention;
      c.memory.checkpoint_offload = offload;  // the kept inputs through host memory and back
      const TrainResult ckpt = run_training(c);
      ASSERT_EQ(ckpt.losses.size(), keep.losses.size());
      for (size_t s = 0; s < keep.losses.size(); ++s)
        EXPECT_EQ(ckpt.losses[s], keep.losses[s])
            << "step " << s + 1 << (keep_attention ? " keeping attention" : "") << (offload ? " offloaded" : "");
      EXPECT_EQ(ckpt.eval_accuracy, keep.eval_accuracy);
    }
  }
  // Per-layer placements of the inputs (g GPU, h host, r recomputed), also with ZeRO-3's per-layer
  // weights and parameter offload (the recompute fetches the layers below out of order), and auto.
  c.memory.checkpoint_offload = false;
  c.memory.checkpoint_keep_attention = false;
  const int64_t L = c.model.arch.num_layers;
  for (const std::string& placement : {"r" + std::string(L - 1, 'g'), std::string(L - 1, 'r') + "h",
                                       "h" + std::string(L - 1, 'r'), "f" + std::string(L - 1, 'r'),
                                       std::string(L - 1, 'g') + "f", std::string("auto")}) {
    for (int zero : {0, 3}) {
      TrainConfig p = c;
      p.memory.checkpoint_placement = placement;
      p.memory.zero_stage = zero;
      p.memory.offload_param = zero == 3 ? OffloadDevice::kCpu : OffloadDevice::kNone;
      const TrainResult placed = run_training(p);
      ASSERT_EQ(placed.losses.size(), keep.losses.size());
      for (size_t s = 0; s < keep.losses.size(); ++s)
        EXPECT_EQ(placed.losses[s], keep.losses[s]) << "step " << s + 1 << " placement " << placement << " zero " << zero;
    }
  }
  // Layers not checkpointed ('f') beside ones keeping their attention.
  for (const std::string& placement : {std::string(L - 1, 'g') + "f", "f" + std::string(L - 1, 'h')}) {
    TrainConfig p = c;
    p.memory.checkpoint_keep_attention = true;
    p.memory.checkpoint_placement = placement;
    const TrainResult placed = run_training(p);
    ASSERT_EQ(placed.losses.size(), keep.losses.size());
    for (size_t s = 0; s < keep.losses.size(); ++s)
      EXPECT_EQ(placed.losses[s], keep.losses[s]) << "step " << s + 1 << " keeping attention, placement " << placement;
  }
  c.memory.checkpoint_placement = "auto";
  c.memory.checkpoint_offload = true;
  expect_input_error(c, "both say where the layers' inputs wait");
  c.memory.checkpoint_offload = false;
  c.memory.checkpoint_placement = "2g1x";
  expect_input_error(c, "'x' is not a placement");
  c.memory.checkpoint_placement = "";
  c.memory.checkpoint_keep_attention = true;
  c.memory.activation_checkpointing = false;  // keeping attention says what a checkpointed layer keeps
  expect_input_error(c, "checkpoint_keep_attention=true needs activation_checkpointing=true");
  c.memory.checkpoint_keep_attention = false;
  c.memory.checkpoint_offload = true;
  expect_input_error(c, "checkpoint_offload=true needs activation_checkpointing=true");
}

// Checkpoint offload: the kept layer inputs leave the (CPU) device between forward and backward —
// its step peak drops by about all but two layers' inputs — and come back bit for bit.
TEST(Trainer, CheckpointOffloadLowersTheDevicePeak) {
  TrainConfig c = tiny_run();
  c.model.arch.num_layers = 6;
  c.data.task.seq_len = 64;
  c.data.micro_batch = 4;
  c.memory.activation_checkpointing = true;
  c.schedule.steps = 2;
  const TrainResult ckpt = run_training(c);
  c.memory.checkpoint_offload = true;
  const TrainResult off = run_training(c);
  ASSERT_EQ(off.losses, ckpt.losses);
  const int64_t T = c.data.task.seq_len * c.data.micro_batch, C = c.model.arch.hidden_size;
  const int64_t input_bytes = T * C * 4;  // one layer's input, f32 on the CPU
  const int64_t saved = ckpt.step_peak_bytes.back() - off.step_peak_bytes.back();
  std::printf("step peak %lld -> %lld bytes (one layer input %lld)\n", static_cast<long long>(ckpt.step_peak_bytes.back()),
              static_cast<long long>(off.step_peak_bytes.back()), static_cast<long long>(input_bytes));
  EXPECT_GE(saved, (c.model.arch.num_layers - 3) * input_bytes);
  EXPECT_LE(saved, c.model.arch.num_layers * input_bytes);
}

// The memory levers together (checkpointing, tiled MLP, tiled loss) train as without them, up to
// f32 summation order.
TEST(Trainer, MemoryLeversTrainAlike) {
  TrainConfig c = tiny_run();
  c.parallel.sp = 2;
  c.parallel.sp_mode = SpMode::kRing;
  const TrainResult plain = run_training(c);
  c.memory.activation_checkpointing = true;
  c.memory.mlp_tile_tokens = 5;
  c.memory.loss_tile_tokens = 7;
  expect_same_losses(run_training(c), plain, "checkpointing + tiled MLP + tiled loss");
  c.memory.loss_tile_tokens = -1;
  EXPECT_THROW(run_training(c), InputError);
}

TEST(Trainer, DataParallelEqualsGradientAccumulationOnTheSameBatches) {
  TrainConfig accum = tiny_run();
  accum.data.grad_accum = 2;
  const TrainResult ref = run_training(accum);
  for (auto [rep, shard, sp] : {std::tuple{2, 1, 1}, std::tuple{1, 2, 1}, std::tuple{2, 1, 2}}) {
    TrainConfig c = tiny_run();
    c.parallel.dp_replicate = rep;
    c.parallel.dp_shard = shard;
    c.parallel.sp = sp;
    c.parallel.sp_mode = SpMode::kRing;
    const TrainResult r = run_training(c);
    expect_same_losses(r, ref,
                       "dp_replicate=" + std::to_string(rep) + " dp_shard=" + std::to_string(shard) +
                           " sp=" + std::to_string(sp) + " vs grad_accum=2");
  }
}

// --profile: the leading rank's steps after the first, op by op; the losses are the run's own.
TEST(Trainer, ProfileTimesTheOpsOfTheStepsAfterTheFirst) {
  const TrainResult plain = run_training(tiny_run());
  EXPECT_TRUE(plain.profile.empty());
  EXPECT_EQ(plain.profile_steps, 0);
  TrainConfig c = tiny_run();
  c.logging.profile = true;
  c.parallel.sp = 2;  // two ranks: only the leader's ops are counted
  c.data.micro_batch = 3;  // three sequences, packed into one stream
  const TrainResult r = run_training(c);
  TrainConfig c2 = tiny_run();
  c2.parallel.sp = 2;
  c2.data.micro_batch = 3;
  expect_same_losses(r, run_training(c2), "profiled");
  ASSERT_EQ(r.profile_steps, c.schedule.steps - 1);
  EXPECT_GT(r.profile_seconds, 0);
  ASSERT_FALSE(profiling()) << "the trainer leaves profiling off";
  const int64_t layers = c.model.arch.num_layers, steps = r.profile_steps;
  std::map<std::string, int64_t> calls;
  double sum = 0;
  for (const ProfileEntry& e : r.profile) {
    EXPECT_GT(e.calls, 0) << e.name;
    EXPECT_GE(e.ms, 0) << e.name;
    calls[e.name.substr(0, e.name.find(' '))] += e.calls;
    sum += e.ms;
  }
  for (size_t i = 1; i < r.profile.size(); ++i) EXPECT_GE(r.profile[i - 1].ms, r.profile[i].ms) << "most time first";
  // The micro-batch is one packed token stream: per layer and step, one attention forward and
  // backward per Ulysses head group (H / sp query heads per rank, cut into at most
  // c.kernels.ulysses_head_groups groups).
  const int64_t groups =
      std::min<int64_t>(c.kernels.ulysses_head_groups, c.model.arch.num_heads / static_cast<int64_t>(c.parallel.sp));
  EXPECT_EQ(calls["attn_forward"], layers * groups * steps);
  EXPECT_EQ(calls["attn_backward"], layers * groups * steps);
  EXPECT_EQ(calls["rmsnorm_forward"], (2 * layers + 1) * steps);
  EXPECT_GT(calls["matmul"], 0);
  EXPECT_GT(calls["adamw_step"], 0);
  // Communication: the gradients' all-reduce, Ulysses' all-to-alls (sends and receives, waited on).
  EXPECT_GT(calls["comm.all_reduce"], 0);
  EXPECT_GT(calls["comm.send_recv"], 0);
  EXPECT_LE(sum, r.profile_seconds * 1e3 * 1.01) << "ops of one thread cannot take longer than its steps";
  const std::string table = format_profile(r.profile, r.profile_seconds * 1e3);
  EXPECT_NE(table.find("attn_forward Tq="), std::string::npos) << table;
  EXPECT_NE(table.find("outside the ops"), std::string::npos) << table;
  // A host wait is host time (the device may be running ops meanwhile): listed, not in the ops' sum.
  const std::vector<ProfileEntry> mixed = {{"host wait: device error flags", 1, 5.0}, {"matmul 8x8x8 nn", 2, 3.0}};
  EXPECT_EQ(ops_ms(mixed), 3.0);
  const std::string t2 = format_profile(mixed, 10.0);
  EXPECT_NE(t2.find("host wait: device error flags"), std::string::npos) << t2;
  EXPECT_NE(t2.find("       3.00   30.0%"), std::string::npos) << "ops 3 of 10 ms: " << t2;
  EXPECT_NE(t2.find("       7.00   70.0%"), std::string::npos) << "outside the ops 7 of 10 ms: " << t2;
}

TEST(Trainer, MetricsJsonl) {
  TrainConfig c = tiny_run();
  c.parallel.sp = 2;
  c.logging.metrics_out = testing::temp_dir() + "/metrics.jsonl";
  const TrainResult r = run_training(c);
  std::ifstream in(c.logging.metrics_out);
  ASSERT_TRUE(in.good()) << c.logging.metrics_out;
  std::vector<nlohmann::json> train, eval;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    (j.contains("eval_accuracy") ? eval : train).push_back(j);
  }
  // log_every = 1: one record per step, then the final evaluation.
  ASSERT_EQ(train.size(), 4u);
  for (size_t s = 0; s < train.size(); ++s) {
    const nlohmann::json& j = train[s];
    for (const char* key : {"step", "loss", "tokens_per_s", "lr", "grad_norm", "peak_mem_gib"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
    EXPECT_EQ(j.size(), 6u) << j.dump();
    EXPECT_EQ(j["step"].get<int64_t>(), static_cast<int64_t>(s + 1));
    EXPECT_DOUBLE_EQ(j["loss"].get<double>(), r.losses[s]);
    EXPECT_FLOAT_EQ(j["lr"].get<float>(), lr_at(c, static_cast<int64_t>(s + 1)));
    EXPECT_GT(j["grad_norm"].get<double>(), 0);
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j["peak_mem_gib"].get<double>(), 0);
  }
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0]["step"].get<int64_t>(), 4);
  EXPECT_EQ(eval[0].size(), 2u) << eval[0].dump();
  const double acc = eval[0]["eval_accuracy"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  ASSERT_EQ(r.eval_accuracy.size(), 1u);
  EXPECT_DOUBLE_EQ(r.eval_accuracy[0].second, acc);
}

TEST(Trainer, LearningRateWarmupThenCosine) {
  TrainConfig c;
  c.optimizer.adamw.lr = 1e-3f;
  c.schedule.warmup_steps = 10;
  c.schedule.steps = 110;
  c.schedule.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(lr_at(c, 1), 1e-4f);  // linear from 0: step / warmup
  EXPECT_FLOAT_EQ(lr_at(c, 5), 5e-4f);
  EXPECT_FLOAT_EQ(lr_at(c, 10), 1e-3f);  // peak at the end of warmup
  // Cosine from the peak to lr * min_lr_ratio over the remaining 100 steps.
  EXPECT_FLOAT_EQ(lr_at(c, 35), 1e-3f * (0.1f + 0.9f * 0.5f * (1.f + std::cos(static_cast<float>(M_PI) * 0.25f))));
  EXPECT_FLOAT_EQ(lr_at(c, 60), 1e-3f * (0.1f + 0.9f * 0.5f));  // halfway
  EXPECT_FLOAT_EQ(lr_at(c, 110), 1e-4f);                       // the floor at the last step
  EXPECT_FLOAT_EQ(lr_at(c, 200), 1e-4f);                       // and after it
  for (int64_t s = 11; s < 110; ++s) EXPECT_LE(lr_at(c, s + 1), lr_at(c, s)) << s;
  c.schedule.warmup_steps = 0;  // no warmup: the cosine starts at the peak
  EXPECT_NEAR(lr_at(c, 1), 1e-3f, 1e-6);
}

TEST(Trainer, ConfigErrorsNameTheSetting) {
  TrainConfig c = tiny_run();
  c.data.micro_batch = 0;
  expect_input_error(c, "micro_batch=0 must be >= 1");
  c = tiny_run();
  c.data.grad_accum = 0;
  expect_input_error(c, "grad_accum=0 must be >= 1");
  c = tiny_run();
  c.schedule.steps = 0;
  expect_input_error(c, "steps=0 must be >= 1");
  c = tiny_run();
  c.parallel.sp = 0;
  expect_input_error(c, "sp=0 must be >= 1");
  c = tiny_run();
  c.parallel.dp_replicate = 0;
  expect_input_error(c, "dp_replicate=0");
  c = tiny_run();
  c.optimizer.adamw.lr = 0;
  expect_input_error(c, "lr=0 must be > 0");
  c = tiny_run();
  c.parallel.sp = 4;
  c.parallel.sp_mode = SpMode::kHybrid;  // no ulysses_degree
  expect_input_error(c, "ulysses_degree");
  c.parallel.ulysses_degree = 3;
  expect_input_error(c, "ulysses_degree=3 must divide sp_size=4");
  // A sequence too short for its shards: zigzag over 8 ranks needs 16 tokens.
  c = tiny_run();
  c.data.task.num_pairs = 1;
  c.data.task.num_queries = 1;
  c.data.task.seq_len = 8;
  c.parallel.sp = 8;
  c.parallel.sp_mode = SpMode::kRing;
  expect_input_error(c, "seq_len=8 is too short for sp=8 with the zigzag layout");
  // Found when the model is known, before any rank starts: Ulysses 8 > the demo's 4 heads.
  c = tiny_run();
  c.parallel.sp = 8;
  c.parallel.sp_mode = SpMode::kUlysses;
  expect_input_error(c, "ulysses degree 8 exceeds num_attention_heads=4");
  c = tiny_run();
  c.data.task.seq_len = 10;  // 4 pairs and 4 queries need 17
  expect_input_error(c, "recall task: seq_len=10 is too short");
}

}  // namespace
}  // namespace seqpar
