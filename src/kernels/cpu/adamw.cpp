#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/error.h"

namespace seqpar::cpu {

namespace {

float load_f32(float x) { return x; }
float load_f32(bf16 x) { return bf16_to_f32(x); }
float load_f32(f16 x) { return f16_to_f32(x); }

// torch's lerp (ATen/native/Lerp.h): the branch keeps the result exact at both ends.
float lerp(float a, float b, float w) { return std::fabs(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

}  // namespace

AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                           float grad_scale) {
  SEQPAR_CHECK(step >= 1, "adamw: step={} must be >= 1 (steps count from 1)", step);
  SEQPAR_CHECK(lr >= 0.f, "adamw: lr={} must be >= 0", lr);
  SEQPAR_CHECK(eps >= 0.f, "adamw: eps={} must be >= 0", eps);
  SEQPAR_CHECK(weight_decay >= 0.f, "adamw: weight_decay={} must be >= 0", weight_decay);
  SEQPAR_CHECK(beta1 >= 0.f && beta1 < 1.f, "adamw: beta1={} must be in [0, 1)", beta1);
  SEQPAR_CHECK(beta2 >= 0.f && beta2 < 1.f, "adamw: beta2={} must be in [0, 1)", beta2);
  const double lr_d = lr, beta1_d = beta1, beta2_d = beta2;
  const double bias_correction1 = 1.0 - std::pow(beta1_d, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2_d, static_cast<double>(step));
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr_d * weight_decay);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1_d);
  s.beta2 = beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2_d);
  s.neg_step_size = static_cast<float>(-(lr_d / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = eps;
  s.grad_scale = grad_scale;
  return s;
}

template <typename Grad>
void adamw_step(float* param, float* m, float* v, const Grad* grad, int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; i++) {
    const float g = load_f32(grad[i]) * s.grad_scale;
    float p = param[i] * s.decay;
    const float mi = lerp(m[i], g, s.one_minus_beta1);
    float vi = v[i] * s.beta2;
    vi = vi + s.one_minus_beta2 * g * g;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    p = p + s.neg_step_size * mi / denom;
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

template void adamw_step<float>(float*, float*, float*, const float*, int64_t, const AdamWScalars&);
template void adamw_step<bf16>(float*, float*, float*, const bf16*, int64_t, const AdamWScalars&);
template void adamw_step<f16>(float*, float*, float*, const f16*, int64_t, const AdamWScalars&);

}  // namespace seqpar::cpu
