// Shared by the trainer's tests: the smallest training run that learns something.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace seqpar::testing {

// The demo's tiny Llama on a 32-token recall task (4 pairs, 4 queries of 3 tokens, filler), two
// sequences per micro-batch: a step takes milliseconds. Callers set the steps, mesh and outputs.
inline TrainConfig tiny_recall_config() {
  TrainConfig c;
  c.model.arch = demo_model_config();
  c.data.task.seq_len = 32;
  c.data.task.num_pairs = 4;
  c.data.task.num_queries = 4;
  c.data.micro_batch = 2;
  return c;
}

// The overlapped offloaded AdamW step (AdamW::step_flat_overlapped) against the blocking one
// (step_flat) from the same state, on `device` (compute weights bf16 on CUDA): each part of the
// weights equals the blocking step's as soon as wait_weights says it is written (read while the rest
// is still being updated), and after finish() the weights and the whole state (master weights and
// both moments) are bit-identical; three steps, each with its own gradients, lr and norm.
inline void expect_overlapped_step_is_step_flat(Device device) {
  const LlamaConfig mc = demo_model_config();
  const int64_t total = LlamaParams::flat_layout(mc).total;
  const DType compute = device.is_cuda() ? DType::kBF16 : DType::kF32;
  OptimizerConfig oc;
  oc.adamw.weight_decay = 0.1f;
  oc.clip = 0.5;
  LlamaParams initial = LlamaParams::zeros(mc, DType::kF32, Device::cpu(), /*one_buffer=*/true);
  uint64_t seed = 7;
  for (auto& [name, t] : initial.named()) t->copy_from(random_tensor(t->shape(), ++seed));
  OptimizerPlacement place;
  place.layout = ShardLayout::whole(total);
  place.host = true;
  place.threads = 3;
  place.chunk = 4096;  // many chunks: the weights are published piece by piece
  AdamW blocking(mc, oc, initial, compute, device, place), overlapped(mc, oc, initial, compute, device, place);
  ASSERT_TRUE(overlapped.overlappable(FlatRef{Tensor::zeros({total}, compute, device), true}));
  Tensor out_a = Tensor::zeros({total}, compute, device), out_b = Tensor::zeros({total}, compute, device);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor grads = random_tensor({total}, 100 + step).to(device);
    blocking.set_lr(1e-2f * static_cast<float>(step));
    overlapped.set_lr(1e-2f * static_cast<float>(step));
    const double norm = 0.25 * step;  // over the clip of 0.5 at step 3 only
    const float clip_a = blocking.step_flat(FlatRef{grads, true}, FlatRef{out_a, true}, norm);
    const float clip_b = overlapped.step_flat_overlapped(FlatRef{grads, true}, FlatRef{out_b, true}, norm);
    EXPECT_EQ(clip_b, clip_a);  // (returned at once)
    if (step == 3) {
      EXPECT_LT(clip_a, 1.f);
    }
    const std::vector<float> want = out_a.to(Device::cpu()).to_f32_vector();
    for (int64_t end = total / 7; end < total + total / 7; end += total / 7) {
      const int64_t e = std::min(end, total);
      overlapped.wait_weights(e);
      const std::vector<float> got = out_b.rows(0, e).to(Device::cpu()).to_f32_vector();
      int64_t differ = 0;
      for (int64_t i = 0; i < e; ++i) differ += got[static_cast<size_t>(i)] != want[static_cast<size_t>(i)];
      EXPECT_EQ(differ, 0) << "of the first " << e << " weights, once wait_weights(" << e << ") returned";
    }
    overlapped.finish();
    EXPECT_EQ(out_b.to(Device::cpu()).to_f32_vector(), want);
    EXPECT_EQ(overlapped.step_count(), blocking.step_count());
  }
  run_local_ranks(1, [&](Communicator& comm) {
    const AdamW::FullState a = blocking.full_state(comm, mc), b = overlapped.full_state(comm, mc);
    EXPECT_EQ(a.master.flat.to_f32_vector(), b.master.flat.to_f32_vector());
    EXPECT_EQ(a.exp_avg.flat.to_f32_vector(), b.exp_avg.flat.to_f32_vector());
    EXPECT_EQ(a.exp_avg_sq.flat.to_f32_vector(), b.exp_avg_sq.flat.to_f32_vector());
  });
}

}  // namespace seqpar::testing
