// Rotary position embedding (HF "rotate_half" convention), CPU reference: the spec for
// kernels/cuda/rope.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// For every token t, head h and pair (i, i + D/2), i < D/2:
//   angle = float(position_ids[t]) * inv_freq[i]     (an f32 product, as HF computes it)
//   y_i        = x_i c - x_{i+D/2} s
//   y_{i+D/2}  = x_{i+D/2} c + x_i s,     c = cos(angle) * scale, s = sin(angle) * scale
// Rotated in place. scale is transformers' attention_scaling (yarn, longrope: rope_attention_factor
// in arch/llama_config.h); scale = 1 is exact, so it gives the unscaled rotation bit for bit.
// The angle is rounded to f32 on purpose: HF builds its cos/sin tables from f32 angles, and at
// long positions that rounding (up to 4e-3 rad at position 10^5, growing linearly with the
// position) is part of what the model was trained with. cos and sin of that f32 angle are then
// evaluated in double.
// Positions are global (a shard's tokens keep their place in the whole sequence) and restart
// at 0 for each document; nothing here assumes they are contiguous or sorted.
template <typename Real>
void rope_forward(Real* x,                      // (T, H, D) in place
                  const int32_t* position_ids,  // (T)
                  const float* inv_freq,        // (D/2)
                  int64_t T, int64_t H, int64_t D, float scale = 1.0f);

// The transpose of the (scaled) rotation, i.e. the rotation by -angle times scale, in place on dx (=):
//   dx_i       = dy_i c + dy_{i+D/2} s
//   dx_{i+D/2} = dy_{i+D/2} c - dy_i s
template <typename Real>
void rope_backward(Real* dx,                     // (T, H, D) in place: dy in, dx out
                   const int32_t* position_ids,  // (T)
                   const float* inv_freq,        // (D/2)
                   int64_t T, int64_t H, int64_t D, float scale = 1.0f);

}  // namespace seqpar::cpu
