// fp16's loss scaler, with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py:
// DynamicLossScaler, which DeepSpeed's ZeRO optimizers use; LossScaler for a static scale).
//
// fp16 holds magnitudes in [2^-24, 65504]: small gradients of the activations underflow to 0
// unless the loss is multiplied by a scale S before backward, and the gradients divided by S (in
// f32) before clipping and AdamW. A scale too large makes some gradient overflow to inf; the step
// is then skipped (no AdamW update) and the scale lowered. The scaler is that rule:
//
//   static  (loss_scale > 0): S = loss_scale always; an overflow is not the scaler's to absorb
//           (DeepSpeed's LossScaler checks for none), so it is a non-finite step for the trainer's
//           guard (on_nonfinite).
//   dynamic (loss_scale = 0): S starts at 2^initial_scale_power. After a step, with `iter` the
//           steps the scaler has seen before it (0-based) and `last` the iter of the last overflow
//           (-1 before any):
//             overflow:  if hysteresis == 1 or cur_hysteresis == 1: S = max(S / 2, min_loss_scale)
//                        (at S == min_loss_scale DeepSpeed raises "Current loss scale already at
//                        minimum": seqpar hands the step to the guard instead, `absorbed` false);
//                        else cur_hysteresis -= 1 (S unchanged); then last = iter.
//             no overflow: with consecutive_hysteresis, cur_hysteresis = hysteresis; then if
//                        stable = iter - last - 1 is > 0 and a multiple of loss_scale_window,
//                        S *= 2 (and, without consecutive_hysteresis, cur_hysteresis = hysteresis).
//           iter += 1 in both cases.
//
// The scaler's decision is the same on every rank: the trainer agrees on `overflow` over the
// world first. Its state is saved in the checkpoint (trainer_state.json "loss_scaler"), so a
// resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace seqpar {

// DeepSpeed's fp16 section (deepspeed/runtime/precision_config.py DeepSpeedFP16Config), with its defaults.
struct LossScalerConfig {
  double loss_scale = 0;             // 0: dynamic; > 0: this static scale
  int initial_scale_power = 16;      // dynamic: S starts at 2^initial_scale_power (0 .. 127: finite in f32)
  int64_t loss_scale_window = 1000;  // dynamic: overflow-free steps before S doubles (>= 1)
  int hysteresis = 2;                // dynamic: overflows tolerated before S halves (DeepSpeed's delayed_shift, >= 1)
  bool consecutive_hysteresis = false;  // refill the hysteresis after every overflow-free step
  double min_loss_scale = 1;            // dynamic: S never goes below it (> 0)

  bool dynamic() const { return loss_scale == 0; }
  // InputError naming the setting, the value and the rule.
  void validate() const;
};

// What the scaler carries from step to step (DeepSpeed's cur_scale, cur_iter, last_overflow_iter,
// cur_hysteresis).
struct LossScalerState {
  double scale = 1;
  int64_t iter = 0;
  int64_t last_overflow_iter = -1;
  int hysteresis = 1;

  bool operator==(const LossScalerState&) const = default;
};

nlohmann::json loss_scaler_state_to_json(const LossScalerState& state);
// InputError "<source>: ..." for a missing or mistyped field, or a scale that is not finite and > 0.
LossScalerState loss_scaler_state_from_json(const nlohmann::json& j, const std::string& source);

class LossScaler {
 public:
  // enabled false (bf16, f32): scale 1 always, and update() never absorbs an overflow.
  LossScaler(const LossScalerConfig& config, bool enabled);

  bool enabled() const { return enabled_; }
  bool dynamic() const { return enabled_ && config_.dynamic(); }
  // The scale of the next step's loss (a power of two while dynamic).
  double scale() const { return state_.scale; }
  const LossScalerState& state() const { return state_; }
  // A checkpoint's state (its scale must be finite and > 0).
  void set_state(const LossScalerState& state);

  struct Update {
    bool absorbed = false;  // an overflow the scaler takes: skip the step, lower the scale (not a divergence)
    double scale_before = 1, scale_after = 1;
    int hysteresis_before = 1, hysteresis_after = 1;
  };
  // After a step whose gradients (agreed over the world) did or did not overflow.
  Update update(bool overflow);

 private:
  LossScalerConfig config_;
  bool enabled_ = false;
  LossScalerState state_;
};

}  // namespace seqpar
