// Rotary position embedding (HF "rotate_half" convention), CPU reference: the spec for
// kernels/cuda/rope.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// For every token t, head h and pair (i, i + D/2), i < D/2:
//   angle = float(position_ids[t]) * inv_freq[i]     (an f32 product, as HF computes it)
//   y_i        = x_i cos(angle) - x_{i+D/2} sin(angle)
//   y_{i+D/2}  = x_{i+D/2} cos(angle) + x_i sin(angle)
// Rotated in place. The angle is rounded to f32 on purpose: HF builds its cos/sin tables from
// f32 angles, and at long positions that rounding (up to 4e-3 rad at position 10^5, growing
// linearly with the position) is part of what the model was trained with. cos and sin of that
// f32 angle are then evaluated in double.
// Positions are global (a shard's tokens keep their place in the whole sequence) and restart
// at 0 for each document; nothing here assumes they are contiguous or sorted.
template <typename Real>
void rope_forward(Real* x,                     // (T, H, D) in place
                  const int32_t* position_ids,  // (T)
                  const float* inv_freq,        // (D/2)
                  int64_t T, int64_t H, int64_t D);

// The transpose of the rotation, i.e. the rotation by -angle, in place on dx (=):
//   dx_i       = dy_i cos + dy_{i+D/2} sin
//   dx_{i+D/2} = dy_{i+D/2} cos - dy_i sin
template <typename Real>
void rope_backward(Real* dx,                    // (T, H, D) in place: dy in, dx out
                   const int32_t* position_ids,  // (T)
                   const float* inv_freq,        // (D/2)
                   int64_t T, int64_t H, int64_t D);

}  // namespace seqpar::cpu
