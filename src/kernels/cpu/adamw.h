// AdamW step with torch.optim.AdamW semantics (single-tensor path, foreach=False), CPU
// reference: the spec for kernels/cuda/adamw.cu. Parameters, moments and the update are f32
// (master weights); the gradient may be f32, bf16 or f16.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace seqpar::cpu {

// The per-step scalars, computed in double from the hyperparameters the way torch computes
// them from Python floats, then rounded once to f32, as torch rounds a Python scalar when it
// meets an f32 tensor.
struct AdamWScalars {
  float decay;                  // 1 - lr * weight_decay
  float one_minus_beta1;        // lerp weight of m towards g
  float beta2;
  float one_minus_beta2;
  float neg_step_size;          // -lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;             // clipping coefficient applied to the gradient (1: none)
};

// step is 1-based. Checks lr, eps, weight_decay >= 0, beta1, beta2 in [0, 1), step >= 1.
AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                           float grad_scale);

// For every element, in torch's order of operations (each line one f32 rounding or more):
//   g  = grad * grad_scale                        clip_grad_norm_'s grads.mul_(clip_coef)
//   p  = p * decay                                param.mul_(1 - lr * weight_decay)
//   m  = lerp(m, g, 1 - beta1)                    exp_avg.lerp_(grad, 1 - beta1)
//   v  = v * beta2;  v = v + (1 - beta2) * g * g  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, ...)
//   denom = sqrt(v) / bias_correction2_sqrt + eps
//   p  = p + (-step_size * m) / denom             param.addcdiv_(exp_avg, denom, value=-step_size)
// torch's lerp is w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w). torch's vectorized CPU loops
// fuse some of these multiply-adds, so agreement with torch is to an ulp, not bit for bit.
// Vectorised for the best of AVX-512, AVX2 and SSE2 the CPU has (chosen when the program loads),
// compiled without contracted multiply-adds, so every instruction set gives the same bits.
template <typename Grad>
void adamw_step(float* param,      // (n) updated
                float* m,          // (n) first moment, updated
                float* v,          // (n) second moment, updated
                const Grad* grad,  // (n) float, bf16 or f16
                int64_t n, const AdamWScalars& s);

// adamw_step on f32 gradients, each updated parameter also rounded (to nearest even) into
// `rounded` (bf16 or f16) in the same pass: the parameters are read once, not once more by a cast
// (the offloaded step's host loop, which hands the compute weights back to the GPU). Bit for bit
// adamw_step followed by cast.
template <typename Out>
void adamw_step_rounded(float* param, float* m, float* v, const float* grad, Out* rounded, int64_t n,
                        const AdamWScalars& s);

}  // namespace seqpar::cpu
