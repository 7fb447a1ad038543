// Optimizer offload, ZeRO-3 and parameter offload (train/optimizer.h, train/layer_weights.h): the
// same parameters after several steps as stage 0 (f32 on the CPU; bit for bit where the summation
// order is the same, else within 1e-6), with clipping active, on 1..4 ranks and a dp × sp mesh;
// resume across stages; the host-memory check before training; the plan's host accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"
#include "train/zero_shard.h"

namespace seqpar {
namespace {

struct Mesh {
  const char* name;
  int sp;
  SpMode mode;
  int dp_replicate, grad_accum;
};

const Mesh kMeshes[] = {{"1 rank", 1, SpMode::kUlysses, 1, 1},
                        {"2 ranks: ulysses 2", 2, SpMode::kUlysses, 1, 1},
                        {"3 ranks: ring 3 (uneven pieces), 2 micro-batches", 3, SpMode::kRing, 1, 2},
                        {"4 ranks: ulysses 2 x dp 2", 2, SpMode::kUlysses, 2, 1},
                        {"4 ranks: dp 4", 1, SpMode::kUlysses, 4, 1}};

struct Levers {
  const char* name;
  int zero;
  OffloadDevice opt, param;
  bool exact;  // the same summation order as stage 0 (gradients summed whole, the same norm)
  bool grads = false;  // offload_gradients (the pieces in host memory, a later micro-batch added there)
};

const Levers kLevers[] = {{"optimizer offload", 0, OffloadDevice::kCpu, OffloadDevice::kNone, true},
                          {"ZeRO-1 + optimizer offload", 1, OffloadDevice::kCpu, OffloadDevice::kNone, true},
                          {"ZeRO-2 + optimizer offload", 2, OffloadDevice::kCpu, OffloadDevice::kNone, false},
                          {"ZeRO-3", 3, OffloadDevice::kNone, OffloadDevice::kNone, false},
                          {"ZeRO-3 + parameter offload", 3, OffloadDevice::kNone, OffloadDevice::kCpu, false},
                          {"ZeRO-3 + both offloads", 3, OffloadDevice::kCpu, OffloadDevice::kCpu, false},
                          {"optimizer and gradient offload", 0, OffloadDevice::kCpu, OffloadDevice::kNone, false, true},
                          {"ZeRO-2 + optimizer and gradient offload", 2, OffloadDevice::kCpu, OffloadDevice::kNone, false,
                           true},
                          {"ZeRO-3 + every offload", 3, OffloadDevice::kCpu, OffloadDevice::kCpu, false, true}};

TrainConfig tiny_run(const Mesh& m) {
  TrainConfig c = testing::tiny_recall_config();
  c.schedule.steps = 4;
  c.schedule.warmup_steps = 1;
  c.optimizer.adamw.lr = 1e-2f;
  c.optimizer.adamw.weight_decay = 0.01f;
  c.optimizer.clip = 1e-3;  // far below the gradients' norm: every step clips
  c.logging.eval_every = 0;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  c.parallel.sp = m.sp;
  c.parallel.sp_mode = m.mode;
  c.parallel.dp_replicate = m.dp_replicate;
  c.data.grad_accum = m.grad_accum;
  return c;
}

TrainConfig with_levers(TrainConfig c, const Levers& l) {
  c.memory.zero_stage = l.zero;
  c.memory.offload_optimizer = l.opt;
  c.memory.offload_param = l.param;
  c.memory.offload_gradients = l.grads;
  return c;
}

// Runs `c`, saving at its last step, and returns that checkpoint's weights (the f32 master weights
// the optimizer holds, whole).
SafetensorsData final_weights(TrainConfig c, const std::string& dir) {
  c.checkpoint.save_dir = dir;
  c.checkpoint.save_every = c.schedule.steps;
  const TrainResult r = run_training(c);
  EXPECT_FALSE(r.checkpoints.empty());
  return read_safetensors(r.checkpoints.back() + "/model.safetensors");
}

// The largest |a - b| over every tensor of `model` (same names and shapes required).
double max_abs_diff(const SafetensorsData& a, const SafetensorsData& b,
                    const LlamaConfig& model = demo_model_config()) {
  double worst = 0;
  for (const auto& [name, shape] : LlamaParams::shapes(model)) {
    const std::vector<float> x = a.at(name).to_f32_vector(), y = b.at(name).to_f32_vector();
    EXPECT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  return worst;
}

// Also with a tiled loss, whose backward the forward runs (the LM head's gradient written before the
// step's gradients are otherwise touched: zeroed first, an overlapped update finished first).
TEST(Offload, OffloadAndStage3TrainAsStage0) {
  for (int64_t loss_tile : {0, 5})
  for (const Mesh& m : kMeshes) {
    SCOPED_TRACE(m.name);
    SCOPED_TRACE("loss tile " + std::to_string(loss_tile));
    auto run_of = [&](const Mesh& mesh) {
      TrainConfig c = tiny_run(mesh);
      c.memory.loss_tile_tokens = loss_tile;
      return c;
    };
    const std::string root = testing::temp_dir();
    const SafetensorsData plain = final_weights(run_of(m), root + "/plain");
    // The run moved the weights (the comparison is not between two copies of the initial ones).
    for (const Levers& l : kLevers) {
      SCOPED_TRACE(l.name);
      const SafetensorsData got =
          final_weights(with_levers(run_of(m), l), root + "/" + std::to_string(l.zero) + offload_device_name(l.opt) +
                                                       offload_device_name(l.param) + (l.grads ? "g" : ""));
      const double diff = max_abs_diff(got, plain);
      if (l.exact) {
        EXPECT_EQ(diff, 0.0);
      } else {
        EXPECT_LE(diff, 1e-6);
      }
    }
  }
}

TEST(Offload, OverlappedStepIsTheBlockingStep) { testing::expect_overlapped_step_is_step_flat(Device::cpu()); }

// The GPT family (gpt2: the position embedding and the final norm's bias among the edges, biases and
// LayerNorm biases in every layer, no gate) trains the same under every lever as at stage 0; the
// same for a family with optional tensors in every layer only (qwen3: q/k norms, q/k/v/o biases).
void expect_every_lever_trains_as_stage0(const LlamaConfig& gpt, const char* edge) {
  for (const Mesh& m : {kMeshes[0], kMeshes[2], kMeshes[3]}) {
    SCOPED_TRACE(m.name);
    const std::string root = testing::temp_dir();
    TrainConfig base = tiny_run(m);
    base.model.arch = gpt;
    const SafetensorsData plain = final_weights(base, root + "/plain");
    EXPECT_NE(plain.find(edge), nullptr);
    for (const Levers& l : kLevers) {
      SCOPED_TRACE(l.name);
      const SafetensorsData got =
          final_weights(with_levers(base, l), root + "/" + std::to_string(l.zero) + offload_device_name(l.opt) +
                                                  offload_device_name(l.param) + (l.grads ? "g" : ""));
      const double diff = max_abs_diff(got, plain, gpt);
      if (l.exact) {
        EXPECT_EQ(diff, 0.0);
      } else {
        EXPECT_LE(diff, 1e-6);
      }
    }
  }
}

TEST(Offload, GptTrainsUnderEveryLeverAsStage0) {
  LlamaConfig gpt = demo_model_config();
  gpt.num_kv_heads = gpt.num_heads;
  make_gpt2(gpt, "gelu_new");
  expect_every_lever_trains_as_stage0(gpt, "model.embed_positions.weight");
}

TEST(Offload, Qwen3TrainsUnderEveryLeverAsStage0) {
  LlamaConfig qwen = demo_model_config();
  qwen.family = ModelFamily::kQwen3;
  qwen.qk_norm = qwen.qkv_bias = qwen.o_bias = true;
  expect_every_lever_trains_as_stage0(qwen, "model.layers.1.self_attn.k_norm.weight");
}

// The trained weights differ from the initial ones by far more than the tolerance above (so that
// test compares trained weights), and clipping changes them (so it is active).
TEST(Offload, TheComparisonSeesTrainingAndClipping) {
  const std::string root = testing::temp_dir();
  TrainConfig c = tiny_run(kMeshes[0]);
  const SafetensorsData clipped = final_weights(c, root + "/clipped");
  c.optimizer.clip = 0;
  const SafetensorsData unclipped = final_weights(c, root + "/unclipped");
  c.schedule.steps = 1;
  c.optimizer.adamw.lr = 1e-12f;
  const SafetensorsData initial = final_weights(c, root + "/initial");
  EXPECT_GT(max_abs_diff(clipped, initial), 1e-3);
  EXPECT_GT(max_abs_diff(clipped, unclipped), 1e-5);
}

// A checkpoint written under one stage resumes under another (the checkpoint holds the whole state):
// stage 0 into ZeRO-3 with both offloads and back, and optimizer offload into ZeRO-2.
TEST(Offload, ResumeAcrossStages) {
  const Levers plain{"stage 0", 0, OffloadDevice::kNone, OffloadDevice::kNone, true};
  const Levers all = kLevers[5];
  const Levers opt = kLevers[0];
  const Levers two{"ZeRO-2", 2, OffloadDevice::kNone, OffloadDevice::kNone, false};
  for (const Mesh& m : {kMeshes[0], kMeshes[3]}) {
    SCOPED_TRACE(m.name);
    const std::string root = testing::temp_dir();
    const SafetensorsData want = final_weights(tiny_run(m), root + "/want");
    for (auto [first, second] : {std::pair{plain, all}, std::pair{all, plain}, std::pair{opt, two}}) {
      SCOPED_TRACE(std::string(first.name) + " then " + second.name);
      const std::string dir = root + "/" + first.name + "-" + second.name;
      TrainConfig a = with_levers(tiny_run(m), first);
      a.checkpoint.save_dir = dir;
      a.checkpoint.save_every = 2;
      a.checkpoint.stop_at_step = 2;
      run_training(a);
      TrainConfig b = with_levers(tiny_run(m), second);
      b.checkpoint.resume = ResumeFrom::parse("latest");
      const SafetensorsData got = final_weights(b, dir);
      EXPECT_LE(max_abs_diff(got, want), 1e-6);
    }
  }
}

TEST(Offload, HostMemoryIsCheckedBeforeTraining) {
  TrainConfig c = with_levers(tiny_run(kMeshes[1]), kLevers[5]);
  c.memory.host_memory_gib = 1e-6;  // 1 KiB
  try {
    run_training(c);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    for (const char* frag : {"host memory: the run needs", "2 rank(s) of this process", "AdamW moments",
                             "layer weights", "host_memory_gib=1e-06", "--host-memory-gib"})
      EXPECT_NE(what.find(frag), std::string::npos) << frag << " in: " << what;
  }
  // Enough for it: trains.
  c.memory.host_memory_gib = 1;
  EXPECT_EQ(run_training(c).losses.size(), 4u);
}

TEST(Offload, SettingRules) {
  TrainConfig c = tiny_run(kMeshes[0]);
  c.memory.offload_param = OffloadDevice::kCpu;
  c.memory.zero_stage = 2;
  try {
    run_training(c);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("offload_param=cpu needs zero_stage=3 (--zero-stage 3)"), std::string::npos)
        << e.what();
  }
}

// The layouts: every element of the buffer in exactly one rank's piece; ZeRO-3's per layer.
TEST(Offload, ShardLayoutsCoverTheBufferOnce) {
  const LlamaConfig mc = demo_model_config();
  const int64_t total = LlamaParams::flat_layout(mc).total;
  for (int world = 1; world <= 5; ++world) {
    for (bool per_layer : {false, true}) {
      std::vector<int> owners(static_cast<size_t>(total), 0);
      for (int r = 0; r < world; ++r) {
        const ShardLayout s =
            per_layer ? ShardLayout::per_layer(mc, r, world) : ShardLayout::contiguous(total, r, world);
        EXPECT_EQ(s.total, total);
        int64_t held = 0;
        for (size_t k = 0; k < s.regions.size(); ++k) {
          const auto [lo, hi] = s.piece(k);
          EXPECT_LE(hi - lo, s.regions[k].cap);
          EXPECT_EQ(s.regions[k].cap % LlamaParams::kFlatAlign, 0);
          for (int64_t i = lo; i < hi; ++i) ++owners[static_cast<size_t>(i)];
          held += hi - lo;
        }
        EXPECT_LE(held, s.shard_len);
      }
      for (int64_t i = 0; i < total; ++i) ASSERT_EQ(owners[static_cast<size_t>(i)], 1) << "element " << i;
    }
  }
  // One rank: the shard buffer is laid out as the whole buffer (the checkpoint views it).
  const ShardLayout one = ShardLayout::per_layer(mc, 0, 1);
  EXPECT_EQ(one.shard_len, total);
  for (size_t k = 0; k < one.regions.size(); ++k) EXPECT_EQ(one.regions[k].shard_begin, one.regions[k].flat_begin);
}

// The plan's host memory, by hand for the demo model (V 128, C 64, F 128, 2 layers, 4 heads of 16,
// 2 KV heads, untied): a layer is 4096 + 2048 + 2048 + 4096 + 3 × 8192 + 2 × 64 = 36992 elements,
// the buffer 8192 + 2 × 36992 + 64 + 8192 = 90432.
TEST(Offload, PlanCountsHostMemory) {
  MemoryPlanInput in;
  in.model = demo_model_config();
  in.seq_len = 256;
  in.cuda = true;
  ASSERT_EQ(LlamaParams::flat_layout(in.model).layer_elems, 36992);
  ASSERT_EQ(LlamaParams::flat_layout(in.model).total, 90432);
  const MemoryPlan none = plan_memory(in);
  EXPECT_EQ(none.host_bytes, 0);

  in.memory.offload_optimizer = OffloadDevice::kCpu;
  MemoryPlan p = plan_memory(in);
  // m, v, master: 12 B × 90432; staging: 2 × (4 + 2) B × one layer (36992).
  EXPECT_EQ(p.host_bytes, 12 * 90432 + 12 * 36992);
  EXPECT_EQ(p.host_pinned_bytes, 12 * 36992);
  // On the GPU: no moments, no master weights.
  for (const auto& [name, bytes] : p.resident) EXPECT_EQ(name.find("AdamW"), std::string::npos) << name;
  // (every tensor of this model is a multiple of 64 elements: the per-tensor state is 90432 too)
  EXPECT_EQ(none.resident_bytes - p.resident_bytes, 12 * 90432);
  // The gradients too: pinned on the host (4 B × 90432); the GPU keeps a layer's block and the edges'.
  {
    MemoryPlanInput g = in;
    g.memory.offload_gradients = true;
    const MemoryPlan q = plan_memory(g);
    EXPECT_EQ(q.host_bytes - p.host_bytes, 4 * 90432);
    EXPECT_EQ(q.host_pinned_bytes - p.host_pinned_bytes, 4 * 90432);
    EXPECT_EQ(p.resident_bytes - q.resident_bytes, 4 * 90432 - 4 * (36992 + 2 * 8192 + 64));
  }

  // ZeRO-3 over 2 ranks with both offloads: pieces of 4096 (embedding), 18496 (each layer) and 4160
  // (final norm 64 + LM head 8192 = 8256, halved and padded), a shard of 45248.
  in.world = 2;
  in.memory.zero_stage = 3;
  in.memory.offload_param = OffloadDevice::kCpu;
  p = plan_memory(in);
  const int64_t shard = 4096 + 2 * 18496 + 4160;
  EXPECT_EQ(p.host_bytes, 12 * shard + 12 * 36992 + 2 * shard);
  EXPECT_EQ(p.host_pinned_bytes, 12 * 36992 + 2 * shard);
  in.memory.offload_param_pin_memory = false;
  EXPECT_EQ(plan_memory(in).host_pinned_bytes, 12 * 36992);
  // The GPU keeps the edges (2 × (2 × 8192 + 64) B), two gathered layers (2 × 2 × 36992 B) and the
  // partitioned gradients (4 × (shard + a layer + edges)).
  int64_t weights = 0, grads = 0;
  for (const auto& [name, bytes] : p.resident) {
    if (name.rfind("weights", 0) == 0) weights += bytes;
    if (name.rfind("gradients", 0) == 0) grads += bytes;
  }
  EXPECT_EQ(weights, 2 * (2 * 8192 + 64) + 2 * 2 * 36992);
  EXPECT_EQ(grads, 4 * (shard + 36992 + 2 * 8192 + 64));

  // Checkpoint offload counts too (pinned on CUDA): 2 layers × 256 tokens × 64 × 2 B.
  in.memory.activation_checkpointing = true;
  in.memory.checkpoint_offload = true;
  const MemoryPlan q = plan_memory(in);
  EXPECT_EQ(q.host_bytes - plan_memory([&] {
                             MemoryPlanInput t = in;
                             t.memory.checkpoint_offload = false;
                             return t;
                           }())
                               .host_bytes,
            2 * 256 * 64 * 2);
}

// The host allocations of a run (on the CPU backend accounted apart from the "device") are the plan's
// host bytes: the AdamW state, the staging, the host weights.
TEST(Offload, PlanHostBytesAreTheAllocations) {
  for (const Mesh& m : {kMeshes[0], kMeshes[1]}) {
    SCOPED_TRACE(m.name);
   for (const Levers& l : {kLevers[5], kLevers[6], kLevers[8]}) {
    SCOPED_TRACE(l.name);
    TrainConfig c = with_levers(tiny_run(m), l);
    c.schedule.steps = 2;
    offload_host_allocator().reset_peak();
    const size_t before = offload_host_allocator().current_bytes();
    run_training(c);
    MemoryPlanInput in;
    in.model = c.model.arch;
    in.seq_len = c.data.task.seq_len;
    in.micro_batch = c.data.micro_batch;
    in.sp = c.parallel.sp;
    in.ulysses_degree = c.parallel.sp;
    in.world = c.parallel.sp * c.parallel.dp_replicate;
    in.cuda = false;
    in.memory = c.memory;
    const MemoryPlan p = plan_memory(in);
    EXPECT_EQ(static_cast<int64_t>(offload_host_allocator().peak_bytes() - before), p.host_bytes * in.world);
   }
  }
}

// --longest respects the host limit, and choose_levers reaches further with the offloads.
TEST(Offload, LongestRespectsBothLimitsAndChoosesLevers) {
  MemoryPlanInput in;
  in.model = llama_preset("llama-3.1-8b");
  in.cuda = true;
  in.memory.activation_checkpointing = true;
  in.memory.loss_tile_tokens = 8192;
  in.memory.mlp_tile_tokens = 8192;
  const int64_t gpu = static_cast<int64_t>(139.8 * (1ll << 30)), host = 128ll << 30;
  // Stage 0 barely fits on one GPU (18 B per parameter: 144 GB of state).
  EXPECT_LT(longest_fitting_seq_len(in, gpu, 1024, host), 16384);
  const LeverChoice c = choose_levers(in, gpu, 1024, host);
  EXPECT_GT(c.seq_len, 200000);
  EXPECT_NE(c.levers.find("--offload-optimizer cpu"), std::string::npos) << c.levers;
  MemoryPlanInput t = in;
  t.memory = c.memory;
  t.seq_len = c.seq_len;
  const MemoryPlan p = plan_memory(t);
  EXPECT_LE(p.peak_bytes, gpu);
  EXPECT_LE(p.host_bytes + p.host_setup_bytes, host);  // the initial weights' copy while ranks start
  // bf16 for a GPU run (what the ranks compute in), f32 for a CPU one.
  EXPECT_EQ(p.host_setup_bytes, (in.cuda ? 2 : 4) * LlamaParams::flat_layout(in.model).total);
  // With checkpoint offload forced on, the host limit binds: the layer inputs (256 KiB per token at
  // 8B) cannot exceed the host memory left.
  t.memory.checkpoint_offload = true;
  const int64_t with_offload = longest_fitting_seq_len(t, gpu, 1024, host);
  t.seq_len = with_offload;
  const MemoryPlan at = plan_memory(t);
  EXPECT_LE(at.host_bytes + at.host_setup_bytes, host);
  t.seq_len = with_offload + 1024;
  const MemoryPlan over = plan_memory(t);
  EXPECT_TRUE(over.host_bytes + over.host_setup_bytes + over.host_process_bytes > host || over.peak_bytes > gpu);
}

// A run too large as given: levers_to_fit names the cheapest levers that fit it at its own length, and
// the plan with them fits both limits; a run that fits needs nothing; one nothing fits gets no levers.
TEST(Offload, LeversToFitAreTheCheapestThatFitTheRunsLength) {
  MemoryPlanInput in;
  in.model = llama_preset("llama-3.2-3b");
  in.cuda = true;
  in.seq_len = 65536;
  in.memory.activation_checkpointing = in.memory.checkpoint_keep_attention = true;
  in.memory.loss_tile_tokens = 8192;
  const int64_t h100 = static_cast<int64_t>(79.2 * (1ll << 30)), host = 256ll << 30;
  ASSERT_GT(plan_memory(in).peak_bytes, h100);  // keeping attention: 83.6 GiB
  const LeverChoice c = levers_to_fit(in, h100, host);
  ASSERT_FALSE(c.levers.empty());
  EXPECT_EQ(c.seq_len, in.seq_len);
  MemoryPlanInput t = in;
  t.memory = c.memory;
  const MemoryPlan p = plan_memory(t);
  EXPECT_LE(p.peak_bytes, h100) << c.levers;
  EXPECT_LE(p.host_start_bytes(), host) << c.levers;
  // The cheapest: no set earlier in choose_levers' order fits (checkpoint offload comes before the
  // optimizer's), and the description names the levers and the peak.
  MemoryPlanInput ckpt = in;
  ckpt.memory.checkpoint_offload = true;
  if (plan_memory(ckpt).peak_bytes <= h100) {
    EXPECT_EQ(c.levers, "--checkpoint-offload");
  } else {
    EXPECT_NE(c.levers.find("--offload-optimizer cpu"), std::string::npos) << c.levers;
  }
  EXPECT_NE(describe_levers_to_fit(in, c).find("it fits with " + c.levers + " (peak "), std::string::npos);
  // checkpoint_placement=auto: the placement chosen with the levers, said.
  MemoryPlanInput autop = in;
  autop.memory.checkpoint_placement = "auto";
  const LeverChoice a = levers_to_fit(autop, h100, host);
  ASSERT_FALSE(a.levers.empty());
  EXPECT_NE(a.memory.checkpoint_placement, "auto");
  EXPECT_NE(describe_levers_to_fit(autop, a).find("checkpoint placement " + a.memory.checkpoint_placement),
            std::string::npos);
  // Without checkpointing, checkpointing is what is added first.
  MemoryPlanInput none = in;
  none.memory.activation_checkpointing = none.memory.checkpoint_keep_attention = false;
  const LeverChoice n = levers_to_fit(none, h100, host);
  EXPECT_EQ(n.levers.rfind("--activation-checkpointing", 0), 0u) << n.levers;
  // Fits as given.
  in.seq_len = 8192;
  EXPECT_EQ(levers_to_fit(in, h100, host).levers, "nothing added");
  // Nothing fits 8B at 4M tokens on one GPU with 64 GiB of host memory.
  MemoryPlanInput big;
  big.model = llama_preset("llama-3.1-8b");
  big.cuda = true;
  big.seq_len = 4 << 20;
  big.memory.activation_checkpointing = true;
  const LeverChoice b = levers_to_fit(big, h100, 64ll << 30);
  EXPECT_TRUE(b.levers.empty());
  EXPECT_EQ(b.seq_len, 0);
  EXPECT_NE(describe_levers_to_fit(big, b).find("more GPUs (--sp)"), std::string::npos);
  // 8B at 32K fits the GPU only with the optimizer in host memory (~90 GiB of it): on a host with 16 GiB the message
  // says that lever would fit the GPU and what host memory it needs, not only "more GPUs".
  big.seq_len = 32768;
  const LeverChoice h = levers_to_fit(big, h100, 16ll << 30);
  EXPECT_TRUE(h.levers.empty());
  EXPECT_NE(h.host_short.find("--offload-optimizer cpu"), std::string::npos) << h.host_short;
  const std::string why = describe_levers_to_fit(big, h);
  EXPECT_NE(why.find("would fit the GPU"), std::string::npos) << why;
  EXPECT_NE(why.find("of host memory per rank, more than the 16.00 GiB"), std::string::npos) << why;
  EXPECT_TRUE(levers_to_fit(big, h100, 256ll << 30).host_short.empty());
}

}  // namespace
}  // namespace seqpar
