#include "train/optimizer.h"

#include <cmath>

namespace seqpar {

AdamW::AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, Device device)
    : config_(config),
      m_(LlamaParams::zeros(model_config, DType::kF32, device)),
      v_(LlamaParams::zeros(model_config, DType::kF32, device)) {}

double AdamW::grad_norm(LlamaParams& grads) {
  double ss = 0;
  for (auto& [name, g] : grads.named()) ss += sum_squares(*g);
  return std::sqrt(ss);
}

float AdamW::step(LlamaParams& params, LlamaParams& grads, double total_norm) {
  ++step_;
  float coef = clip_coefficient(total_norm, config_.clip);
  auto p = params.named();
  auto g = grads.named();
  auto m = m_.named();
  auto v = v_.named();
  for (size_t i = 0; i < p.size(); ++i) adamw_step(*p[i].second, *m[i].second, *v[i].second, *g[i].second,
                                                   config_.adamw, step_, coef);
  return coef;
}

}  // namespace seqpar
