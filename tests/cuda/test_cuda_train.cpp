// `seqpar train --device cuda`: the training loop on the GPU (bf16 compute, or fp16 with the loss
// scaler; f32 gradients and master weights), against the same run on the CPU (f32), and with SP
// ranks on one GPU against one rank. The built-in model with head_dim 64 (what the CUDA attention kernels take).
// Tolerance: bf16 compute, 2e-2 relative on the loss (see test_cuda_model.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/profile.h"
#include "cuda_test_util.h"
#include "test_util.h"
#include "train/train_test_util.h"

namespace seqpar {
namespace {

struct TrainRun {
  std::map<int64_t, double> loss;
  double accuracy = -1;
};

// `prefix` runs it under a launcher (e.g. "seqpar launch ... -- ").
TrainRun train(const std::string& args, const std::string& prefix = "", std::string* output = nullptr) {
  const std::string metrics = testing::temp_dir() + "/m.jsonl";
  std::string out;
  const int rc = testing::run_command(prefix + testing::binary_path() + " train --head-dim 64 --metrics-out " + metrics + " " +
                                          (args.find("--log-every") == std::string::npos ? "--log-every 1 " : "") + args,
                                      &out);
  EXPECT_EQ(rc, 0) << out;
  if (output) *output = out;
  TrainRun r;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) r.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j.contains("eval_accuracy")) r.accuracy = j["eval_accuracy"].get<double>();
  }
  return r;
}

void expect_same_curve(const TrainRun& a, const TrainRun& b, double tol, const std::string& what) {
  ASSERT_FALSE(b.loss.empty()) << what;
  for (auto [step, loss] : b.loss) {
    ASSERT_TRUE(a.loss.count(step)) << what << " step " << step;
    EXPECT_NEAR(a.loss.at(step), loss, tol * std::abs(loss)) << what << " step " << step;
  }
}

TEST(CudaTrain, FirstStepsMatchTheCpu) {
  const std::string common = "--steps 8 --eval-every 0 --sp 1";
  TrainRun cpu = train(common + " --device cpu");
  TrainRun gpu = train(common + " --device cuda --attn-implementation flash_attention_2");
  expect_same_curve(gpu, cpu, 2e-2, "cuda (flash_attention_2) vs cpu");
  TrainRun cudnn = train(common + " --device cuda --attn-implementation sdpa");
  expect_same_curve(cudnn, cpu, 2e-2, "cuda (sdpa: cuDNN) vs cpu");
  std::string out;
  EXPECT_NE(testing::run_command(testing::binary_path() + " train --device cuda --attn-implementation eager", &out), 0);
  EXPECT_NE(out.find("eager"), std::string::npos) << out;
}

TEST(CudaTrain, SequenceParallelRanksOnOneGpuMatchOneRank) {
  const std::string common = "--steps 8 --eval-every 0 --device cuda";
  TrainRun one = train(common + " --sp 1");
  for (const char* mode : {"--sp 2 --sp-mode ulysses", "--sp 4 --sp-mode ring", "--sp 4 --sp-mode hybrid --ulysses-degree 2"})
    expect_same_curve(train(common + " " + mode), one, 2e-2, mode);
  // cuDNN's attention (sdpa) with one query head per rank (Ulysses 4 of H = 4, the KV heads
  // replicated): the demo's setting, where sdpa learned less well than flash (docs/training.md).
  const TrainRun one_cudnn = train(common + " --sp 1 --attn-implementation sdpa");
  expect_same_curve(one_cudnn, one, 2e-2, "sdpa vs flash, one rank");
  expect_same_curve(train(common + " --sp 4 --sp-mode ulysses --attn-implementation sdpa"), one_cudnn, 2e-2,
                    "sdpa, ulysses 4");
}

// One process per rank over NCCL under `seqpar launch` (world 1 on a one-GPU machine): the store
// rendezvous, the config check, the NCCL collectives of the step, the evaluation and a checkpoint
// all go through the nccl transport, and the curve is the local transport's.
TEST(CudaTrain, NcclTransportUnderSeqparLaunchMatchesLocal) {
  const std::string common = "--steps 6 --eval-every 3 --sp 1 --device cuda";
  TrainRun local = train(common + " --transport local");
  const std::string save = testing::temp_dir() + "/ckpt";
  std::string out;
  TrainRun nccl = train(common + " --transport nccl --save-dir " + save,
                        testing::binary_path() + " launch --nproc-per-node 1 --master-port 29613 -- ", &out);
  EXPECT_NE(out.find("nccl transport"), std::string::npos) << out;
  EXPECT_NE(out.find("saved checkpoint"), std::string::npos) << out;
  expect_same_curve(nccl, local, 1e-3, "nccl vs local");
  EXPECT_GE(nccl.accuracy, 0.0);
}

// The memory levers on the GPU: the same losses as without them, within the bf16 rule.
TEST(CudaTrain, MemoryLeversTrainAlike) {
  const std::string common = "--steps 8 --eval-every 0 --device cuda --sp 2";
  TrainRun plain = train(common);
  TrainRun levers = train(common + " --activation-checkpointing --tiled-mlp-tokens 24 --tiled-loss-tokens 40");
  expect_same_curve(levers, plain, 2e-2, "checkpointing + tiled MLP + tiled loss");
  TrainRun offloaded = train(common + " --activation-checkpointing --checkpoint-offload");  // pinned host, copy stream
  expect_same_curve(offloaded, plain, 2e-2, "checkpointing with offload");
  // Per-layer placement (the demo model's 4 layers here): recomputed from the embedding and from a
  // kept input, one offloaded (whose copy back may find its copy out unfinished and take the device
  // buffer itself), one on the GPU.
  TrainRun placed = train(common + " --num-layers 4 --activation-checkpointing --checkpoint-placement rhrg");
  TrainRun placed_ref = train(common + " --num-layers 4");
  expect_same_curve(placed, placed_ref, 2e-2, "checkpoint placement rhrg");
  TrainRun kept = train(common + " --activation-checkpointing --checkpoint-keep-attention");
  expect_same_curve(kept, plain, 2e-2, "checkpointing keeping attention");
  TrainRun zero = train(common + " --zero-stage 1");  // the AdamW state sharded over the 2 ranks
  expect_same_curve(zero, plain, 2e-2, "ZeRO stage 1");
  TrainRun zero2 = train(common + " --zero-stage 2");  // gradients partitioned too, layer by layer
  expect_same_curve(zero2, plain, 2e-2, "ZeRO stage 2");
}

// A step's forward and backward never make the host wait for the device: every host wait of a
// profiled step is one of the step's boundary reads, counted per step (core/profile.h names them):
// the batch and its mask metadata uploaded before the forward, the device's error flags and the
// losses once the backward is queued, the gradient norm before AdamW. One rank (ranks as threads
// on one GPU stage their collectives through host memory: that is the local transport, not the
// step).
TEST(CudaTrain, NoHostWaitInsideAStep) {
  REQUIRE_GPU();
  TrainConfig c = testing::tiny_recall_config();
  c.parallel.device = Device::cuda(0);
  c.model.arch.head_dim = 64;
  c.parallel.sp = 1;
  c.schedule.steps = 5;
  c.data.grad_accum = 2;
  c.logging.profile = true;
  c.logging.quiet = true;
  c.logging.eval_every = 0;
  const TrainResult r = run_training(c);
  ASSERT_EQ(r.profile_steps, 4);
  std::map<std::string, int64_t> waits;
  for (const ProfileEntry& e : r.profile)
    if (e.name.rfind("host wait: ", 0) == 0) waits[e.name.substr(11)] += e.calls;
  std::string seen;
  for (const auto& [why, n] : waits) seen += why + " x" + std::to_string(n) + "; ";
  std::printf("host waits in %lld profiled steps: %s\n", static_cast<long long>(r.profile_steps), seen.c_str());
  const int64_t steps = r.profile_steps, micro = c.data.grad_accum;
  const std::map<std::string, int64_t> allowed = {
      {"copy from host", 5 * micro * steps},  // per micro-batch: ids, positions, targets, seg, pos
      {"device error flags", steps},          // once, after the backward
      {"result to host", 2 * micro * steps},  // the losses and targets (at most)
      {"sum of squares", steps},              // the gradient norm
  };
  for (const auto& [why, n] : waits) {
    auto it = allowed.find(why);
    ASSERT_NE(it, allowed.end()) << "a host wait nobody allowed: " << why << " (" << seen << ")";
    EXPECT_LE(n, it->second) << why << " (" << seen << ")";
  }
}

// fp16 on the GPU (train/config.h Precision): f16 weights and activations, cuBLASLt's CUDA_R_16F
// GEMMs, f16 attention (cuDNN's HALF SDPA under sdpa, seqpar's f16 flash kernels under
// flash_attention_2) and DeepSpeed's dynamic loss scaler: the CPU's curve within the 16-bit rule
// (fp16 has more mantissa than bf16), one rank and Ulysses alike. A scale of 2^32 (Megatron's and
// DeepSpeed's fused-optimizer default) overflows fp16 at once (dlogits alone reach 2^32 / tokens):
// the first steps are skipped, the scale halves, the run goes on and learns.
TEST(CudaTrain, Fp16MatchesTheCpuAndItsLossScalerTakesTheOverflows) {
  const std::string common = "--steps 8 --eval-every 0 --sp 1";
  const TrainRun cpu = train(common + " --device cpu");
  std::string out;
  const TrainRun fp16 = train(common + " --device cuda --attn-implementation sdpa --mixed-precision fp16", "", &out);
  expect_same_curve(fp16, cpu, 2e-2, "cuda fp16 (cuDNN) vs cpu");
  EXPECT_EQ(out.find("SKIPPED"), std::string::npos) << out;  // 2^16 does not overflow this model
  EXPECT_NE(out.find("loss_scale 65536"), std::string::npos) << out;
  const TrainRun ulysses =
      train("--steps 8 --eval-every 0 --sp 2 --sp-mode ulysses --device cuda --attn-implementation sdpa --fp16");
  expect_same_curve(ulysses, fp16, 2e-2, "fp16, ulysses 2 vs one rank");
  const TrainRun high = train(
      "--steps 30 --eval-every 0 --sp 1 --device cuda --attn-implementation sdpa --fp16 --initial-scale-power 32 "
      "--hysteresis 1",
      "", &out);
  EXPECT_NE(out.find("step     1/30"), std::string::npos) << out;
  EXPECT_NE(out.find("SKIPPED: fp16 overflow, loss scale 4.29497e+09 -> 2.14748e+09"), std::string::npos) << out;
  EXPECT_NE(out.find("skipped on an fp16 overflow"), std::string::npos) << out;
  ASSERT_TRUE(high.loss.count(30)) << out;
  EXPECT_LT(high.loss.at(30), high.loss.at(1)) << out;
  const TrainRun flash = train(common + " --device cuda --attn-implementation flash_attention_2 --fp16");
  expect_same_curve(flash, cpu, 2e-2, "cuda fp16 (flash_attention_2: the f16 flash kernels) vs cpu");
}

// fp16 with a ring (ranks on one GPU): every hop on the f16 flash kernels (a ring's off-diagonal
// blocks are not cuDNN's), f16 partials merged into f32, the dk/dv contributions travelling in f16:
// the CPU's curve within the 16-bit rule; hybrid (Ulysses 2 x ring 2) alike.
TEST(CudaTrain, Fp16RingMatchesTheCpu) {
  const std::string common = "--steps 8 --eval-every 0";
  const TrainRun cpu = train(common + " --sp 1 --device cpu");
  for (const char* mode : {"--sp 2 --sp-mode ring", "--sp 4 --sp-mode hybrid --ulysses-degree 2"}) {
    for (const char* impl : {"sdpa", "flash_attention_2"}) {
      const std::string what = std::string("cuda fp16 ") + mode + " (" + impl + ") vs cpu";
      expect_same_curve(train(common + " " + mode + " --device cuda --attn-implementation " + impl + " --fp16"), cpu,
                        2e-2, what);
    }
  }
}

TEST(CudaTrain, DemoLearnsOnTheGpu) {
  TrainRun r = train("--device cuda --log-every 50");  // the demo's sp = 4 (Ulysses), head_dim 64
  EXPECT_GE(r.accuracy, 0.9);
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// Optimizer offload (host AdamW streamed through pinned staging on a copy stream), ZeRO-3 (layers
// gathered per use; one rank: views of the store) and parameter offload (layers copied from pinned
// host memory, the next one prefetched on a side stream) on the GPU: the curve of stage 0 on the GPU
// within the bf16 rule, on one rank and on two (all-gathers over the local transport), with
// checkpointing (the recompute fetches the layer again), gradient offload and clipping; and a stage-0 checkpoint resumed
// under ZeRO-3 with both offloads.
// The offloaded AdamW's host step overlapped with the compute stream (the weights copied up on the
// copy stream, published part by part) gives the blocking step's bf16 weights and state bit for bit.
TEST(CudaTrain, OverlappedOptimizerStepIsTheBlockingStep) {
  testing::expect_overlapped_step_is_step_flat(Device::cuda(0));
}

TEST(CudaTrain, OffloadAndStage3TrainAlike) {
  for (const char* sp : {"--sp 1", "--sp 2"}) {
    SCOPED_TRACE(sp);
    const std::string common = std::string("--steps 8 --eval-every 0 --device cuda --clip 0.5 ") + sp;
    for (const char* ckpt : {"", " --activation-checkpointing"}) {
      const TrainRun plain = train(common + ckpt);
      for (const char* levers : {"--offload-optimizer cpu", "--zero-stage 3", "--zero-stage 3 --offload-param cpu",
                                 "--zero-stage 3 --offload-param cpu --offload-optimizer cpu",
                                 "--zero-stage 2 --offload-optimizer cpu", "--offload-optimizer cpu --offload-gradients"})
        expect_same_curve(train(common + ckpt + " " + levers), plain, 2e-2, std::string(levers) + ckpt);
    }
    const std::string save = testing::temp_dir() + "/ckpt";
    const TrainRun plain = train(common);
    train(common + " --save-dir " + save + " --save-every 4 --stop-at-step 4");
    const TrainRun resumed =
        train(common + " --save-dir " + save + " --resume --zero-stage 3 --offload-param cpu --offload-optimizer cpu");
    expect_same_curve(resumed, plain, 2e-2, "stage 0 resumed under ZeRO-3 with both offloads");
  }
}

}  // namespace
}  // namespace seqpar
