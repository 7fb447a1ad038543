// fp16's loss scaler (train/loss_scaler.h): DeepSpeed's DynamicLossScaler.update_scale, step for step.
#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace seqpar {

void LossScalerConfig::validate() const {
  SEQPAR_INPUT_CHECK(std::isfinite(loss_scale) && loss_scale >= 0,
                     "loss_scale={} must be >= 0 (0 = dynamic loss scaling)", loss_scale);
  if (!dynamic()) return;  // DeepSpeed checks the dynamic scaler's settings only when it is used
  SEQPAR_INPUT_CHECK(initial_scale_power >= 0 && initial_scale_power <= 127,
                     "initial_scale_power={} must be in [0, 127] (the scale 2^{} multiplies an f32 loss)",
                     initial_scale_power, initial_scale_power);
  SEQPAR_INPUT_CHECK(loss_scale_window >= 1, "loss_scale_window={} must be >= 1", loss_scale_window);
  SEQPAR_INPUT_CHECK(hysteresis >= 1, "hysteresis={} must be >= 1 (1 = lower the scale at the first overflow)",
                     hysteresis);
  SEQPAR_INPUT_CHECK(std::isfinite(min_loss_scale) && min_loss_scale > 0, "min_loss_scale={} must be > 0",
                     min_loss_scale);
}

nlohmann::json loss_scaler_state_to_json(const LossScalerState& s) {
  return {
      {"scale", s.scale}, {"iter", s.iter}, {"last_overflow_iter", s.last_overflow_iter}, {"hysteresis", s.hysteresis}};
}

LossScalerState loss_scaler_state_from_json(const nlohmann::json& j, const std::string& source) {
  SEQPAR_INPUT_CHECK(j.is_object(), "{}: loss_scaler must be an object, got {}", source, j.type_name());
  LossScalerState s;
  try {
    s.scale = j.at("scale").get<double>();
    s.iter = j.at("iter").get<int64_t>();
    s.last_overflow_iter = j.at("last_overflow_iter").get<int64_t>();
    s.hysteresis = j.at("hysteresis").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: loss_scaler: {}", source, e.what()));
  }
  SEQPAR_INPUT_CHECK(std::isfinite(s.scale) && s.scale > 0, "{}: loss_scaler.scale={} must be finite and > 0", source,
                     s.scale);
  SEQPAR_INPUT_CHECK(s.iter >= 0 && s.last_overflow_iter >= -1 && s.last_overflow_iter < s.iter + 1,
                     "{}: loss_scaler iter={} and last_overflow_iter={} are inconsistent", source, s.iter,
                     s.last_overflow_iter);
  return s;
}

LossScaler::LossScaler(const LossScalerConfig& config, bool enabled) : config_(config), enabled_(enabled) {
  if (!enabled_) return;
  config_.validate();
  state_.scale = config_.dynamic() ? std::ldexp(1.0, config_.initial_scale_power) : config_.loss_scale;
  state_.hysteresis = config_.hysteresis;
}

void LossScaler::set_state(const LossScalerState& state) {
  SEQPAR_CHECK(std::isfinite(state.scale) && state.scale > 0, "LossScaler: scale {} must be finite and > 0",
               state.scale);
  state_ = state;
}

LossScaler::Update LossScaler::update(bool overflow) {
  Update u;
  u.scale_before = u.scale_after = state_.scale;
  u.hysteresis_before = u.hysteresis_after = state_.hysteresis;
  if (!enabled_) return u;
  if (!config_.dynamic()) {  // DeepSpeed's static LossScaler: nothing to adjust, no overflow of its own
    ++state_.iter;
    return u;
  }
  LossScalerState& s = state_;
  if (overflow) {
    if (config_.hysteresis == 1 || s.hysteresis == 1) {
      // At the floor DeepSpeed stops the run; here the step goes to the guard (not absorbed).
      u.absorbed = s.scale != config_.min_loss_scale;
      s.scale = std::max(s.scale / 2, config_.min_loss_scale);
    } else {
      u.absorbed = true;
      s.hysteresis -= 1;
    }
    s.last_overflow_iter = s.iter;
  } else {
    if (config_.consecutive_hysteresis) s.hysteresis = config_.hysteresis;
    const int64_t stable = s.iter - s.last_overflow_iter - 1;
    if (stable > 0 && stable % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.hysteresis = config_.hysteresis;
      s.scale *= 2;
    }
  }
  ++s.iter;
  u.scale_after = s.scale;
  u.hysteresis_after = s.hysteresis;
  return u;
}

}  // namespace seqpar
