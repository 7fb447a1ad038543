#include "train/optimizer.h"

#include <cmath>

namespace seqpar {

AdamW::AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params,
             Device device)
    : config_(config),
      m_(LlamaParams::zeros(model_config, DType::kF32, device)),
      v_(LlamaParams::zeros(model_config, DType::kF32, device)) {
  const auto named = params.named();
  has_master_ = !named.empty() && named.front().second->dtype() != DType::kF32;
  if (!has_master_) return;
  master_ = LlamaParams::zeros(model_config, DType::kF32, device);
  auto dst = master_.named();
  for (size_t i = 0; i < dst.size(); ++i) cast(*dst[i].second, *named[i].second);
}

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
  auto w = weights(params).named();
  for (size_t i = 0; i < p.size(); ++i) {
    adamw_step(*w[i].second, *m[i].second, *v[i].second, *g[i].second, config_.adamw, step_, coef);
    if (has_master_) cast(*p[i].second, *w[i].second);
  }
  return coef;
}

void all_reduce_grads(Communicator& comm, LlamaParams& grads) {
  if (grads.all_in_flat()) {
    comm.all_reduce(grads.flat, ReduceOp::kSum);
    return;
  }
  for (auto& [name, g] : grads.named()) comm.all_reduce(*g, ReduceOp::kSum);
}

}  // namespace seqpar
