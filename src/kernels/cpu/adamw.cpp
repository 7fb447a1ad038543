#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace seqpar::cpu {

namespace {

float load_f32(float x) { return x; }
float load_f32(bf16 x) { return bf16_to_f32(x); }
float load_f32(f16 x) { return f16_to_f32(x); }

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

namespace {

// The loop for one gradient type and one rounded output (None: no rounding), the lerp's branch
// chosen once (its weight is the same for every element), so that the loop vectorises.
struct None {};

inline uint16_t round_bf16_bits(float p) {
  uint32_t u;
  std::memcpy(&u, &p, 4);
  const uint32_t nan = (u >> 16) | 0x40u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);  // f32_to_bf16, branch-free
}

template <bool kLowWeight, typename Grad, typename Out>
[[gnu::always_inline]] inline void adamw_loop(float* __restrict param, float* __restrict m, float* __restrict v,
                                              const Grad* __restrict grad, Out* __restrict rounded, int64_t n,
                                              const AdamWScalars& s) {
  const float w = s.one_minus_beta1, one_minus_w = 1.0f - s.one_minus_beta1;
  for (int64_t i = 0; i < n; i++) {
    const float g = load_f32(grad[i]) * s.grad_scale;
    float p = param[i] * s.decay;
    const float mi = kLowWeight ? m[i] + w * (g - m[i]) : g - (g - m[i]) * one_minus_w;  // torch's lerp
    float vi = v[i] * s.beta2;
    vi = vi + s.one_minus_beta2 * g * g;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    p = p + s.neg_step_size * mi / denom;
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (std::is_same_v<Out, bf16>) {
      rounded[i] = bf16{round_bf16_bits(p)};
    } else if constexpr (std::is_same_v<Out, f16>) {
      rounded[i] = f32_to_f16(p);
    }
  }
}

template <typename Grad, typename Out>
[[gnu::always_inline]] inline void adamw_any(float* param, float* m, float* v, const Grad* grad, Out* rounded,
                                             int64_t n, const AdamWScalars& s) {
  if (std::fabs(s.one_minus_beta1) < 0.5f) {
    adamw_loop<true>(param, m, v, grad, rounded, n, s);
  } else {
    adamw_loop<false>(param, m, v, grad, rounded, n, s);
  }
}

// One clone per instruction set, picked at load time (GCC's target_clones). The build targets
// plain x86-64 (no -march=native), so this is where the host step gets its vector width.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define SEQPAR_ADAMW_CLONES [[gnu::target_clones("default", "avx2", "avx512f")]]
#else
#define SEQPAR_ADAMW_CLONES
#endif

SEQPAR_ADAMW_CLONES void adamw_f32(float* p, float* m, float* v, const float* g, int64_t n, const AdamWScalars& s) {
  adamw_any(p, m, v, g, static_cast<None*>(nullptr), n, s);
}
SEQPAR_ADAMW_CLONES void adamw_bf16(float* p, float* m, float* v, const bf16* g, int64_t n, const AdamWScalars& s) {
  adamw_any(p, m, v, g, static_cast<None*>(nullptr), n, s);
}
SEQPAR_ADAMW_CLONES void adamw_f16(float* p, float* m, float* v, const f16* g, int64_t n, const AdamWScalars& s) {
  adamw_any(p, m, v, g, static_cast<None*>(nullptr), n, s);
}
SEQPAR_ADAMW_CLONES void adamw_f32_to_bf16(float* p, float* m, float* v, const float* g, bf16* out, int64_t n,
                                           const AdamWScalars& s) {
  adamw_any(p, m, v, g, out, n, s);
}
void adamw_f32_to_f16(float* p, float* m, float* v, const float* g, f16* out, int64_t n, const AdamWScalars& s) {
  adamw_any(p, m, v, g, out, n, s);  // f16's rounding (subnormals) is scalar code: no clones
}

}  // namespace

template <typename Grad>
void adamw_step(float* param, float* m, float* v, const Grad* grad, int64_t n, const AdamWScalars& s) {
  if constexpr (std::is_same_v<Grad, float>) {
    adamw_f32(param, m, v, grad, n, s);
  } else if constexpr (std::is_same_v<Grad, bf16>) {
    adamw_bf16(param, m, v, grad, n, s);
  } else {
    adamw_f16(param, m, v, grad, n, s);
  }
}

template <typename Out>
void adamw_step_rounded(float* param, float* m, float* v, const float* grad, Out* rounded, int64_t n,
                        const AdamWScalars& s) {
  if constexpr (std::is_same_v<Out, bf16>) {
    adamw_f32_to_bf16(param, m, v, grad, rounded, n, s);
  } else {
    adamw_f32_to_f16(param, m, v, grad, rounded, n, s);
  }
}

template void adamw_step<float>(float*, float*, float*, const float*, int64_t, const AdamWScalars&);
template void adamw_step<bf16>(float*, float*, float*, const bf16*, int64_t, const AdamWScalars&);
template void adamw_step<f16>(float*, float*, float*, const f16*, int64_t, const AdamWScalars&);
template void adamw_step_rounded<bf16>(float*, float*, float*, const float*, bf16*, int64_t, const AdamWScalars&);
template void adamw_step_rounded<f16>(float*, float*, float*, const float*, f16*, int64_t, const AdamWScalars&);

}  // namespace seqpar::cpu
