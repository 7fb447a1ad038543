// fp16's loss scaler (train/loss_scaler.h): DeepSpeed's DynamicLossScaler rules step by step
// (sequences worked out by hand from deepspeed/runtime/fp16/loss_scaler.py's update_scale), the
// static scale, the state's JSON; and fp16 training on the CPU (f32 compute with the scaler):
// without an overflow bit-identical to the bf16/f32 run, an overflow skipping its step (weights and
// moments unchanged, the scale halved) without counting as a divergence, and resume bit-exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/checkpoint.h"
#include "train/loss_scaler.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

LossScalerConfig dynamic_config(int power, int64_t window, int hysteresis, double min_scale = 1) {
  LossScalerConfig c;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.min_loss_scale = min_scale;
  return c;
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  const LossScalerConfig c;
  EXPECT_EQ(c.loss_scale, 0);
  EXPECT_EQ(c.initial_scale_power, 16);
  EXPECT_EQ(c.loss_scale_window, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_FALSE(c.consecutive_hysteresis);
  EXPECT_EQ(c.min_loss_scale, 1);
  LossScaler s(c, true);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536);
}

// An overflow with hysteresis 1 halves the scale at once; the hysteresis (2) lets the first
// overflow pass with the scale kept, the second halves it; the hysteresis stays spent (1) until
// the window doubles the scale (which refills it), so a later single overflow halves at once.
TEST(LossScaler, OverflowHalvesTheScaleAfterTheHysteresis) {
  {
    LossScaler s(dynamic_config(10, 1000, 1), true);
    const LossScaler::Update u = s.update(true);
    EXPECT_TRUE(u.absorbed);
    EXPECT_EQ(u.scale_before, 1024);
    EXPECT_EQ(u.scale_after, 512);
    EXPECT_EQ(s.scale(), 512);
    EXPECT_EQ(s.state().last_overflow_iter, 0);
    EXPECT_EQ(s.state().iter, 1);
  }
  LossScaler s(dynamic_config(10, 1000, 2), true);
  LossScaler::Update u = s.update(true);
  EXPECT_TRUE(u.absorbed);
  EXPECT_EQ(s.scale(), 1024);  // hysteresis 2 -> 1, scale kept
  EXPECT_EQ(u.hysteresis_before, 2);
  EXPECT_EQ(u.hysteresis_after, 1);
  u = s.update(true);
  EXPECT_TRUE(u.absorbed);
  EXPECT_EQ(s.scale(), 512);
  for (int i = 0; i < 5; ++i) s.update(false);  // clean steps do not refill it (no consecutive_hysteresis)
  EXPECT_EQ(s.state().hysteresis, 1);
  s.update(true);
  EXPECT_EQ(s.scale(), 256);
}

// The window: with stable = iter - last_overflow_iter - 1, the scale doubles on a clean step whose
// stable is a positive multiple of the window. From the start (last = -1) with window 3 that is
// iter 3 (the 4th step), then 6 and 9; after an overflow at iter k, iter k + 4 (the 4th clean step).
TEST(LossScaler, WindowOfCleanStepsDoublesTheScaleAndRefillsTheHysteresis) {
  LossScaler s(dynamic_config(4, 3, 2), true);
  std::vector<double> scales;
  for (int i = 0; i < 10; ++i) scales.push_back(s.update(false).scale_after);
  EXPECT_EQ(scales, (std::vector<double>{16, 16, 16, 32, 32, 32, 64, 64, 64, 128}));
  // iter 10: overflow (hysteresis 2 -> 1, scale kept); iter 11: overflow (halved); then clean.
  s.update(true);
  EXPECT_EQ(s.scale(), 128);
  s.update(true);
  EXPECT_EQ(s.scale(), 64);
  EXPECT_EQ(s.state().last_overflow_iter, 11);
  std::vector<double> after;
  std::vector<int> hyst;
  for (int i = 0; i < 5; ++i) {
    const LossScaler::Update u = s.update(false);
    after.push_back(u.scale_after);
    hyst.push_back(u.hysteresis_after);
  }
  EXPECT_EQ(after, (std::vector<double>{64, 64, 64, 128, 128}));  // iters 12..16: doubled at 15 = 11 + 4
  EXPECT_EQ(hyst, (std::vector<int>{1, 1, 1, 2, 2}));             // refilled with the doubling
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  LossScalerConfig c = dynamic_config(8, 1000, 2);
  c.consecutive_hysteresis = true;
  LossScaler s(c, true);
  s.update(true);
  EXPECT_EQ(s.state().hysteresis, 1);
  s.update(false);
  EXPECT_EQ(s.state().hysteresis, 2);
  s.update(true);  // spent again, but the scale is kept: the refill made it a first overflow
  EXPECT_EQ(s.scale(), 256);
  s.update(true);
  EXPECT_EQ(s.scale(), 128);
}

// min_loss_scale is a floor: halving stops there, and an overflow at the floor is not absorbed
// (DeepSpeed raises "Current loss scale already at minimum"; seqpar's guard takes the step).
TEST(LossScaler, MinLossScaleIsAFloor) {
  LossScaler s(dynamic_config(3, 1000, 1, 3), true);  // 8, floor 3
  LossScaler::Update u = s.update(true);
  EXPECT_TRUE(u.absorbed);
  EXPECT_EQ(s.scale(), 4);
  u = s.update(true);  // 4 / 2 = 2 < 3: clamped to the floor
  EXPECT_TRUE(u.absorbed);
  EXPECT_EQ(s.scale(), 3);
  u = s.update(true);  // at the floor
  EXPECT_FALSE(u.absorbed);
  EXPECT_EQ(s.scale(), 3);
  u = s.update(false);
  EXPECT_EQ(s.scale(), 3);
}

TEST(LossScaler, StaticScaleNeverChangesAndAbsorbsNothing) {
  LossScalerConfig c;
  c.loss_scale = 128;
  LossScaler s(c, true);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(s.scale(), 128);
  for (bool overflow : {true, false, true, true}) {
    const LossScaler::Update u = s.update(overflow);
    EXPECT_FALSE(u.absorbed);
    EXPECT_EQ(u.scale_after, 128);
  }
  LossScaler off(LossScalerConfig{}, false);  // bf16: scale 1, nothing absorbed
  EXPECT_EQ(off.scale(), 1);
  EXPECT_FALSE(off.update(true).absorbed);
  EXPECT_EQ(off.scale(), 1);
}

TEST(LossScaler, StateRoundTripsAndBadStatesAreRefused) {
  LossScaler s(dynamic_config(12, 2, 2), true);
  for (bool o : {false, true, false, false, false, true, true}) s.update(o);
  const json j = loss_scaler_state_to_json(s.state());
  EXPECT_EQ(loss_scaler_state_from_json(j, "t.json"), s.state());
  json bad = j;
  bad["scale"] = -1.0;
  EXPECT_THROW(loss_scaler_state_from_json(bad, "t.json"), InputError);
  bad = j;
  bad.erase("iter");
  EXPECT_THROW(loss_scaler_state_from_json(bad, "t.json"), InputError);
  // The settings' rules, DeepSpeed's (checked for the dynamic scaler only).
  LossScalerConfig c;
  c.loss_scale_window = 0;
  EXPECT_THROW(c.validate(), InputError);
  c.loss_scale = 4;  // static: the dynamic scaler's settings are not checked, as in DeepSpeed
  EXPECT_NO_THROW(c.validate());
  c = LossScalerConfig{};
  c.hysteresis = 0;
  EXPECT_THROW(c.validate(), InputError);
  c = LossScalerConfig{};
  c.initial_scale_power = 128;
  EXPECT_THROW(c.validate(), InputError);
  c = LossScalerConfig{};
  c.min_loss_scale = 0;
  EXPECT_THROW(c.validate(), InputError);
}

// ---- fp16 training on the CPU ----------------------------------------------------------------

TrainConfig tiny_run() {
  TrainConfig c = testing::tiny_recall_config();
  c.schedule.steps = 8;
  c.schedule.warmup_steps = 0;
  c.schedule.lr.type = LrScheduleType::kConstant;
  c.optimizer.adamw.lr = 3e-3f;
  c.optimizer.clip = 1.0;
  c.parallel.sp = 1;
  c.logging.eval_every = 0;
  c.data.eval_batches = 1;
  c.logging.log_every = 1;
  c.logging.quiet = true;
  return c;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string step_dir(const std::string& save_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "/step_%06lld", static_cast<long long>(step));
  return save_dir + name;
}

// The CPU computes in f32 with either precision; fp16 multiplies the loss by a power of two before
// backward and divides the gradients by it in f32 (folded into AdamW's gradient factor): every
// gradient is exactly scale times the unscaled one, so with no overflow the run IS the f32 run,
// bit for bit, and it learns.
TEST(Fp16Train, CpuRunWithoutOverflowIsTheF32RunBitForBit) {
  for (int sp : {1, 2}) {
    SCOPED_TRACE(sp);
    TrainConfig c = tiny_run();
    c.parallel.sp = sp;
    const std::string root = testing::temp_dir();
    TrainConfig bf = c;
    bf.checkpoint.save_dir = root + "/bf16";
    TrainConfig fp = c;
    fp.precision.mixed_precision = Precision::kFp16;
    fp.checkpoint.save_dir = root + "/fp16";
    const TrainResult a = run_training(bf), b = run_training(fp);
    ASSERT_EQ(a.losses.size(), 8u);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_LT(b.losses.back(), b.losses.front());
    EXPECT_TRUE(b.skipped_steps.empty());
    EXPECT_EQ(b.loss_scale, 65536);  // the window (1000) never reached, no overflow
    for (const char* f : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_TRUE(bytes_of(step_dir(bf.checkpoint.save_dir, 8) + "/" + f) ==
                  bytes_of(step_dir(fp.checkpoint.save_dir, 8) + "/" + f))
          << f;
    const Checkpoint ck = load_checkpoint(step_dir(fp.checkpoint.save_dir, 8));
    ASSERT_TRUE(ck.state.loss_scaler.has_value());
    EXPECT_EQ(ck.state.loss_scaler->scale, 65536);
    EXPECT_EQ(ck.state.loss_scaler->iter, 8);
    EXPECT_FALSE(load_checkpoint(step_dir(bf.checkpoint.save_dir, 8)).state.loss_scaler.has_value());
  }
}

// A scale beyond f32's range makes the CPU's gradients overflow as fp16's would: start at 2^124
// with a window of 1, so the scale doubles after each clean step until the gradients overflow (at
// the latest at 2^128, inf as the f32 factor of the loss, by step 6). Every overflow skips its step
// (the weights and AdamW moments of the step before, the optimizer's step count not advanced),
// halves the scale, is logged and recorded, and is no divergence: the default guard (abort at the
// first non-finite step) lets the run finish.
TrainConfig overflowing_run() {
  TrainConfig c = tiny_run();
  c.precision.mixed_precision = Precision::kFp16;
  c.precision.scaler.initial_scale_power = 124;
  c.precision.scaler.loss_scale_window = 1;
  c.precision.scaler.hysteresis = 1;
  return c;
}

TEST(Fp16Train, OverflowSkipsTheStepHalvesTheScaleAndIsNoDivergence) {
  TrainConfig c = overflowing_run();
  c.schedule.steps = 12;
  const std::string root = testing::temp_dir();
  c.checkpoint.save_dir = root + "/ckpt";
  c.checkpoint.save_every = 1;
  c.logging.metrics_out = root + "/m.jsonl";
  ASSERT_EQ(c.checkpoint.on_nonfinite, "abort");
  ASSERT_EQ(c.checkpoint.max_nonfinite_steps, 1);
  const TrainResult r = run_training(c);
  EXPECT_EQ(r.steps_run, 12);
  ASSERT_FALSE(r.overflow_steps.empty());
  EXPECT_LE(r.overflow_steps.front(), 6);
  EXPECT_EQ(r.skipped_steps, r.overflow_steps);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));  // an overflow is the gradients', not the loss's
  auto overflowed = [&](int64_t step) {
    return std::count(r.overflow_steps.begin(), r.overflow_steps.end(), step) > 0;
  };
  // Replaying the scaler over the recorded overflows gives the run's scales, step by step.
  LossScaler replay(c.precision.scaler, true);
  std::vector<double> scales, after;
  for (int64_t step = 1; step <= 12; ++step) {
    scales.push_back(replay.scale());
    const LossScaler::Update u = replay.update(overflowed(step));
    after.push_back(u.scale_after);
    EXPECT_EQ(u.absorbed, overflowed(step)) << step;
    if (overflowed(step)) {
      EXPECT_EQ(u.scale_after, u.scale_before / 2) << step;
    }
    const Checkpoint ck = load_checkpoint(step_dir(c.checkpoint.save_dir, step));
    ASSERT_TRUE(ck.state.loss_scaler.has_value());
    EXPECT_EQ(ck.state.loss_scaler->scale, u.scale_after) << step;
    EXPECT_EQ(ck.optimizer_step, step - static_cast<int64_t>(ck.state.skipped_steps.size())) << step;
    if (step == 1) continue;
    // An overflow leaves the weights and moments as they were; a clean step changes them.
    for (const char* f : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_EQ(bytes_of(step_dir(c.checkpoint.save_dir, step) + "/" + f) ==
                    bytes_of(step_dir(c.checkpoint.save_dir, step - 1) + "/" + f),
                overflowed(step))
          << "step " << step << " " << f;
  }
  EXPECT_EQ(r.loss_scale, replay.scale());
  // The metrics: every record has the step's loss scale; the overflows are marked and counted.
  int overflow_records = 0;
  std::ifstream in(c.logging.metrics_out);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (!j.contains("step") || !j.contains("loss")) continue;
    const int64_t step = j["step"].get<int64_t>();
    EXPECT_EQ(j["loss_scale"].get<double>(), scales[step - 1]) << step;
    if (j.value("overflow", false)) {
      ++overflow_records;
      EXPECT_TRUE(j["skipped"].get<bool>());
      EXPECT_TRUE(j["loss"].is_number());
    }
  }
  EXPECT_EQ(overflow_records, static_cast<int>(r.overflow_steps.size()));
}

// A static scale does not absorb an overflow: the guard takes the step (abort by default).
TEST(Fp16Train, StaticScaleOverflowIsANonFiniteStep) {
  TrainConfig c = tiny_run();
  c.precision.mixed_precision = Precision::kFp16;
  c.precision.scaler.loss_scale = 1e39;  // a finite number (DeepSpeed takes it), inf as the f32 factor of the loss
  try {
    run_training(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 1: the loss or the gradient norm is not finite"), std::string::npos) << m;
    EXPECT_NE(m.find("fp16 with the static loss_scale="), std::string::npos) << m;
  }
  c.checkpoint.on_nonfinite = "skip";
  const TrainResult r = run_training(c);
  EXPECT_EQ(r.skipped_steps.size(), 8u);
  EXPECT_TRUE(r.overflow_steps.empty());
}

// Resume continues the scaler where it stood: the split run's losses, weights, moments, scaler
// state and skipped steps are the whole run's, bit for bit (the overflows included).
TEST(Fp16Train, ResumeIsBitExact) {
  TrainConfig c = overflowing_run();
  const std::string root = testing::temp_dir();
  TrainConfig whole = c;
  whole.checkpoint.save_dir = root + "/whole";
  whole.checkpoint.save_every = 4;
  const TrainResult a = run_training(whole);
  ASSERT_FALSE(a.overflow_steps.empty());
  TrainConfig first = c;
  first.checkpoint.save_dir = root + "/split";
  first.checkpoint.stop_at_step = 4;
  run_training(first);
  TrainConfig second = c;
  second.checkpoint.save_dir = root + "/split";
  second.checkpoint.resume = ResumeFrom::parse("latest");
  const TrainResult b = run_training(second);
  EXPECT_EQ(b.first_step, 5);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.skipped_steps, b.skipped_steps);
  EXPECT_EQ(a.overflow_steps, b.overflow_steps);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(bytes_of(step_dir(whole.checkpoint.save_dir, 8) + "/" + f) ==
                bytes_of(step_dir(second.checkpoint.save_dir, 8) + "/" + f))
        << f;
  EXPECT_EQ(load_checkpoint(step_dir(whole.checkpoint.save_dir, 8)).state.loss_scaler,
            load_checkpoint(step_dir(second.checkpoint.save_dir, 8)).state.loss_scaler);
}

// The checkpoint tells the two kinds of skipped step apart (the guard's count of non-finite steps
// in a row, restored on resume, passes over the overflows).
TEST(Fp16Train, CheckpointRecordsTheOverflowSteps) {
  TrainConfig c = overflowing_run();
  const std::string root = testing::temp_dir();
  c.checkpoint.save_dir = root + "/ckpt";
  c.checkpoint.stop_at_step = 8;
  const TrainResult r = run_training(c);
  ASSERT_FALSE(r.overflow_steps.empty());
  const Checkpoint ck = load_checkpoint(step_dir(c.checkpoint.save_dir, 8));
  EXPECT_EQ(ck.state.overflow_steps, r.overflow_steps);
  EXPECT_EQ(ck.state.skipped_steps, r.skipped_steps);
}

}  // namespace
}  // namespace seqpar
